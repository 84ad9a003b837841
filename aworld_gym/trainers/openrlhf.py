"""OpenRLHF (>= 0.11) agent faces: ``--train.agent_func_path`` pointing at this file loads :class:`AgentExecutor`.

- :class:`AgentExecutor` (token-exact, the recommended face): ``execute(prompt, label, sampling_params, max_length,
  hf_tokenizer, llm_engine)`` runs one AWorld episode through the episode driver's token mode, each model turn one
  ``llm_engine.generate(token_ids, sampling_params)`` call, and returns OpenRLHF's response dict:
  ``observation_tokens`` (prompt, model and env ids), ``action_ranges`` (the model's spans only),
  ``rollout_log_probs`` (aligned with the tokens, 0 outside the model's spans), ``reward``, ``scores``,
  ``truncated``, ``extra_logs`` (``void``, ``weight``, ``turns`` and the episode's ``parse/*`` health, which
  OpenRLHF logs). A void episode has no action range (nothing trained) and, as its reward, its group's live mean
  (the samples of one ``generate_responses`` call), so the group baseline does not move; ``extra_logs["void"]``
  counts it.
- :class:`AWorldAgentInstance` (text, for OpenRLHF's own ``MultiTurnAgentExecutor``): ``reset`` / ``step`` with
  ``rewards``, ``scores``, ``environment_feedback`` (the env's turn rendered by the chat template), ``done``.

The env comes from the row's ``label`` when it is a JSON object (``env_id``, ``env_kwargs``, ``task_id`` /
``task_index`` / ``task``, ``seed``), else from ``$AWORLD_ENV_ID`` / ``$AWORLD_ENV_KWARGS`` (the prompt becomes a task
without a reference answer).
"""

from __future__ import annotations

import json
import os
from copy import deepcopy
from typing import Any

from openrlhf.utils.agent import AgentExecutorBase, AgentInstanceBase

import aworld_gym  # noqa: F401 - registers the ids
from aworld_gym.base.errors import ConfigError
from aworld_gym.core.trajectory import Termination, Trajectory
from aworld_gym.rollout.groups import finish_group
from aworld_gym.rollout.health import health_metrics
from aworld_gym.rollout.pool import EnvPools, run_pooled
from aworld_gym.rollout.text_episode import TextEpisode
from aworld_gym.rollout.tokens import ChatTokens, TokenMode
from aworld_gym.trainers.seam.groups import member_of
from aworld_gym.trainers.seam.overflow import PER_SAMPLE
from aworld_gym.trainers.seam.rows import TRUNCATING, environ_env, row_env
from aworld_gym.trainers.seam.token_rollout import episode_options

POOL = EnvPools()


def label_env(label: Any) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(env id, env kwargs, the row's task fields) from a JSON ``label`` or the environment variables."""
    info: dict[str, Any] = {}
    if isinstance(label, dict):
        info = dict(label)
    elif isinstance(label, str) and label.strip().startswith("{"):
        info = json.loads(label)
    env_id, env_kwargs = row_env(
        info, *environ_env(), face="OpenRLHF", needs="a JSON label with env_id, or $AWORLD_ENV_ID"
    )
    return env_id, env_kwargs, info


def spans(mask: list[int], offset: int) -> list[tuple[int, int]]:
    """The runs of 1 in ``mask`` as ``(start, end)`` positions, shifted by ``offset``."""
    out, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            out.append((offset + start, offset + i))
            start = None
    return out


class AgentExecutor(AgentExecutorBase):
    """Token-exact AWorld episodes for OpenRLHF (see the module's docstring)."""

    async def execute(
        self, prompt: Any, label: Any, sampling_params: Any, max_length: int, hf_tokenizer: Any, llm_engine: Any,
        images: Any = None,
    ) -> dict[str, Any]:  # fmt: skip
        key = str(id(sampling_params))  # the samples of one generate_responses call share it: one GRPO group
        traj, reward, _ = await member_of(
            key, lambda: self._episode(prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine)
        )
        return response(prompt, label, images, traj, reward, logprobs=sampling_params.logprobs is not None)

    async def _episode(
        self, prompt: Any, label: Any, sampling_params: Any, max_length: int, hf_tokenizer: Any, llm_engine: Any
    ) -> tuple[Trajectory, Any, None]:
        env_id, env_kwargs, info = label_env(label)

        async def generate(ids: list[int], max_new: int) -> Any:
            params = deepcopy(sampling_params)
            params.max_tokens = max_new
            out = (await llm_engine.generate(ids, params)).outputs[0]
            ids_out = list(out.token_ids)
            lps = [lp[t].logprob for lp, t in zip(out.logprobs, ids_out, strict=True)] if out.logprobs else None
            return ids_out, lps, out.finish_reason

        per_turn = getattr(sampling_params, "max_tokens", None)
        mode = TokenMode(ChatTokens(hf_tokenizer), generate, int(max_length), max_new_tokens=per_turn,
                         max_model_len=int(max_length))  # fmt: skip
        pool = POOL.get(env_id, env_kwargs)
        traj = await run_pooled(pool, None, env_id=env_id, seed=info.get("seed"),
                                options=episode_options(info, prompt), tokens=mode)  # fmt: skip
        PER_SAMPLE.check([(traj, mode)], batch=False)
        return traj, pool.group_hooks, None


def response(prompt: Any, label: Any, images: Any, traj: Trajectory, reward: float, logprobs: bool) -> dict[str, Any]:
    """OpenRLHF's response dict for one episode (a void one: no action range, nothing trained)."""
    tokens = traj.tokens
    prompt_ids = list(tokens.prompt_ids) if tokens is not None else []
    completion = list(tokens.completion_ids) if tokens is not None else []
    ranges = spans(tokens.mask, len(prompt_ids)) if tokens is not None and traj.weight > 0 else []
    log_probs = [0.0] * len(prompt_ids) + (list(tokens.logprobs) if tokens is not None else []) if logprobs else None
    return {
        "prompt": prompt, "label": label, "images": images, "mm_train_inputs": None,
        "reward": reward, "scores": traj.score if traj.score is not None else reward,
        "observation_tokens": prompt_ids + completion, "action_ranges": ranges, "rollout_log_probs": log_probs,
        "truncated": traj.termination in TRUNCATING,
        "extra_logs": {"void": float(traj.void), "weight": traj.weight, "turns": float(traj.num_turns),
                       **health_metrics([traj])},
    }  # fmt: skip


class AWorldAgentInstance(AgentInstanceBase):
    """One AWorld episode for OpenRLHF's own ``MultiTurnAgentExecutor`` (text turns; the tokenizer from
    ``$AWORLD_TOKENIZER``, a local folder)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from transformers import AutoTokenizer

        folder = os.environ.get("AWORLD_TOKENIZER")
        if not folder:
            raise ConfigError("AWorldAgentInstance renders the env's turns with $AWORLD_TOKENIZER (a tokenizer folder)")
        self.chat = ChatTokens(AutoTokenizer.from_pretrained(folder))
        self.episode: TextEpisode | None = None

    @property
    def trajectory(self) -> Trajectory:
        """The episode's trajectory (an empty one before the first reset)."""
        return self.episode.trajectory if self.episode is not None else Trajectory(policy="openrlhf")

    async def reset(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        env_id, env_kwargs, info = label_env(states.get("label"))
        if self.episode is not None:  # an episode left unfinished: its env goes back
            self.episode.end(Termination.POLICY_ERROR, "OpenRLHF reset the agent before its episode ended")
            await self.episode.close()
        self.episode = TextEpisode(POOL.get(env_id, env_kwargs), env_id, "openrlhf")
        turn = await self.episode.start(info.get("seed"), episode_options(info, states["observation"]))
        if turn.error is not None:  # a void episode: its first step ends it
            return {"observation": turn.observation}
        return {"observation": self.chat.decode(self.chat.prompt_ids(turn.messages))}

    async def step(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        import torch

        episode, text = self.episode, str(states["action_text"]).removesuffix(self.chat.eos_token)
        if episode is None:
            raise RuntimeError("step before reset")
        turn = await episode.step(text) if episode.running else None
        traj = episode.trajectory
        feedback = "" if traj.done or turn is None else self.chat.decode(self.chat.env_turn_ids(turn.messages))
        if traj.done:
            finish_group(None, [traj])
            await episode.close()
        reward = turn.reward if turn is not None and not traj.void else 0.0
        return {"rewards": torch.tensor(float(reward)), "scores": torch.tensor(float(traj.score or 0.0)),
                "environment_feedback": feedback, "done": traj.done,
                "extra_logs": {"void": float(traj.void), "weight": traj.weight, **health_metrics([traj])}}  # fmt: skip
