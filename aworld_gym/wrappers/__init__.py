"""Wrappers: reward shaping (more to come: chat/token views, recording)."""

from aworld_gym.wrappers.reward_shaping import RewardShaping

__all__ = ["RewardShaping"]
