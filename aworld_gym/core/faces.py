"""One environment, two faces, and nothing of Gymnasium patched.

Gymnasium's wrappers have a sync face only, and ``import aworld_gym`` leaves them so: no Gymnasium class gets an
attribute or a replaced method, and no field of a Gymnasium wrapper is written, at import or later. The async face
(``areset`` / ``astep`` / ``aclose``) comes from objects of ours:

- :func:`async_face` gives any env, a user's own wrapper stack included, an object with both faces: the env itself
  where its outermost object has one, else an :class:`AsyncWrapper` around it. The engines and the trainer faces
  drive every env through it (the env pool puts it on each env it makes).

An :class:`AsyncWrapper` runs the stack below it on the async face through a chain of faces built once, when it is
made, one per layer:

- a layer whose class has its own ``areset`` / ``astep`` / ``aclose`` (ours do; a user's may) is awaited as it is;
- a Gymnasium wrapper that keeps ``gymnasium.Wrapper``'s ``step`` / ``reset`` / ``close`` passes the call down;
- Gymnasium's standard wrappers (``TimeLimit``, ``OrderEnforcing``, ``PassiveEnvChecker``,
  ``RecordEpisodeStatistics``, and every ``RewardWrapper`` / ``ObservationWrapper`` / ``ActionWrapper`` that keeps
  the base ``step``, e.g. ``TransformReward``, ``ClipReward``, ``TransformObservation``) run by a table of async
  equivalents that uses only their public API (``reward()``, ``observation()``, ``action()``, ``spec``);
- any other wrapper that overrides ``step`` / ``reset`` / ``close`` is refused with :class:`AsyncFaceError`,
  naming it, when the chain is built (before any episode), instead of being silently skipped.

At the bottom the env's own ``areset`` / ``astep`` / ``aclose`` run (an env without them runs its sync method in a
worker thread).

Each face keeps the bookkeeping of the Gymnasium wrapper it stands for itself (steps counted, reset seen, checks
run, episode statistics), since Gymnasium keeps that state in private fields: drive one episode on one face.
``TimeLimit``'s limit is read from its public ``spec.max_episode_steps``, so a ``TimeLimit`` around an env that
has no spec (made without ``gym.make``) is refused on the async face. ``RecordEpisodeStatistics`` writes its
statistics under ``info["episode"]`` (its default key; the key is not public) and its queues fill on the sync
face only.

The turn limit: an AWorld env ends its last turn itself (``truncation_reason="turn_limit"``, episode hooks run) when
it is told the limit at reset (:func:`tell_turn_limit`, the env's public ``limit_turns``): the async face of any
``TimeLimit`` tells it. Told nothing (the sync face of what ``gym.make`` returns), the env takes its id's registered
``max_episode_steps`` (``gym.spec``), which is the limit of ``gym.make``'s own ``TimeLimit``. What the sync face cannot
see is a limit given to ``gym.make(..., max_episode_steps=M)`` or a ``TimeLimit`` a user adds: it truncates there
without the env knowing (no label, no episode hooks); give the env ``max_turns=M`` too. (``gym.make`` cannot put a
wrapper of ours outermost for every id: Gymnasium refuses a spec's additional wrapper in ``gym.make_vec(...,
vectorization_mode="vector_entry_point")``, how our Ray vector env is made.)
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
Reset = tuple[Any, dict[str, Any]]
STATS_KEY = "episode"  # RecordEpisodeStatistics' default info key, what its async face writes

__all__ = ["AsyncFaceError", "AsyncWrapper", "async_face", "check_async", "tell_turn_limit"]


class AsyncFaceError(TypeError):
    """A wrapper in the chain changes ``step``/``reset``/``close`` but has no async equivalent."""


def _no_face(layer: Any, method: str, why: str = "") -> AsyncFaceError:
    name = type(layer).__qualname__
    return AsyncFaceError(
        why
        or f"wrapper {name} overrides {method}() but has no a{method}(): on the async face (collect, Ray, verl, "
        f"await env.a{method}) it would be skipped, so it is refused. Subclass aworld_gym.AsyncWrapper and give "
        f"{name} an `async def a{method}` that awaits `self.inner.a{method}(...)`, or use an aworld_gym.wrappers "
        "equivalent."
    )


def tell_turn_limit(env: Any, limit: int | None) -> None:
    """Tell an AWorld env (``env.unwrapped.limit_turns``) the turn limit of a ``TimeLimit`` around it, before its
    reset, so that the env ends, labels and scores that turn itself; other envs are not told."""
    tell = getattr(env.unwrapped, "limit_turns", None)
    if tell is not None and limit is not None:
        tell(limit)


class _Face:
    """The async face of one layer of a wrapper stack (what the layer above awaits)."""

    async def areset(self, seed: int | None, options: dict[str, Any] | None) -> Reset:
        raise NotImplementedError

    async def astep(self, action: Any) -> Step:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError


class _Bottom(_Face):
    """The env at the bottom of the stack: its own async methods, else its sync ones in a worker thread."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def areset(self, seed: int | None, options: dict[str, Any] | None) -> Reset:
        fn = getattr(self.env, "areset", None)
        if fn is not None:
            return await fn(seed=seed, options=options)
        return await asyncio.to_thread(self.env.reset, seed=seed, options=options)

    async def astep(self, action: Any) -> Step:
        fn = getattr(self.env, "astep", None)
        if fn is not None:
            return await fn(action)
        return await asyncio.to_thread(self.env.step, action)

    async def aclose(self) -> None:
        fn = getattr(self.env, "aclose", None)
        if fn is not None:
            await fn()
        else:
            await asyncio.to_thread(self.env.close)


class _Layer(_Face):
    """A wrapper of the stack: each method is the layer's own async one, or the table's equivalent of its sync one.

    Attributes (the bookkeeping of the Gymnasium wrapper this face stands for, kept here):
        limit: a ``TimeLimit``'s limit (its public ``spec.max_episode_steps``).
        elapsed: steps since the last reset (``None`` before the first).
        has_reset: a reset ran (``OrderEnforcing``).
        checked_reset, checked_step: the passive checks ran (``PassiveEnvChecker``).
        returns, length, started: the episode's statistics (``RecordEpisodeStatistics``).
    """

    def __init__(self, layer: gym.Wrapper[Any, Any, Any, Any], inner: _Face) -> None:
        self.layer, self.inner = layer, inner
        self._reset = _pick(layer, "reset", _RESETS)
        self._step = _pick(layer, "step", _STEPS)
        self._close = _pick(layer, "close", _CLOSES)
        self.limit = _time_limit(layer) if self._reset is _time_limit_reset or self._step is _time_limit_step else None
        self.elapsed: int | None = None
        self.has_reset = self.checked_reset = self.checked_step = False
        self.returns, self.length, self.started = 0.0, 0, -1.0

    async def areset(self, seed: int | None, options: dict[str, Any] | None) -> Reset:
        return await self._reset(self, seed, options)

    async def astep(self, action: Any) -> Step:
        return await self._step(self, action)

    async def aclose(self) -> None:
        await self._close(self)


def _time_limit(layer: Any) -> int:
    """A ``TimeLimit``'s limit. Read off the wrapper's ``_max_episode_steps``, the one non-public attribute of
    Gymnasium read here: its public ``spec`` deep-copies the whole ``EnvSpec`` below it, the ``gym.make`` keywords
    included, and keeps the copy on each wrapper, so a run's task list was copied into each of its envs (C envs of C
    tasks: memory and time in C squared, issue 48). The spec is read only where the attribute is missing."""
    steps = getattr(layer, "_max_episode_steps", None)
    if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0:
        return steps
    spec = layer.spec
    if spec is None or spec.max_episode_steps is None:
        raise _no_face(
            layer,
            "step",
            f"{type(layer).__qualname__} keeps its limit private and shows it only through its spec, which is None "
            "here: the env below has none (made without gym.make), or a gym.make keyword could not be deep-copied "
            "(Gymnasium warned: 'An exception occurred ... while copying the environment spec'). Make the env with "
            "gym.make and copyable keywords, or drop the TimeLimit and give an AWorld env max_turns=N, to run it on "
            "the async face.",
        )
    return int(spec.max_episode_steps)


def time_limit_of(env: Any) -> int | None:
    """The limit of the outermost ``TimeLimit`` in ``env``'s wrapper stack (``None`` without one), read as
    :func:`_time_limit` does, never through the stack's ``spec``."""
    layer = env
    while isinstance(layer, gym.Wrapper):
        if isinstance(layer, TimeLimit):
            return _time_limit(layer)
        layer = layer.env
    return None


# ----- async equivalents of Gymnasium's standard wrappers (public API only) ------------------------------------
async def _time_limit_reset(f: _Layer, seed: int | None, options: dict[str, Any] | None) -> Reset:
    tell_turn_limit(f.layer, f.limit)
    out = await f.inner.areset(seed, options)
    f.elapsed = 0
    return out


async def _time_limit_step(f: _Layer, action: Any) -> Step:
    if f.elapsed is None:
        raise ResetNeeded(f"{type(f.layer).__qualname__}: call areset() on this env before astep()")
    obs, reward, terminated, truncated, info = await f.inner.astep(action)
    f.elapsed += 1
    return obs, reward, terminated, truncated or f.elapsed >= (f.limit or 0), info


async def _order_reset(f: _Layer, seed: int | None, options: dict[str, Any] | None) -> Reset:
    f.has_reset = True
    return await f.inner.areset(seed, options)


async def _order_step(f: _Layer, action: Any) -> Step:
    if not f.has_reset:
        raise ResetNeeded("Cannot call env.astep() before calling env.areset()")
    return await f.inner.astep(action)


class _Replay:
    """Stands in for an env whose step/reset already ran, so that Gymnasium's passive checks see the result."""

    def __init__(self, env: Any, result: Any) -> None:
        self.env, self.result = env, result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return self.result

    def step(self, action: Any) -> Any:
        return self.result


async def _checker_reset(f: _Layer, seed: int | None, options: dict[str, Any] | None) -> Reset:
    result = await f.inner.areset(seed, options)
    if not f.checked_reset:
        from gymnasium.utils.passive_env_checker import env_reset_passive_checker

        f.checked_reset = True
        env_reset_passive_checker(_Replay(f.layer.env, result), seed=seed, options=options)
    return result


async def _checker_step(f: _Layer, action: Any) -> Step:
    result = await f.inner.astep(action)
    if not f.checked_step:
        from gymnasium.utils.passive_env_checker import env_step_passive_checker

        f.checked_step = True
        env_step_passive_checker(_Replay(f.layer.env, result), action)
    return result


async def _stats_reset(f: _Layer, seed: int | None, options: dict[str, Any] | None) -> Reset:
    out = await f.inner.areset(seed, options)
    f.started, f.returns, f.length = time.perf_counter(), 0.0, 0
    return out


async def _stats_step(f: _Layer, action: Any) -> Step:
    obs, reward, terminated, truncated, info = await f.inner.astep(action)
    f.returns += reward
    f.length += 1
    if terminated or truncated:
        if STATS_KEY in info:
            raise ValueError(f"RecordEpisodeStatistics: info already holds {STATS_KEY!r}")
        info[STATS_KEY] = {"r": f.returns, "l": f.length, "t": round(time.perf_counter() - f.started, 6)}
        f.started = time.perf_counter()
    return obs, reward, terminated, truncated, info


async def _reward_step(f: _Layer, action: Any) -> Step:
    obs, reward, terminated, truncated, info = await f.inner.astep(action)
    return obs, f.layer.reward(reward), terminated, truncated, info


async def _observation_reset(f: _Layer, seed: int | None, options: dict[str, Any] | None) -> Reset:
    obs, info = await f.inner.areset(seed, options)
    return f.layer.observation(obs), info


async def _observation_step(f: _Layer, action: Any) -> Step:
    obs, reward, terminated, truncated, info = await f.inner.astep(action)
    return f.layer.observation(obs), reward, terminated, truncated, info


async def _action_step(f: _Layer, action: Any) -> Step:
    return await f.inner.astep(f.layer.action(action))


async def _pass_reset(f: _Layer, seed: int | None, options: dict[str, Any] | None) -> Reset:
    return await f.inner.areset(seed, options)


async def _pass_step(f: _Layer, action: Any) -> Step:
    return await f.inner.astep(action)


async def _pass_close(f: _Layer) -> None:
    await f.inner.aclose()


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
    PassiveEnvChecker.close: _pass_close,  # it only records that close was called, and warns on a second failure
}


def _owner(cls: type, name: str) -> type | None:
    return next((c for c in cls.__mro__ if name in c.__dict__), None)


def _own(method: str) -> Callable[..., Awaitable[Any]]:
    """The layer's own async method, called as the table's functions are."""

    async def run(f: _Layer, *args: Any) -> Any:
        fn = getattr(f.layer, "a" + method)
        if method == "reset":
            return await fn(seed=args[0], options=args[1])
        return await fn(*args)

    return run


_OWN = {method: _own(method) for method in ("reset", "step", "close")}


def _pick(layer: Any, method: str, table: dict[Callable[..., Any], Any]) -> Callable[..., Awaitable[Any]]:
    """The async face of ``layer.<method>``: its own ``a<method>`` (unless ``<method>`` is overridden further down
    the class tree than it), else the table's equivalent of the sync method; anything else is refused."""
    cls = type(layer)
    sync, coro = _owner(cls, method), _owner(cls, "a" + method)
    if coro is not None:
        if sync is not None and sync is not coro and issubclass(sync, coro):
            raise _no_face(layer, method)
        return _OWN[method]
    fn = table.get(getattr(cls, method))
    if fn is None:
        raise _no_face(layer, method)
    return fn


def _chain(env: Any) -> _Face:
    """The faces of ``env``'s stack, outermost first (validating every layer); an :class:`AsyncWrapper` below
    already validated and runs its own stack."""
    if not isinstance(env, gym.Wrapper):
        return _Bottom(env)
    inner = _Bottom(env.env) if isinstance(env, AsyncWrapper) else _chain(env.env)
    return _Layer(env, inner)


class AsyncWrapper(gym.Wrapper[Any, Any, Any, Any]):
    """A wrapper with both faces: the sync one is ``gymnasium.Wrapper``'s, the async one runs the stack below
    through :mod:`aworld_gym.core.faces`' chain (built by :func:`async_face`, or at the first async call: a wrapper
    below without an async face is refused then).

    Subclass it for a wrapper of your own with both faces: override ``step`` and ``astep`` (``reset`` and
    ``areset``, ``close`` and ``aclose``) together, awaiting ``self.inner`` on the async face. As the outermost
    object it is what :func:`async_face` returns for a stack without one.

    Args:
        env: the env (any stack of wrappers).
    """

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self._inner: _Face | None = None

    @property
    def inner(self) -> _Face:
        """The async face of the stack below (built on first use: the sync face never needs it)."""
        if self._inner is None:
            self._inner = _chain(self.env)
        return self._inner

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Reset:
        """Async :meth:`reset`."""
        return await self.inner.areset(seed, options)

    async def astep(self, action: Any) -> Step:
        """Async :meth:`step`."""
        return await self.inner.astep(action)

    async def aclose(self) -> None:
        """Async :meth:`close`."""
        await self.inner.aclose()


def async_face(env: Any) -> Any:
    """``env`` with both faces: itself where its outermost object has an async face (an :class:`AsyncWrapper`,
    ``gym.make``'s AWorld ids, an unwrapped AWorld env), else an :class:`AsyncWrapper` around it.

    Keep the object it returns for the env's life (the env pool does): it holds the Gymnasium wrappers'
    bookkeeping on the async face.

    Raises:
        AsyncFaceError: a wrapper in the stack overrides ``step``/``reset``/``close`` with no async equivalent.
    """
    if not isinstance(env, gym.Wrapper) and all(hasattr(env, m) for m in ("areset", "astep", "aclose")):
        return env
    face = env if isinstance(env, AsyncWrapper) else AsyncWrapper(env)
    for method, table in (("reset", _RESETS), ("step", _STEPS), ("close", _CLOSES)):
        _pick(face, method, table)  # a subclass that overrides step below the astep it inherits is refused
    _ = face.inner  # the stack below, validated now
    return face


def check_async(env: Any) -> None:
    """Raise :class:`AsyncFaceError` if any wrapper of ``env`` has no async face (checked before an episode runs)."""
    async_face(env)
