"""Wrappers with both faces: reward shaping, and the turn limit every AWorld id gets from ``gym.make``."""

from aworld_gym.wrappers.reward_shaping import RewardShaping
from aworld_gym.wrappers.turn_limit import TurnLimit

__all__ = ["RewardShaping", "TurnLimit"]
