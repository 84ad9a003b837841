"""The env pool: the one place where engines and trainer faces make, reuse, replace and close envs.

MCP servers, sandboxes and browsers are not restarted per episode: an env is made once (in a worker thread), handed
out for one episode at a time and put back; an env whose episode broke it (``env_error``: it raised or could not
reset) is closed, never reused (after ``env_crash`` the env restarts the dead server at its next reset).
:func:`run_pooled` runs one episode on a pooled env through the driver, and re-runs a ``void`` episode
(infrastructure's fault) when ``retry_void`` allows.
"""

from __future__ import annotations

import asyncio
import json
import logging
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from aworld_gym.core.faces import AsyncFaceError, async_face
from aworld_gym.core.trajectory import Termination, Trajectory
from aworld_gym.rollout.driver import arun_episode, policy_name
from aworld_gym.rollout.envs import env_factory

logger = logging.getLogger(__name__)

BREAKS_ENV = frozenset({Termination.ENV_ERROR})


class EnvPool:
    """Envs from one zero-argument factory, reused across episodes.

    Args:
        make: returns a new env (the outermost one is driven; wrappers included).
        max_idle: envs kept for reuse at most; more are closed when released.
    """

    def __init__(self, make: Callable[[], Any], max_idle: int = 64) -> None:
        self.make, self.max_idle = make, max_idle
        self._free: list[Any] = []
        self.made = 0
        self.group_hooks: Any = None  # the env's group reward rubric, read off the first env made

    def _made(self, env: Any) -> Any:
        """A new env with both faces (:func:`~aworld_gym.core.faces.async_face`, kept for the env's life)."""
        from aworld_gym.wrappers.reward_shaping import group_hooks

        try:
            env = async_face(env)
        except AsyncFaceError:
            env.close()  # refused before any episode: its servers go with it
            raise
        if self.made == 0:
            self.group_hooks = group_hooks(env)
        self.made += 1
        return env

    async def acquire(self) -> Any:
        """An idle env, or a new one (made in a worker thread: servers may take seconds to start)."""
        if self._free:
            return self._free.pop()
        return self._made(await asyncio.to_thread(self.make))

    async def release(self, env: Any, broken: bool = False) -> None:
        """Put ``env`` back; a broken env (or one over ``max_idle``) is closed instead."""
        if broken or len(self._free) >= self.max_idle:
            await close_quietly(env)
            return
        self._free.append(env)

    def take(self) -> Any:
        """:meth:`acquire` from sync code (the env made in this thread)."""
        return self._free.pop() if self._free else self._made(self.make())

    def give(self, env: Any, broken: bool = False) -> None:
        """:meth:`release` from sync code."""
        if broken or len(self._free) >= self.max_idle:
            try:
                env.close()
            except Exception as exc:  # noqa: BLE001 - a broken env is dropped either way
                logger.warning("closing an env failed: %r", exc)
            return
        self._free.append(env)

    def peek(self) -> Any:
        """An idle env to read from (its tasks, its tools), made synchronously if there is none."""
        if not self._free:
            self._free.append(self._made(self.make()))
        return self._free[-1]

    async def aclose(self) -> None:
        """Close the idle envs at once: their servers' exits overlap (one after another, a run's end waited for
        each of its stdio servers to exit: 12 s for 64 in benchmarks/peers.py)."""
        envs, self._free = self._free, []
        await asyncio.gather(*(close_quietly(env) for env in envs), return_exceptions=True)

    def close(self) -> None:
        envs, self._free = self._free, []
        for env in envs:
            self.give(env, broken=True)  # closes it (a failure is logged, the others still close)


class EnvPools:
    """The env pools of one process, one per event loop, env id and kwargs (an env's MCP sessions live on the loop
    that first used it): for trainers that run one sample per coroutine (verl's agent loop, slime's generate)."""

    def __init__(self, max_idle_per_key: int = 64) -> None:
        self.pools: dict[str, EnvPool] = {}
        self.max_idle_per_key = max_idle_per_key

    def get(self, env_id: Any, env_kwargs: Mapping[str, Any]) -> EnvPool:
        loop = id(asyncio.get_running_loop())
        name = env_id if isinstance(env_id, str) else f"factory:{id(env_id)}"
        key = json.dumps([loop, name, env_kwargs], sort_keys=True, default=str)
        if key not in self.pools:
            self.pools[key] = EnvPool(env_factory(env_id, env_kwargs or None), self.max_idle_per_key)
        return self.pools[key]

    @property
    def created(self) -> int:
        return sum(p.made for p in self.pools.values())

    async def aclose(self) -> None:
        for pool in self.pools.values():
            await pool.aclose()


async def close_quietly(env: Any) -> None:
    """Close an env on its async face; a broken env that fails to close is dropped either way."""
    try:
        await env.aclose()
    except Exception:
        logger.debug("closing an env failed", exc_info=True)


def failed_trajectory(
    env_id: str, kind: str, exc: BaseException, *, task_id: str | None = None, seed: int | None = None,
    sample: int = 0, group: str | None = None, policy: Any = None,
) -> Trajectory:  # fmt: skip
    """The trajectory of an episode that never ran (its env could not be made, its actor died): status ``void``."""
    traj = Trajectory(env_id=env_id, task_id=task_id, seed=seed, sample=sample, group=group, policy=policy_name(policy))
    traj.end(kind, error="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    traj.timings = {"reset_s": 0.0, "policy_s": 0.0, "env_s": 0.0, "total_s": 0.0}
    return traj


async def run_pooled(
    pool: EnvPool,
    policy: Any = None,
    *,
    env_id: str = "",
    task_id: str | None = None,
    retry_void: int = 0,
    **driver: Any,
) -> Trajectory:
    """One episode on a pooled env (see :func:`~aworld_gym.rollout.driver.arun_episode` for ``driver``'s keywords);
    a ``void`` episode is run again, up to ``retry_void`` times (its trajectory then says ``attempts``)."""
    traj: Trajectory | None = None
    for attempt in range(retry_void + 1):
        try:
            env = await pool.acquire()
        except Exception as exc:  # noqa: BLE001 - this episode is recorded as failed; the pool stays usable
            traj = failed_trajectory(env_id, Termination.ENV_ERROR, exc, task_id=task_id, seed=driver.get("seed"),
                                     sample=driver.get("sample", 0), group=driver.get("group"), policy=policy)  # fmt: skip
        else:
            broken = True
            try:
                traj = await arun_episode(env, policy, env_id=env_id, **driver)
                broken = traj.termination in BREAKS_ENV
            finally:
                await pool.release(env, broken)
        if traj.task_id is None:
            traj.task_id = task_id  # reset failed before the env could name its task
        if attempt:
            traj.extra["attempts"] = attempt + 1
        if not traj.void:
            break
    assert traj is not None
    return traj
