"""RLlib: every AWorld id registered with ``ray.tune.registry``, and a numeric view of text environments.

RLlib's default models need numeric spaces. :class:`MenuActions` turns an env whose useful actions can be listed
(a fixed menu of tool calls and answers) into ``Discrete(len(menu))`` actions with a fixed-length vector of token
ids as the observation::

    from ray.rllib.algorithms.ppo import PPOConfig
    from aworld_gym.trainers.rllib import register_all

    register_all()
    config = PPOConfig().environment("AWorld/MCP-v0", env_config={**env_kwargs, "menu": [call_a, call_b, answer]})
    config = config.callbacks(void_metrics())  # void/rate, void/<kind> and parse/* in RLlib's results

RLlib's EnvRunner owns the episode loop (it calls ``env.step`` itself), so this face is an env, not a run of the
episode driver. A void episode (infrastructure's fault: ``env_crash``, ``tool_timeout``) ends *truncated*, so
RLlib's value bootstrapping continues it from the value estimate instead of scoring a terminal 0; ``info["status"]``
says ``void`` on its last step, and :func:`void_metrics` counts it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

import aworld_gym
from aworld_gym.base.errors import ConfigError
from aworld_gym.core.trajectory import VOID, Termination

MENU_KEY = "menu"
OBS_TOKENS_KEY = "obs_tokens"


def byte_tokens(text: str) -> list[int]:
    """The default tokenizer: UTF-8 bytes shifted by one (0 is padding); vocabulary 257, nothing to download."""
    return [b + 1 for b in text.encode("utf-8")]


class MenuActions(gym.Wrapper):
    """Discrete actions from a menu of action texts; observations as the last ``obs_tokens`` token ids.

    Args:
        env: a text-action AWorld env.
        menu: the action texts (e.g. ``<tool_call>...</tool_call>`` calls and ``<answer>...</answer>`` answers);
            action ``i`` sends ``menu[i]``; an entry may also be a callable ``(unwrapped env) -> text`` that reads
            what the agent could (the question, the last tool result), e.g. a call on the question's numbers.
        obs_tokens: observation length; the conversation's latest tokens are kept, left-padded with 0.
        tokenize: ``text -> ids`` (default: bytes + 1); ``vocab_size`` bounds the ids.
    """

    def __init__(
        self,
        env: gym.Env[str, str],
        menu: Sequence[str | Callable[[Any], str]],
        obs_tokens: int = 256,
        tokenize: Callable[[str], list[int]] = byte_tokens,
        vocab_size: int = 257,
    ) -> None:
        super().__init__(env)
        if not menu:
            raise ConfigError("menu must list at least one action text")
        self.menu = list(menu)
        self.obs_tokens = obs_tokens
        self.tokenize = tokenize
        self.action_space = gym.spaces.Discrete(len(self.menu))
        self.observation_space = gym.spaces.Box(0.0, float(vocab_size - 1), shape=(obs_tokens,), dtype=np.float32)
        self._history: list[int] = []

    def _obs(self, text: str) -> np.ndarray:
        self._history = (self._history + self.tokenize(text))[-self.obs_tokens :]
        out = np.zeros(self.obs_tokens, dtype=np.float32)
        if self._history:
            out[-len(self._history) :] = self._history
        return out

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._history = []
        return self._obs(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        entry = self.menu[int(action)]
        text = entry if isinstance(entry, str) else entry(self.env.unwrapped)
        obs, reward, terminated, truncated, info = self.env.step(text)
        self._history += self.tokenize(text)
        if truncated and info.get("truncation_reason") in Termination.VOID:
            info = {**info, "status": VOID}
        return self._obs(obs), float(reward), terminated, truncated, info


def make_env(env_id: str, env_config: Mapping[str, Any] | None = None) -> gym.Env[Any, Any]:
    """``gym.make(env_id, **env_config)``; with ``menu`` in the config, wrapped in :class:`MenuActions`."""
    config = dict(env_config or {})  # RLlib's EnvContext is a dict with extra attributes
    menu = config.pop(MENU_KEY, None)
    obs_tokens = int(config.pop(OBS_TOKENS_KEY, 256))
    env = gym.make(env_id, **config)
    return MenuActions(env, menu, obs_tokens=obs_tokens) if menu is not None else env


def register_all() -> list[str]:
    """Register every AWorld id with ``ray.tune.registry.register_env``; returns the ids."""
    import functools

    from ray.tune.registry import register_env

    ids = aworld_gym.register_envs()
    for env_id in ids:
        register_env(env_id, functools.partial(make_env, env_id))
    return ids


def void_metrics() -> type:
    """An ``RLlibCallback`` class logging ``void/rate`` (the share of episodes that ended for infrastructure reasons)
    and ``void/<kind>`` counts, for ``config.callbacks(void_metrics())``; and each episode's parse health (from its
    steps' infos): ``parse/tool_call_turns`` and ``parse/failure_turns`` (the episode's shares, averaged over
    episodes), ``parse/no_tool_call_episodes`` (the share of episodes) and ``parse/unknown_tools`` (calls, summed)."""
    from ray.rllib.callbacks.callbacks import RLlibCallback

    from aworld_gym.rollout.health import episode_health, info_turn

    class VoidMetrics(RLlibCallback):
        def on_episode_end(self, *, episode: Any, metrics_logger: Any = None, **kwargs: Any) -> None:
            kind = (episode.get_infos(-1) or {}).get("truncation_reason") if episode.is_truncated else None
            void = kind in Termination.VOID
            if metrics_logger is None:
                return
            metrics_logger.log_value("void/rate", float(void), reduce="mean")
            if void:
                metrics_logger.log_value(f"void/{kind}", 1.0, reduce="sum")
            # the steps' infos (a step's has "tool_calls"; reset's has not)
            steps = [info for info in episode.get_infos() if isinstance(info, dict) and "tool_calls" in info]
            health = episode_health({"turns": [info_turn(info) for info in steps]})
            if health.turns:
                metrics_logger.log_value("parse/tool_call_turns", health.tool_turns / health.turns, reduce="mean")
                metrics_logger.log_value("parse/failure_turns", health.failed_turns / health.turns, reduce="mean")
            metrics_logger.log_value("parse/no_tool_call_episodes", float(health.tool_turns == 0), reduce="mean")
            metrics_logger.log_value("parse/unknown_tools", float(health.unknown_tools), reduce="sum")

    return VoidMetrics
