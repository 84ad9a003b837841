"""One environment, two faces: ``areset`` / ``astep`` / ``aclose`` on every env that ``gym.make`` returns.

Gymnasium's wrappers only have a sync face. :func:`install` (run by ``import aworld_gym``) gives
``gymnasium.Wrapper`` three async methods that walk the wrapper chain layer by layer:

- a wrapper class that defines its own ``astep`` / ``areset`` / ``aclose`` (ours do) uses them;
- a wrapper that does not override ``step`` / ``reset`` / ``close`` passes the call through;
- Gymnasium's standard wrappers (``TimeLimit``, ``OrderEnforcing``, ``PassiveEnvChecker``,
  ``RecordEpisodeStatistics``, and every ``RewardWrapper`` / ``ObservationWrapper`` / ``ActionWrapper`` that keeps
  the base ``step``, e.g. ``TransformReward``, ``ClipReward``, ``TransformObservation``) get async equivalents here;
- any other wrapper that overrides ``step`` / ``reset`` / ``close`` raises :class:`AsyncFaceError`, naming it,
  instead of being silently skipped.

At the bottom of the chain the env's own ``areset``/``astep``/``aclose`` run (an env without them runs its sync
method in a worker thread).

``TimeLimit`` also tells an AWorld env its limit at every reset (``env.unwrapped.limit_turns(n)``), so that the env
itself ends the episode at that turn with ``truncation_reason="turn_limit"`` and runs its episode-end reward hooks:
the turn limit is enforced once, by the env, on both faces.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import gymnasium as gym
from gymnasium.error import ResetNeeded
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker, RecordEpisodeStatistics, TimeLimit

Step = tuple[Any, Any, bool, bool, dict[str, Any]]


class AsyncFaceError(TypeError):
    """A wrapper in the chain changes ``step``/``reset``/``close`` but has no async equivalent."""


def _no_face(layer: Any, method: str) -> AsyncFaceError:
    name = type(layer).__qualname__
    return AsyncFaceError(
        f"wrapper {name} overrides {method}() but has no a{method}(): on the async face (collect, Ray, verl, "
        f"await env.a{method}) it would be skipped, so it is refused. Give {name} an `async def a{method}` that "
        f"awaits `self.env.a{method}(...)`, or use an aworld_gym.wrappers equivalent."
    )


# ----- the bottom of the chain --------------------------------------------------------------------------------
async def _inner_reset(env: Any, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
    fn = getattr(env, "areset", None)
    if fn is not None:
        return await fn(seed=seed, options=options)
    return await asyncio.to_thread(env.reset, seed=seed, options=options)


async def _inner_step(env: Any, action: Any) -> Step:
    fn = getattr(env, "astep", None)
    if fn is not None:
        return await fn(action)
    return await asyncio.to_thread(env.step, action)


async def _inner_close(env: Any) -> None:
    fn = getattr(env, "aclose", None)
    if fn is not None:
        await fn()
    else:
        await asyncio.to_thread(env.close)


# ----- async equivalents of Gymnasium's standard wrappers -----------------------------------------------------
async def _time_limit_reset(w: TimeLimit, seed: int | None, options: dict[str, Any] | None) -> Any:
    _tell_turn_limit(w)
    w._elapsed_steps = 0
    return await _inner_reset(w.env, seed, options)


async def _time_limit_step(w: TimeLimit, action: Any) -> Step:
    obs, reward, terminated, truncated, info = await _inner_step(w.env, action)
    w._elapsed_steps += 1
    if w._elapsed_steps >= w._max_episode_steps:
        truncated = True
    return obs, reward, terminated, truncated, info


async def _order_reset(w: OrderEnforcing, seed: int | None, options: dict[str, Any] | None) -> Any:
    w._has_reset = True
    return await _inner_reset(w.env, seed, options)


async def _order_step(w: OrderEnforcing, action: Any) -> Step:
    if not w._has_reset:
        raise ResetNeeded("Cannot call env.astep() before calling env.areset()")
    return await _inner_step(w.env, action)


class _Replay:
    """Stands in for an env whose step/reset already ran, so that Gymnasium's passive checks see the result."""

    def __init__(self, env: Any, result: Any) -> None:
        self._env, self._result = env, result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return self._result

    def step(self, action: Any) -> Any:
        return self._result


async def _checker_reset(w: PassiveEnvChecker, seed: int | None, options: dict[str, Any] | None) -> Any:
    result = await _inner_reset(w.env, seed, options)
    if not w.checked_reset:
        from gymnasium.utils.passive_env_checker import env_reset_passive_checker

        w.checked_reset = True
        env_reset_passive_checker(_Replay(w.env, result), seed=seed, options=options)
    return result


async def _checker_step(w: PassiveEnvChecker, action: Any) -> Step:
    result = await _inner_step(w.env, action)
    if not w.checked_step:
        from gymnasium.utils.passive_env_checker import env_step_passive_checker

        w.checked_step = True
        env_step_passive_checker(_Replay(w.env, result), action)
    return result


async def _stats_reset(w: RecordEpisodeStatistics, seed: int | None, options: dict[str, Any] | None) -> Any:
    out = await _inner_reset(w.env, seed, options)
    w.episode_start_time, w.episode_returns, w.episode_lengths = time.perf_counter(), 0.0, 0
    return out


async def _stats_step(w: RecordEpisodeStatistics, action: Any) -> Step:
    # The same bookkeeping as RecordEpisodeStatistics.step, around the inner env's async step.
    inner, w.env = w.env, _Replay(w.env, await _inner_step(w.env, action))
    try:
        return RecordEpisodeStatistics.step(w, action)
    finally:
        w.env = inner


async def _reward_step(w: gym.RewardWrapper, action: Any) -> Step:
    obs, reward, terminated, truncated, info = await _inner_step(w.env, action)
    return obs, w.reward(reward), terminated, truncated, info


async def _observation_reset(w: gym.ObservationWrapper, seed: int | None, options: dict[str, Any] | None) -> Any:
    obs, info = await _inner_reset(w.env, seed, options)
    return w.observation(obs), info


async def _observation_step(w: gym.ObservationWrapper, action: Any) -> Step:
    obs, reward, terminated, truncated, info = await _inner_step(w.env, action)
    return w.observation(obs), reward, terminated, truncated, info


async def _action_step(w: gym.ActionWrapper, action: Any) -> Step:
    return await _inner_step(w.env, w.action(action))


async def _pass_reset(w: gym.Wrapper, seed: int | None, options: dict[str, Any] | None) -> Any:
    return await _inner_reset(w.env, seed, options)


async def _pass_step(w: gym.Wrapper, action: Any) -> Step:
    return await _inner_step(w.env, action)


async def _pass_close(w: gym.Wrapper) -> None:
    await _inner_close(w.env)


async def _checker_close(w: PassiveEnvChecker) -> None:
    w.close_called = True
    await _inner_close(w.env)


# The sync method a class resolves to -> its async equivalent. A class that overrides the method gets no entry
# (unless it defines the async method itself) and is refused.
_RESETS: dict[Callable[..., Any], Callable[..., Awaitable[Any]]] = {
    gym.Wrapper.reset: _pass_reset,
    TimeLimit.reset: _time_limit_reset,
    OrderEnforcing.reset: _order_reset,
    PassiveEnvChecker.reset: _checker_reset,
    RecordEpisodeStatistics.reset: _stats_reset,
    gym.ObservationWrapper.reset: _observation_reset,
}
_STEPS: dict[Callable[..., Any], Callable[..., Awaitable[Any]]] = {
    gym.Wrapper.step: _pass_step,
    TimeLimit.step: _time_limit_step,
    OrderEnforcing.step: _order_step,
    PassiveEnvChecker.step: _checker_step,
    RecordEpisodeStatistics.step: _stats_step,
    gym.RewardWrapper.step: _reward_step,
    gym.ObservationWrapper.step: _observation_step,
    gym.ActionWrapper.step: _action_step,
}
_CLOSES: dict[Callable[..., Any], Callable[..., Awaitable[Any]]] = {
    gym.Wrapper.close: _pass_close,
    PassiveEnvChecker.close: _checker_close,
}


def _resolve(table: dict[Callable[..., Any], Any], layer: Any, method: str) -> Any:
    fn = table.get(getattr(type(layer), method))
    if fn is None:
        raise _no_face(layer, method)
    return fn


# ----- what gymnasium.Wrapper gets ----------------------------------------------------------------------------
async def _wrapper_areset(
    self: gym.Wrapper, *, seed: int | None = None, options: dict[str, Any] | None = None
) -> tuple[Any, dict[str, Any]]:
    """Async :meth:`reset` of this wrapper (see :mod:`aworld_gym.core.faces`)."""
    return await _resolve(_RESETS, self, "reset")(self, seed, options)


async def _wrapper_astep(self: gym.Wrapper, action: Any) -> Step:
    """Async :meth:`step` of this wrapper (see :mod:`aworld_gym.core.faces`)."""
    return await _resolve(_STEPS, self, "step")(self, action)


async def _wrapper_aclose(self: gym.Wrapper) -> None:
    """Async :meth:`close` of this wrapper (see :mod:`aworld_gym.core.faces`)."""
    await _resolve(_CLOSES, self, "close")(self)


def check_async(env: Any) -> None:
    """Raise :class:`AsyncFaceError` if any wrapper of ``env`` has no async face (checked before an episode runs),
    including a subclass that overrides ``step`` below the class whose ``astep`` it would inherit."""
    layer = env
    while isinstance(layer, gym.Wrapper):
        for method, table in (("reset", _RESETS), ("step", _STEPS), ("close", _CLOSES)):
            if getattr(type(layer), "a" + method) is _FACES[method]:
                _resolve(table, layer, method)
            elif _overridden_below(type(layer), method):
                raise _no_face(layer, method)
        layer = layer.env


def _owner(cls: type, name: str) -> type | None:
    return next((c for c in cls.__mro__ if name in c.__dict__), None)


def _overridden_below(cls: type, method: str) -> bool:
    """``method`` is defined further down the class tree than the ``a<method>`` the class inherits."""
    sync, coro = _owner(cls, method), _owner(cls, "a" + method)
    return sync is not None and coro is not None and sync is not coro and issubclass(sync, coro)


_FACES = {"reset": _wrapper_areset, "step": _wrapper_astep, "close": _wrapper_aclose}


def _tell_turn_limit(w: TimeLimit) -> None:
    """A TimeLimit tells an AWorld env its limit, so the env ends (and labels, and scores) that turn itself."""
    tell = getattr(w.unwrapped, "limit_turns", None)
    if tell is not None:
        tell(w._max_episode_steps)


_sync_time_limit_reset = TimeLimit.reset


def _time_limit_sync_reset(self: TimeLimit, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
    _tell_turn_limit(self)
    return _sync_time_limit_reset(self, seed=seed, options=options)


def install() -> None:
    """Give ``gymnasium.Wrapper`` its async face (idempotent; adds methods only where none exist)."""
    if getattr(gym.Wrapper, "_aworld_faces", False):
        return
    for name, fn in (("areset", _wrapper_areset), ("astep", _wrapper_astep), ("aclose", _wrapper_aclose)):
        if not hasattr(gym.Wrapper, name):
            setattr(gym.Wrapper, name, fn)
    _RESETS[_time_limit_sync_reset] = _time_limit_reset
    TimeLimit.reset = _time_limit_sync_reset  # type: ignore[method-assign]
    gym.Wrapper._aworld_faces = True  # type: ignore[attr-defined]
