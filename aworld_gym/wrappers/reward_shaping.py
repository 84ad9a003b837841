"""RewardShaping: add reward hooks to any AWorld env, on both faces."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, SupportsFloat

import gymnasium as gym

from aworld_gym.core.faces import AsyncWrapper
from aworld_gym.core.rewards import Rubric
from aworld_gym.core.running import Episode


class RewardShaping(AsyncWrapper):
    """Adds reward hooks on top of the env's own reward, identically through ``step`` and ``astep``.

    Step hooks see the env's latest :class:`~aworld_gym.core.rewards.StepContext`; episode hooks run on the step
    that ends the episode and see the env's turn log; group hooks are run by the collector and the trainer
    adapters on complete GRPO groups (:func:`group_hooks` finds them). Sync hooks, async hooks (awaited on the
    async face) and weights work as in the env itself (:mod:`aworld_gym.core.rewards`).

    Args:
        env: an AWorld env (its unwrapped env runs an :class:`~aworld_gym.core.running.Episode` as ``episode``;
            on another env the wrapper adds nothing).
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
        episode = self._episode()
        if episode is None or episode.last_context is None:
            return out
        ctx, run = episode.last_context, self.unwrapped.hub.run_sync  # type: ignore[attr-defined]
        out = episode.add_scores(out, self.rubric.score(self.rubric.step, ctx, run), replace=self.replace, own=False)
        if (out[2] or out[3]) and self.rubric.episode:
            scores = self.rubric.score(self.rubric.episode, episode.outer_context(ctx), run)
            out = episode.add_scores(out, scores, own=False)
        return out

    async def astep(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        out = await self.inner.astep(action)
        episode = self._episode()
        if episode is None or episode.last_context is None:
            return out
        ctx = episode.last_context
        out = episode.add_scores(out, await self.rubric.ascore(self.rubric.step, ctx), replace=self.replace, own=False)
        if (out[2] or out[3]) and self.rubric.episode:
            scores = await self.rubric.ascore(self.rubric.episode, episode.outer_context(ctx))
            out = episode.add_scores(out, scores, own=False)
        return out

    def _episode(self) -> Episode | None:
        """The env's running episode: the shaping is added to its step and written to its turn log through it."""
        episode = getattr(self.env.unwrapped, "episode", None)
        return episode if isinstance(episode, Episode) else None


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
