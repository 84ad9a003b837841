"""Env sources: a registered id or a picklable zero-argument factory, accepted by every engine and adapter.

``collect``, ``RayVectorEnv``, ``make_rollout_func``, ``environment_factory``, ``task_dataset`` and the verl loop
all take ``env`` as either a registered id (``"AWorld/Code-v0"``, made with ``gym.make(id, **env_kwargs)``) or a
factory that returns an env, wrappers included (``lambda: RewardShaping(gym.make(...), hooks)`` in-process; a
module-level function or a :class:`MakeEnv` where it must be pickled, e.g. for Ray).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from aworld_gym.base.errors import ConfigError

EnvFactory = Callable[[], gym.Env[Any, Any]]
EnvLike = str | EnvFactory


@dataclass(frozen=True)
class MakeEnv:
    """A picklable factory: ``gym.make(env_id, **kwargs)``. It carries the id's registration (its spec) from the
    process that made it, so an id registered there (``aworld_gym.register``) also exists in a Ray worker."""

    env_id: str
    kwargs: Mapping[str, Any] = field(default_factory=dict, repr=False)  # mcp_config may hold secrets
    spec: Any = None

    @classmethod
    def of(cls, env_id: str, kwargs: Mapping[str, Any] | None = None) -> MakeEnv:
        """For ``env_id``, or Gymnasium's ``"module:Id"`` (the module is imported here, so it registers the id, and
        the factory carries ``Id`` and its spec)."""
        import aworld_gym  # noqa: F401 - registers the built-in ids
        from aworld_gym.core.registry import resolve

        env_id = resolve(env_id)
        try:
            spec = gym.spec(env_id)
        except gym.error.Error:
            spec = None  # gym.make will say what is wrong, with its suggestions
        return cls(env_id, dict(kwargs or {}), spec)

    def __call__(self) -> gym.Env[Any, Any]:
        import aworld_gym  # noqa: F401 - registers the ids in a fresh worker process

        if self.spec is not None and self.env_id not in gym.registry:
            gym.register(**{k: getattr(self.spec, k) for k in _SPEC_FIELDS})
        try:
            return gym.make(self.env_id, **dict(self.kwargs))
        except TypeError as exc:  # gymnasium's message repeats every kwarg: keep mcp_config's secrets out of records
            from aworld_gym.mcp.redact import redact_config

            raise TypeError(
                redact_config(str(exc), self.kwargs.get("mcp_config"), self.kwargs.get("sampling"))
            ) from None


_SPEC_FIELDS = ("id", "entry_point", "reward_threshold", "nondeterministic", "max_episode_steps", "order_enforce",
                "disable_env_checker", "kwargs", "additional_wrappers", "vector_entry_point")  # fmt: skip


def descriptors_per_episode(make: Any) -> int:
    """The open files one episode of ``make``'s env may hold while in flight, for the engines' descriptor check.

    Counted from the servers of a :class:`MakeEnv`'s ``mcp_config``: the model request's connection, and per server
    what each episode holds of its own (a stdio server's process: 3; an HTTP session's connection: 1); a shared one
    (``"share"``/``"pool"``, ``"share_session"``) or an in-process server costs nothing per episode. Any other factory,
    or an id whose env brings servers of its own (a sandbox, a browser), gets the general estimate
    (:data:`~aworld_gym.base.capacity.FDS_PER_EPISODE`).
    """
    from aworld_gym.base import capacity

    config = make.kwargs.get("mcp_config") if isinstance(make, MakeEnv) else None
    if config is None or make.kwargs.get("servers"):
        return capacity.FDS_PER_EPISODE
    from aworld_gym.mcp.config import parse_mcp_config

    try:
        specs = parse_mcp_config(config)
    except Exception:  # noqa: BLE001 - a bad config is the env's to report, with its own message, when it is made
        return capacity.FDS_PER_EPISODE
    own = {"stdio": capacity.FDS_STDIO, "inprocess": 0}
    return capacity.FDS_MODEL + sum(
        0 if s.pool is not None or s.share_session else own.get(s.type, capacity.FDS_HTTP) for s in specs
    )


def env_factory(env: EnvLike, env_kwargs: Mapping[str, Any] | None = None) -> EnvFactory:
    """A zero-argument factory for ``env`` (an id, with ``env_kwargs``, or already a factory)."""
    if isinstance(env, str):
        return MakeEnv.of(env, env_kwargs)
    if isinstance(env, gym.Env):
        raise ConfigError("pass an env id or a zero-argument factory that returns an env, not an env instance")
    if not callable(env):
        raise ConfigError(f"env must be a registered id or a zero-argument factory, got {type(env).__name__}")
    if env_kwargs:
        raise ConfigError("env_kwargs go with an env id; a factory makes its env itself")
    return env


def env_name(env: EnvLike, made: gym.Env[Any, Any] | None = None) -> str:
    """A name for records: the id (without a ``"module:"`` prefix), else the made env's spec id, else the factory's
    name."""
    if isinstance(env, str):
        return env.rpartition(":")[2]
    if isinstance(env, MakeEnv):
        return env.env_id
    spec = getattr(made, "spec", None) if made is not None else None
    if spec is not None and getattr(spec, "id", None):
        return str(spec.id)
    return getattr(env, "__qualname__", None) or type(env).__name__


def run_coroutine(coro: Awaitable[Any]) -> Any:
    """Run ``coro`` to its end from sync code, even inside a running event loop (on a private loop in a thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_wrap(coro))
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(_wrap(coro))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="aworld-coroutine")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


async def _wrap(coro: Awaitable[Any]) -> Any:
    return await coro
