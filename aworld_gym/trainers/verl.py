"""verl (>= 0.9) agent loop: AWorld environments, multi-turn, token-in/token-out, registered as ``aworld_agent``.

verl runs ``AgentLoopBase.run`` once per sample inside its agent-loop workers, with ``server_manager.generate``
(token ids in, token ids and logprobs out) on its vLLM/SGLang servers. This loop resets an AWorld env, renders its
system prompt and first observation with the tokenizer's chat template, and then alternates: generate (the
model's ids kept exactly as sampled, mask 1) and ``await env.astep`` (the env's answer rendered by the chat
template and appended as ids, mask 0), until the env ends the episode or ``rollout.response_length`` tokens are
spent. The env's summed reward is the trajectory's ``reward_score`` (verl puts it on the last token). The episode is
the episode driver's token mode (:mod:`aworld_gym.rollout.driver`), the same loop as every other face's, on envs of
the one env pool; GRPO groups (verl's ``uid``) are collected by the one group gate. A void sample (the env crashed,
a server did not answer: infrastructure's fault) is masked (``response_mask`` all 0, and the group's mean reward as
its score so the group's baseline does not move), never a silent reward 0; with ``algorithm.adv_estimator=aworld_grpo``
(:mod:`aworld_gym.trainers.verl_advantage`) it is also left out of the group's std, which verl's ``grpo`` counts.

Select it per row (``agent_name: aworld_agent`` in the dataset) or as the default
(``actor_rollout_ref.rollout.agent.default_agent_loop=aworld_agent``), and give the env through the agent-loop
YAML (``actor_rollout_ref.rollout.agent.agent_loop_config_path``, see ``recipes/aworld_agent_loop.yaml``) or
per row in ``extra_info``: ``env_id``, ``env_kwargs``, ``task_id`` / ``task_index`` / ``task``, ``seed``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

import aworld_gym  # noqa: F401 - registers the ids
from aworld_gym.base.errors import ConfigError, last_line
from aworld_gym.core.trajectory import Trajectory
from aworld_gym.rollout.groups import check_void_policy
from aworld_gym.rollout.pool import EnvPools, run_pooled
from aworld_gym.rollout.tokens import ChatTokens, TokenMode
from aworld_gym.trainers.seam.groups import member_of
from aworld_gym.trainers.seam.overflow import PER_SAMPLE
from aworld_gym.trainers.seam.rows import row_env
from aworld_gym.trainers.seam.token_rollout import episode_options
from aworld_gym.trainers.verl_advantage import NAME as MASKED_GRPO  # noqa: F401 - registers verl's aworld_grpo
from aworld_gym.trainers.verl_data import AGENT_NAME

logger = logging.getLogger(__name__)


POOL = EnvPools()
NEEDS = "extra_info.env_id / env_factory in the data, or env_id / env_factory in its YAML"
_CHATS: dict[int, ChatTokens] = {}


def _chat(tokenizer: Any, kwargs: Mapping[str, Any]) -> ChatTokens:
    key = id(tokenizer)
    if key not in _CHATS:
        _CHATS[key] = ChatTokens(tokenizer, dict(kwargs))
    return _CHATS[key]


def _load_factory(spec: Any) -> Any:
    """A factory from a callable or its import path ``"package.module:function"``; ``None`` for none."""
    if spec is None or callable(spec):
        return spec
    module, _, attr = str(spec).partition(":")
    if not module or not attr:
        raise ConfigError(f"env_factory must be a callable or 'package.module:function', got {spec!r}")
    import importlib

    return getattr(importlib.import_module(module), attr)


def _plain(obj: Any) -> dict[str, Any]:
    """A plain dict from a dict or an OmegaConf DictConfig (what hydra hands the YAML's values over as)."""
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(obj, DictConfig):
            return dict(OmegaConf.to_container(obj, resolve=True))  # type: ignore[arg-type]
    except ImportError:  # pragma: no cover - verl always brings omegaconf
        pass
    return dict(obj)


def finish_reason(stop_reason: str | None) -> str | None:
    """The driver's finish reason from ``TokenOutput.stop_reason``: verl's vLLM server says ``completed`` both for a
    stop and for a reply cut at ``max_tokens`` (then the driver tells them apart by the eos token and the length),
    ``aborted`` for an aborted generation, and its partial-rollout client ``length``."""
    if stop_reason in ("aborted", "abort"):
        return "abort"
    return "length" if stop_reason == "length" else None


@register(AGENT_NAME)
class AWorldAgentLoop(AgentLoopBase):
    """Runs one AWorld episode per sample through verl's ``server_manager.generate``.

    Args (from the agent-loop YAML entry, besides verl's own):
        env_id: the default environment (a row's ``extra_info.env_id`` wins).
        env_factory: instead of an id, a zero-argument factory returning an env (wrappers included), or its import
            path ``"package.module:make_env"`` (what a YAML file can hold); a row's ``extra_info.env_factory`` wins.
        env_kwargs: ``gym.make`` kwargs (merged under a row's ``extra_info.env_kwargs``), with an id only.
        void_policy: ``"mask"`` (default), ``"retry"`` (``retry_void`` re-runs, default 2, then masked) or ``"zero"``.
        max_model_len: the model's context (default: ``rollout.max_model_len``): a turn that would not fit ends the
            episode with ``context_limit``.
    """

    def __init__(
        self,
        *args: Any,
        env_id: str | None = None,
        env_factory: Any = None,
        env_kwargs: Mapping[str, Any] | None = None,
        void_policy: str = "mask",
        retry_void: int | None = None,
        max_model_len: int | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("tools", None)  # verl's own tool list: our tools are the env's MCP servers
        super().__init__(*args, **kwargs)
        self.env_id = env_id
        self.env_factory = env_factory
        self.env_kwargs = _plain(env_kwargs or {})
        self.void_policy = check_void_policy(void_policy)
        self.retry_void = (2 if void_policy == "retry" else 0) if retry_void is None else int(retry_void)
        # the context verl's servers have (its rollout config's max_model_len, when it sets one)
        configured = self.rollout_config.get("max_model_len", None) if hasattr(self.rollout_config, "get") else None
        self.max_model_len = max_model_len or (int(configured) if configured else None)
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        uid = kwargs.get("uid")
        key = None if uid is None else str(uid)
        traj, reward, timing = await member_of(key, lambda: self._episode(sampling_params, **kwargs), self.void_policy)
        return self._output(traj, reward, timing)

    async def _episode(
        self, sampling_params: dict[str, Any], **kwargs: Any
    ) -> tuple[Trajectory, Any, dict[str, float]]:
        """One episode through the driver; its trajectory, the env's group hooks and the timings."""
        extra = dict(kwargs.get("extra_info") or {})
        factory = _load_factory(extra.get("env_factory") or (None if extra.get("env_id") else self.env_factory))
        env_id, env_kwargs = (factory, {}) if factory else row_env(extra, self.env_id, self.env_kwargs, face="verl",
                                                                   needs=NEEDS)  # fmt: skip
        pool = POOL.get(env_id, env_kwargs)
        request_id = uuid.uuid4().hex
        timing = {"generate": 0.0}
        self._logprobs = self._config_logprobs()

        async def generate(ids: list[int], max_new: int) -> tuple[list[int], list[float] | None]:
            t = time.perf_counter()
            out = await self.server_manager.generate(
                request_id=request_id, prompt_ids=ids, sampling_params={**sampling_params, "max_tokens": max_new}
            )
            timing["generate"] += time.perf_counter() - t
            self._logprobs = self._logprobs or out.log_probs is not None
            return list(out.token_ids), out.log_probs, finish_reason(out.stop_reason)

        cap = sampling_params.get("max_tokens")
        mode = TokenMode(_chat(self.tokenizer, self.apply_chat_template_kwargs), generate, self.response_length,
                         max_new_tokens=int(cap) if cap else None, max_model_len=self.max_model_len,
                         cap_prompt=self._cap_text_prompt_length)  # fmt: skip
        traj = await run_pooled(pool, None, env_id=env_id if isinstance(env_id, str) else "", seed=extra.get("seed"),
                                options=episode_options(extra, kwargs.get("raw_prompt")), group=None if kwargs.get("uid") is None else str(kwargs["uid"]),
                                tokens=mode, retry_void=self.retry_void)  # fmt: skip
        PER_SAMPLE.check([(traj, mode)], batch=False)
        if traj.error:
            logger.warning("aworld_agent: a %s episode: %s", traj.termination, last_line(traj.error, 2000))
        return traj, pool.group_hooks, timing

    def _config_logprobs(self) -> bool:
        """Whether verl asked its servers for logprobs (then every sample carries them, zeros where none)."""
        return bool(self.rollout_config.get("calculate_log_probs", False))

    def _output(self, traj: Trajectory, reward: float, timing: dict[str, float]) -> AgentLoopOutput:
        n = self.response_length
        tokens = traj.tokens
        eos = self.tokenizer.eos_token_id
        prompt = list(tokens.prompt_ids) if tokens is not None and tokens.prompt_ids else [eos]
        if tokens is not None and tokens.completion_ids:
            ids, mask, lps = tokens.completion_ids[:n], tokens.mask[:n], tokens.logprobs[:n]
        else:  # the env never started: one masked token
            ids, mask, lps = [eos], [0], [0.0]
        if traj.weight <= 0:
            mask = [0] * len(ids)  # a void sample: nothing of it is trained on
        model_turns, env_turns = (tokens.model_turns, tokens.env_turns) if tokens is not None else (0, 0)
        rec = traj.to_record()
        return AgentLoopOutput(
            prompt_ids=prompt,
            response_ids=ids,
            response_mask=mask,
            # present whenever the server returned logprobs, so that a batch never mixes None and tensors
            response_logprobs=lps if self._logprobs else None,
            reward_score=reward,
            # the prompt, every model turn and every env answer that went into the token sequence
            num_turns=1 + model_turns + env_turns,
            metrics=AgentLoopMetrics(generate_sequences=timing["generate"], tool_calls=traj.timings.get("env_s", 0.0)),
            extra_fields={
                "env_id": traj.env_id,
                "task_id": traj.task_id,
                "score": traj.score,
                "reward": traj.reward,
                "termination": traj.termination or "",
                "status": traj.status,
                "weight": traj.weight,
                "terminated": traj.terminated,
                "reward_components": dict(rec["reward_components"]),
                "group_reward_components": dict(traj.group_reward_components),
                "error": last_line(traj.error, 2000),
            },
        )
