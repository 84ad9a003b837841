"""RewardShaping: add reward hooks to any AWorld env, on both faces."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, SupportsFloat

import gymnasium as gym

from aworld_gym.core.faces import AsyncWrapper
from aworld_gym.core.rewards import EpisodeContext, Rubric, Scores
from aworld_gym.core.trajectory import sum_into


class RewardShaping(AsyncWrapper):
    """Adds reward hooks on top of the env's own reward, identically through ``step`` and ``astep``.

    Step hooks see the env's latest :class:`~aworld_gym.core.rewards.StepContext`; episode hooks run on the step
    that ends the episode and see the env's turn log; group hooks are run by the collector and the trainer
    adapters on complete GRPO groups (:func:`group_hooks` finds them). Sync hooks, async hooks (awaited on the
    async face) and weights work as in the env itself (:mod:`aworld_gym.core.rewards`).

    Args:
        env: an AWorld env (anything whose unwrapped env records ``last_context`` and ``turns``).
        hooks: extra reward hooks.
        replace: drop the env's own components and use only ``hooks``.
    """

    def __init__(self, env: gym.Env[str, str], hooks: Sequence[Any], replace: bool = False) -> None:
        super().__init__(env)
        inner = env.unwrapped
        self.rubric = Rubric(hooks, strict=bool(getattr(inner, "strict", False)))
        self.hooks = self.rubric.hooks
        self.replace = replace

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        out = self.env.step(action)
        ctx = self._ctx()
        if ctx is None:
            return out
        run = self.unwrapped.hub.run_sync  # type: ignore[attr-defined]
        out = self._combine(out, self.rubric.score(self.rubric.step, ctx, run), self.replace)
        if (out[2] or out[3]) and self.rubric.episode:
            out = self._combine(out, self.rubric.score(self.rubric.episode, self._episode(ctx), run), False)
        return out

    async def astep(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        out = await self.inner.astep(action)
        ctx = self._ctx()
        if ctx is None:
            return out
        out = self._combine(out, await self.rubric.ascore(self.rubric.step, ctx), self.replace)
        if (out[2] or out[3]) and self.rubric.episode:
            out = self._combine(out, await self.rubric.ascore(self.rubric.episode, self._episode(ctx)), False)
        return out

    # ----- internals -------------------------------------------------------------------------------------
    def _ctx(self) -> Any:
        return getattr(self.env.unwrapped, "last_context", None)

    def _episode(self, ctx: Any) -> EpisodeContext:
        """The episode so far as this wrapper returned it (the turn log carries every turn's outer reward)."""
        turns = list(getattr(self.env.unwrapped, "turns", []))
        components: dict[str, float] = {}
        for t in turns:
            sum_into(components, t.get("reward_components") or {})
        return EpisodeContext(ctx.task, turns, ctx, float(sum(t.get("reward", 0.0) for t in turns)), components)

    def _combine(
        self, out: tuple[Any, SupportsFloat, bool, bool, dict[str, Any]], scores: Scores, replace: bool
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = out
        components = {} if replace else dict(info.get("reward_components", {}))
        sum_into(components, scores.components)
        info = {**info, "reward_components": components}
        if scores.metrics:
            info["metrics"] = {**info.get("metrics", {}), **scores.metrics}
        if scores.errors:
            info["reward_errors"] = {**info.get("reward_errors", {}), **scores.errors}
        total = float(sum(components.values())) if replace else float(reward) + scores.total
        self._annotate(components, total)
        return obs, total, terminated, truncated, info

    def _annotate(self, components: dict[str, float], total: float) -> None:
        """The env's turn log shows what the outermost env returned for the turn (one log, read by recorders)."""
        turns = getattr(self.env.unwrapped, "turns", None)
        if turns:
            turns[-1]["reward"] = total
            turns[-1]["reward_components"] = dict(components)


def group_hooks(env: Any) -> Rubric | None:
    """The group hooks of ``env`` and of every wrapper around it, as one :class:`Rubric` (``None`` if none)."""
    hooks: list[Any] = []
    strict = False
    layer = env
    while layer is not None:
        rubric = layer.__dict__.get("rubric") if hasattr(layer, "__dict__") else None
        if isinstance(rubric, Rubric):
            hooks += rubric.group
            strict = strict or rubric.strict
        layer = getattr(layer, "env", None) if isinstance(layer, gym.Wrapper) else None
    return Rubric(hooks, strict=strict) if hooks else None
