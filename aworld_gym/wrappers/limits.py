"""Limits: label the truncations made by Gymnasium's ``TimeLimit``."""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
from gymnasium.utils import RecordConstructorArgs


class TruncationReason(gym.Wrapper[str, str, str, str], RecordConstructorArgs):
    """Sets ``info["truncation_reason"] = "turn_limit"`` on truncations that carry no reason.

    ``gym.make`` applies ``TimeLimit`` (``max_episode_steps``) outside the env, so the env cannot label those
    truncations itself; every AWorld id registers this wrapper to run after ``TimeLimit``.
    """

    def __init__(self, env: gym.Env[str, str]) -> None:
        RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if truncated and not terminated and "truncation_reason" not in info:
            info = {**info, "truncation_reason": "turn_limit"}
        return obs, reward, terminated, truncated, info
