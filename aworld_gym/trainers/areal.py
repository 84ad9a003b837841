"""AReaL (>= 1.0): a token-exact ``RolloutWorkflow`` and an agent for AReaL's OpenAI-proxy protocol.

- :class:`AWorldWorkflow` (``RolloutWorkflow.arun_episode(engine, data)``): one AWorld episode through the episode
  driver's token mode, each model turn one ``engine.agenerate(ModelRequest(...))``; returns AReaL's tensors
  (``input_ids``, ``attention_mask``, ``loss_mask``, ``logprobs``, ``versions``, ``rewards``, batch dimension 1) with
  the model's ids as sampled and the env's with loss mask 0. A void episode (infrastructure's fault) returns
  ``None``, which AReaL reads as a rejected trajectory (left out of training and of its group), with
  ``void_policy="mask"``. AReaL's ``GroupedRolloutWorkflow`` runs a GRPO group as ``group_size`` concurrent calls
  with the same ``data`` object: they are one group here, and the env's group reward hooks run once on its live
  members before any member's tensors are returned (their share is in ``rewards``).
- :class:`AWorldAgent` (``async run(data, **extra_kwargs)``, AReaL's preferred agent protocol): AReaL injects
  ``base_url`` (its proxy, which records the tokens) and the episode runs with
  :class:`~aworld_gym.rollout.policies.openai_policy.OpenAIPolicy` pointed at it; returns the episode's reward.

The env comes from the constructor (``env_id``, ``env_kwargs``) or the row (``data["env_id"]``, ``env_kwargs``,
``task_id`` / ``task_index`` / ``task``, ``seed``).
"""

from __future__ import annotations

from typing import Any

from areal.api.io_struct import ModelRequest
from areal.api.workflow_api import RolloutWorkflow

import aworld_gym  # noqa: F401 - registers the ids
from aworld_gym.base.errors import ConfigError
from aworld_gym.core.trajectory import Trajectory
from aworld_gym.rollout.groups import check_void_policy
from aworld_gym.rollout.health import health_metrics
from aworld_gym.rollout.pool import EnvPools, run_pooled
from aworld_gym.rollout.tokens import ChatTokens, TokenMode
from aworld_gym.trainers.seam.groups import member_of
from aworld_gym.trainers.seam.overflow import PER_SAMPLE
from aworld_gym.trainers.seam.rows import row_env
from aworld_gym.trainers.seam.token_rollout import episode_options

POOL = EnvPools()
NEEDS = "env_id= or the row's env_id"


def per_token_versions(mask: list[int], turns: list[list[int]]) -> list[int]:
    """Each model token's weights version (the i-th run of mask 1 is turn i's), -1 for the env's tokens."""
    out, run, pos = [], -1, 0
    for i, m in enumerate(mask):
        if m and (i == 0 or not mask[i - 1]):
            run, pos = run + 1, 0
        if m:
            versions = turns[run] if run < len(turns) else []
            out.append(int(versions[pos]) if pos < len(versions) else -1)
            pos += 1
        else:
            out.append(-1)
    return out


def log_episode(traj: Trajectory) -> None:
    """The episode's ``void`` (1 when infrastructure ended it) and parse health (``parse/*``) to AReaL's stats
    tracker, in the workflow's scope (``rollout``, or ``eval-rollout``), where AReaL averages and logs them."""
    from areal.infra import workflow_context
    from areal.utils import stats_tracker

    stats_tracker.get(workflow_context.stat_scope()).scalar(void=float(traj.void), **health_metrics([traj]))


class AWorldWorkflow(RolloutWorkflow):
    """AWorld episodes as AReaL trajectories (see the module's docstring).

    Args:
        gconfig: AReaL's ``GenerationHyperparameters`` (``max_new_tokens`` per turn, ``max_tokens`` in all).
        tokenizer: the policy model's tokenizer.
        env_id, env_kwargs: the env (a row's ``env_id`` / ``env_kwargs`` win).
        void_policy: ``"mask"`` (a void episode is rejected: ``None``) or ``"zero"`` (trained on as reward 0).
    """

    def __init__(self, gconfig: Any, tokenizer: Any, env_id: str | None = None,
                 env_kwargs: dict[str, Any] | None = None, void_policy: str = "mask") -> None:  # fmt: skip
        self.gconfig, self.chat = gconfig, ChatTokens(tokenizer)
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs or {})
        self.void_policy = check_void_policy(void_policy)
        self.last: Trajectory | None = None

    async def arun_episode(self, engine: Any, data: dict[str, Any]) -> dict[str, Any] | None:
        # the members of one group get the same data object from AReaL's GroupedRolloutWorkflow
        traj, reward, versions = await member_of(str(id(data)), lambda: self._episode(engine, data), self.void_policy)
        self.last = traj
        log_episode(traj)
        if traj.weight <= 0:
            return None  # rejected: AReaL leaves it out of training
        return self._tensors(traj, reward, versions)

    async def _episode(self, engine: Any, data: dict[str, Any]) -> tuple[Trajectory, Any, list[list[int]]]:
        """One episode through the driver's token mode, each turn one ``engine.agenerate``; its trajectory, the
        env's group hooks and each model turn's weights versions."""
        env_id, env_kwargs = row_env(data, self.env_id, self.env_kwargs, face="AReaL", needs=NEEDS)
        turns: list[list[int]] = []

        async def generate(ids: list[int], max_new: int) -> Any:
            req = ModelRequest(input_ids=list(ids), gconfig=self.gconfig.new(n_samples=1, max_new_tokens=max_new),
                               tokenizer=self.chat.tokenizer)  # fmt: skip
            resp = await engine.agenerate(req)  # an "abort" ends the episode as ``abort`` (void: rejected)
            turns.append(list(resp.output_versions))
            return list(resp.output_tokens), list(resp.output_logprobs), resp.stop_reason

        limit = int(self.gconfig.max_tokens)
        mode = TokenMode(
            self.chat, generate, limit, max_new_tokens=int(self.gconfig.max_new_tokens), max_model_len=limit
        )
        pool = POOL.get(env_id, env_kwargs)
        traj = await run_pooled(pool, None, env_id=env_id, seed=data.get("seed"),
                                options=episode_options(data, data.get("messages")), tokens=mode)  # fmt: skip
        PER_SAMPLE.check([(traj, mode)], batch=False)
        return traj, pool.group_hooks, turns

    @staticmethod
    def _tensors(traj: Trajectory, reward: float, turns: list[list[int]]) -> dict[str, Any]:
        """AReaL's tensors of one episode (batch dimension 1)."""
        import torch

        tokens = traj.tokens
        assert tokens is not None
        seq = tokens.prompt_ids + tokens.completion_ids
        n = len(tokens.prompt_ids)
        mask = [0] * n + (tokens.mask if not traj.void else [0] * len(tokens.mask))
        versions = per_token_versions(tokens.mask, turns)
        res = {
            "input_ids": torch.tensor(seq, dtype=torch.int32),
            "logprobs": torch.tensor([0.0] * n + tokens.logprobs, dtype=torch.float32),
            "loss_mask": torch.tensor(mask, dtype=torch.int32),
            "versions": torch.tensor([-1] * n + versions, dtype=torch.int32),
            "rewards": torch.tensor(0.0 if traj.void else reward, dtype=torch.float32),
            "attention_mask": torch.ones(len(seq), dtype=torch.bool),
        }
        return {k: v.unsqueeze(0) for k, v in res.items()}


class AWorldAgent:
    """AReaL's agent protocol: ``await run(data, base_url=..., http_client=...)`` runs one episode with
    :class:`~aworld_gym.rollout.policies.openai_policy.OpenAIPolicy` against AReaL's proxy and returns its reward."""

    def __init__(self, env_id: str | None = None, env_kwargs: dict[str, Any] | None = None, model: str = "default",
                 **policy_kwargs: Any) -> None:  # fmt: skip
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs or {})
        self.model, self.policy_kwargs = model, policy_kwargs
        self.last: Trajectory | None = None

    async def run(self, data: dict[str, Any], **extra_kwargs: Any) -> float:
        from aworld_gym.rollout.policies.openai_policy import OpenAIPolicy

        base_url = extra_kwargs.get("base_url")
        if not base_url:
            raise ConfigError("AWorldAgent needs AReaL's base_url (its OpenAI-compatible proxy)")
        env_id, env_kwargs = row_env(data, self.env_id, self.env_kwargs, face="AReaL", needs=NEEDS)
        policy = OpenAIPolicy(self.model, base_url, extra_kwargs.get("api_key") or "areal", **self.policy_kwargs)
        try:
            traj = await run_pooled(POOL.get(env_id, env_kwargs), policy, env_id=env_id, seed=data.get("seed"),
                                    options=episode_options(data, data.get("messages")))  # fmt: skip
        finally:
            await policy.aclose()  # a policy per episode: its HTTP client goes with it
        self.last = traj
        return 0.0 if traj.void else traj.reward
