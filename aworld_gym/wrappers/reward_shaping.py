"""RewardShaping: add reward hooks to any AWorld env."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, SupportsFloat

import gymnasium as gym

from aworld_gym.core.rewards import RewardHook, apply_hooks


class RewardShaping(gym.Wrapper[str, str, str, str]):
    """Adds reward hooks on top of the env's own reward.

    The env's components stay in ``info["reward_components"]``; the new hooks' components are added to it and
    to the reward. Hooks see the env's latest :class:`~aworld_gym.core.rewards.StepContext`.

    Args:
        env: an AWorld env (anything whose unwrapped env records ``last_context``).
        hooks: extra reward hooks.
        replace: drop the env's own components and use only ``hooks``.
    """

    def __init__(self, env: gym.Env[str, str], hooks: Sequence[RewardHook], replace: bool = False) -> None:
        super().__init__(env)
        self.hooks = list(hooks)
        self.replace = replace

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        ctx = getattr(self.env.unwrapped, "last_context", None)
        if ctx is None:
            return obs, reward, terminated, truncated, info
        extra = apply_hooks(self.hooks, ctx)
        components = {} if self.replace else dict(info.get("reward_components", {}))
        for k, v in extra.items():
            components[k] = components.get(k, 0.0) + v
        info = {**info, "reward_components": components}
        return obs, float(sum(components.values())), terminated, truncated, info
