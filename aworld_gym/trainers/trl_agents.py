"""TRL's ``rollout_func`` over an agent program we did not write (issue 50): GRPO trains the model behind it.

``make_agent_rollout_func(env_id, agent, **env_kwargs)`` runs, per prompt, one episode whose policy is the agent
program (:class:`~aworld_gym.endpoint.agents.AgentPolicy`); its model calls go to a token-recording endpoint
(:class:`~aworld_gym.endpoint.server.TokenEndpoint`, on 127.0.0.1 for the rollout function's life) whose backend
samples with the trainer's own model, so the recorded ids and logprobs are the policy's. An episode whose calls form
one sequence (:mod:`aworld_gym.endpoint.continuation`, :func:`~aworld_gym.endpoint.merge.merge_calls`) is trained on
all its sampled ids (its tool results and template markers masked); one whose agent rewrote its history is kept as
separate samples, which TRL's one completion per prompt cannot hold: it is trained on nothing (mask 0) and says so
(``agent_samples`` in its record; ``agent/unmerged`` in the logs). A sequence longer than ``max_completion_length``
is cut there (its first tokens kept, exactly). Rewards, groups, void masking, parse health and ``out`` are the
token rollout function's (:func:`~aworld_gym.trainers.trl.make_rollout_func`).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aworld_gym.core.trajectory import Trajectory
from aworld_gym.endpoint.agents import AgentPolicy, AgentProgram
from aworld_gym.endpoint.backends import Generated, Sampling
from aworld_gym.endpoint.server import TokenEndpoint
from aworld_gym.rollout.envs import EnvLike
from aworld_gym.rollout.pool import run_pooled
from aworld_gym.rollout.tokens import ChatTokens
from aworld_gym.trainers.trl import AWorldRolloutFunc


class TrainerBackend:
    """The endpoint's backend: sampling with the trainer's model as it is now (bound at each batch)."""

    concurrent = False

    def __init__(self) -> None:
        self.trainer: Any = None
        self.tokenizer: Any = None
        self.weights_version: int | None = None
        self._lock = threading.Lock()

    def bind(self, trainer: Any, tokenizer: Any) -> None:
        self.trainer, self.tokenizer = trainer, tokenizer
        self.weights_version = int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0)

    @property
    def context(self) -> int | None:
        config = getattr(getattr(self.trainer, "model", None), "config", None)
        n = getattr(config, "max_position_embeddings", None)
        return int(n) if isinstance(n, int) else None

    def generate(self, prompt_ids: list[int], sampling: Sampling) -> Generated:
        from aworld_gym.trainers.trl_generate import hf_generate

        with self._lock:  # one generation at a time: the model is the trainer's
            ((ids, logprobs),) = hf_generate(self.trainer)([prompt_ids], sampling.max_tokens)
        eos = self.tokenizer.eos_token_id
        if eos in ids:  # a batch of one: nothing after its end-of-turn token
            ids = ids[: ids.index(eos) + 1]
        logprobs = list(logprobs or [0.0] * len(ids))[: len(ids)]
        return Generated(list(ids), logprobs, "stop" if ids and ids[-1] == eos else "length")


class AgentRolloutFunc(AWorldRolloutFunc):
    """``rollout_func(prompts, trainer) -> dict`` for ``GRPOTrainer`` over an agent program; see the module."""

    def __init__(self, env_id: EnvLike, agent: AgentProgram, env_kwargs: dict[str, Any], *,
                 max_tokens: int | None = None, **kw: Any) -> None:  # fmt: skip
        super().__init__(env_id, env_kwargs, **kw)
        self.agent = agent
        self.max_tokens = max_tokens
        self.backend = TrainerBackend()
        self.endpoint: TokenEndpoint | None = None
        self.policy: AgentPolicy | None = None

    def close(self) -> None:
        if self.policy is not None:
            self.policy.close()
        if self.endpoint is not None:
            self.endpoint.stop()
        super().close()

    def _episodes(self, trainer: Any, chat: ChatTokens, options: list[dict[str, Any]], keys: list[Any]
                  ) -> list[Trajectory]:  # fmt: skip
        budget = int(trainer.max_completion_length)
        self.backend.bind(trainer, chat.tokenizer)
        if self.endpoint is None:
            self.endpoint = TokenEndpoint(self.backend, chat.tokenizer, max_tokens=self.max_tokens or budget,
                                          chat_template_kwargs=chat.kwargs)  # fmt: skip
            self.endpoint.start()
            self.policy = AgentPolicy(self.agent, self.endpoint)
        policy = self.policy

        async def main() -> list[Trajectory]:
            return list(await asyncio.gather(*(
                run_pooled(self.pool, policy, env_id=self.env_id, options=dict(o), sample=i, group=keys[i],
                           retry_void=self.retry_void)
                for i, o in enumerate(options)
            )))  # fmt: skip

        trajectories = self.envs.call(main())
        for traj in trajectories:
            self._fit(traj, budget)
        log = getattr(trainer, "_log_metric", None)
        if log is not None:
            log("agent/unmerged", float(sum("agent_samples" in t.extra for t in trajectories)))
        return trajectories

    def _fit(self, traj: Trajectory, budget: int) -> None:
        """One completion per prompt: the merged sequence, cut at ``budget``; an unmerged episode trains on nothing."""
        samples = traj.extra.pop("token_samples", None)
        if samples is not None:
            traj.extra["agent_samples"] = len(samples)  # kept apart: TRL holds one completion per prompt
            traj.tokens = None
            return
        tokens = traj.tokens
        if tokens is not None and len(tokens.completion_ids) > budget:
            traj.extra["agent_cut"] = len(tokens.completion_ids)
            tokens.completion_ids, tokens.logprobs = tokens.completion_ids[:budget], tokens.logprobs[:budget]
            tokens.mask = tokens.mask[:budget]


def make_agent_rollout_func(env_id: EnvLike, agent: AgentProgram, *, max_tokens: int | None = None,
                            **kwargs: Any) -> AgentRolloutFunc:  # fmt: skip
    """A ``rollout_func`` for ``GRPOTrainer`` whose episodes are played by ``agent`` (``agent(ctx) -> answer``, see
    :mod:`aworld_gym.endpoint.agents`) on ``env_id``, its model calls sampled by the trainer's model.

    Args:
        max_tokens: a model call's limit when the agent gives none (default ``max_completion_length``).
        kwargs: :func:`~aworld_gym.trainers.trl.make_rollout_func`'s (``max_workers``, ``void_policy``,
            ``retry_void``, ``parse_health``, ``out``) and ``gym.make``'s.
    """
    own = ("max_workers", "void_policy", "retry_void", "parse_health", "out")
    options = {k: kwargs.pop(k) for k in own if k in kwargs}
    return AgentRolloutFunc(env_id, agent, kwargs, max_tokens=max_tokens, **options)
