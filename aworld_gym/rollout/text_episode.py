"""One episode stepped turn by turn from outside: for faces whose trainer (or client) owns the loop and hands over
the model's text one turn at a time (ms-swift's schedulers and gym env, SkyRL's text env, TRL's tool loop,
OpenRLHF's agent instance, the OpenEnv server).

One loop, two faces (as the episode driver's): :class:`TextEpisode` for trainers that await (``await
episode.start(...)``, ``await episode.step(text)``, ``await episode.close()``; envs on their async face) and
:class:`SyncTextEpisode` for trainers that call synchronously (the same three methods without ``await``; envs on
their sync face, the coroutine stepped without an event loop by :func:`~aworld_gym.rollout.driver.run_now`).

The env comes from an :class:`~aworld_gym.rollout.pool.EnvPool` and goes back to it; the episode's
:class:`~aworld_gym.core.trajectory.Trajectory` is recorded by the episode driver's own step recorder, so these faces
give the same turns and rewards as every other. Nothing here raises for what the env does: an env that cannot reset
or raises in a step ends the episode as ``env_error`` (void) and is dropped from the pool (a reset refused with a
:class:`~aworld_gym.base.errors.TaskError`, the request naming no task, keeps its env: it is as good as before).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aworld_gym.base.errors import EnvCrash, TaskError
from aworld_gym.core.trajectory import Termination, Trajectory
from aworld_gym.rollout.driver import adopt_episode, error_text, record_step, run_now
from aworld_gym.rollout.pool import EnvPool
from aworld_gym.rollout.tokens import new_env_messages

__all__ = ["SyncTextEpisode", "TextEpisode", "Turn"]

T = TypeVar("T")


@dataclass
class Turn:
    """What the env answered to one model turn."""

    observation: str
    reward: float
    done: bool
    messages: list[dict[str, Any]] = field(default_factory=list)  # the chat messages the env added
    info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # the env failed (the episode is void)


class _AsyncEnvFace:
    """The env and the pool awaited (the async face)."""

    def __init__(self, step_timeout_s: float | None) -> None:
        self.step_timeout_s = step_timeout_s

    async def acquire(self, pool: EnvPool) -> Any:
        return await pool.acquire()

    async def release(self, pool: EnvPool, env: Any, broken: bool) -> None:
        await pool.release(env, broken=broken)

    async def reset(self, env: Any, seed: int | None, options: dict[str, Any] | None) -> Any:
        return await self.bounded(lambda: env.areset(seed=seed, options=options), "reset")

    async def step(self, env: Any, text: str) -> Any:
        return await self.bounded(lambda: env.astep(text), "step")

    async def bounded(self, call: Callable[[], Awaitable[T]], what: str) -> T:
        """``call()`` within ``step_timeout_s`` (an :class:`EnvCrash` past it; a ``TimeoutError`` of the env's own
        passes as it is)."""
        if self.step_timeout_s is None:
            return await call()
        bound = asyncio.timeout(self.step_timeout_s)
        try:
            async with bound:
                return await call()
        except TimeoutError:
            if not bound.expired():
                raise
            raise EnvCrash(f"the {what} ran past its limit of {self.step_timeout_s:g} s") from None


class _SyncEnvFace(_AsyncEnvFace):
    """The env and the pool called (the sync face): every await returns at once."""

    async def acquire(self, pool: EnvPool) -> Any:
        return pool.take()

    async def release(self, pool: EnvPool, env: Any, broken: bool) -> None:
        pool.give(env, broken=broken)

    async def reset(self, env: Any, seed: int | None, options: dict[str, Any] | None) -> Any:
        return env.reset(seed=seed, options=options)

    async def step(self, env: Any, text: str) -> Any:
        return env.step(text)


class _Episode:
    """The episode both faces run: its state and its one loop (``_start``/``_step``/``_close`` on a face).

    Args:
        pool: where the env comes from and goes back to.
        env_id: the name the trajectory carries.
        policy: the trajectory's policy name (the face).
    """

    def __init__(self, pool: EnvPool, env_id: str, policy: str, face: _AsyncEnvFace) -> None:
        self.pool, self.env_id, self.policy = pool, env_id, policy
        self.env: Any = None
        self.trajectory = Trajectory(env_id, policy=policy)
        self.started = False  # start() was called: the trajectory is an episode's
        self.own_log = True  # the env keeps no turn log and ledger: the trajectory's are built from each step
        self._face = face

    @property
    def step_timeout_s(self) -> float | None:
        """The longest a reset or a step may take (``None``: no bound beyond the env's own tool timeouts)."""
        return self._face.step_timeout_s

    @property
    def running(self) -> bool:
        return self.started and not self.trajectory.done

    @property
    def done(self) -> bool:
        return self.trajectory.done

    def end(self, termination: str, error: str | None = None) -> None:
        """End a running episode without a step (a cut-off reply, the trainer's turn limit, a client gone)."""
        if not self.trajectory.done:
            self.trajectory.end(termination, error=error)

    async def _start(self, seed: int | None, options: dict[str, Any] | None) -> Turn:
        self.trajectory = traj = Trajectory(self.env_id, seed=seed, policy=self.policy)
        self.started = True
        try:
            if self.env is None:
                self.env = await self._face.acquire(self.pool)
            obs, info = await self._face.reset(self.env, seed, options)
        except TaskError as exc:  # the request named no task: a void episode, and the env is as good as before
            return await self._failed(exc, broken=False)
        except Exception as exc:  # noqa: BLE001 - a void episode; the next start takes a fresh env
            return await self._failed(exc)
        unwrapped = self.env.unwrapped
        traj.task_id, traj.task_meta = info.get("task_id"), dict(info.get("task_meta") or {})
        traj.prompt = obs if isinstance(obs, str) else None
        self.own_log = adopt_episode(traj, unwrapped)
        return Turn(str(obs), 0.0, False, [dict(m) for m in unwrapped.messages], dict(info))

    async def _step(self, text: str) -> Turn:
        if self.env is None or not self.running:
            raise RuntimeError("no episode is running")
        traj, unwrapped = self.trajectory, self.env.unwrapped
        before = len(unwrapped.messages)
        try:
            out = await self._face.step(self.env, text)
        except Exception as exc:  # noqa: BLE001 - the env failed: a void episode
            return await self._failed(exc)
        record_step(traj, text, out, 0.0, 0.0, own=self.own_log)
        obs, reward, _, _, info = out
        return Turn(str(obs), float(reward), traj.done, new_env_messages(self.env, before + 1), dict(info))

    async def _close(self) -> None:
        env, self.env = self.env, None
        if env is not None:
            await self._face.release(self.pool, env, self.trajectory.termination == Termination.ENV_ERROR)

    async def _failed(self, exc: BaseException, broken: bool = True) -> Turn:
        self.trajectory.end(Termination.ENV_ERROR, error=error_text(exc))
        env, self.env = self.env, None
        if env is not None:
            await self._face.release(self.pool, env, broken)
        message = f"{type(exc).__name__}: {exc}"
        return Turn(f"the environment failed: {message}", 0.0, True, error=message)


class TextEpisode(_Episode):
    """An episode on a pooled env, stepped with the model's text, for trainers that await.

    Args:
        pool: where the env comes from and goes back to.
        env_id: the name the trajectory carries.
        policy: the trajectory's policy name (the face).
        step_timeout_s: the longest a reset or a step may take (``None``: no bound beyond the env's own tool
            timeouts); past it the episode ends as ``env_error`` and the env is dropped from the pool.
    """

    def __init__(self, pool: EnvPool, env_id: str, policy: str, step_timeout_s: float | None = None) -> None:
        super().__init__(pool, env_id, policy, _AsyncEnvFace(step_timeout_s))

    async def start(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Turn:
        """A new episode (an env from the pool if this one holds none): the first observation, the env's messages
        (system prompt and task) and the reset's info; ``error`` set if the env could not reset (void)."""
        return await self._start(seed, options)

    async def step(self, text: str) -> Turn:
        """Step the env with the model's text (the episode must be running)."""
        return await self._step(text)

    async def close(self) -> None:
        """Give the env back (dropped if the episode broke it)."""
        await self._close()


class SyncTextEpisode(_Episode):
    """:class:`TextEpisode` for trainers that call synchronously (SkyRL's text env, TRL's tool loop): the same loop
    on the env's sync face (``reset``/``step``), with no bound on a step's time beyond the env's own tool timeouts.

    Args:
        pool: where the env comes from and goes back to.
        env_id: the name the trajectory carries.
        policy: the trajectory's policy name (the face).
    """

    def __init__(self, pool: EnvPool, env_id: str, policy: str) -> None:
        super().__init__(pool, env_id, policy, _SyncEnvFace(None))

    def start(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Turn:
        """:meth:`TextEpisode.start` on the sync face."""
        return run_now(self._start(seed, options))

    def step(self, text: str) -> Turn:
        """:meth:`TextEpisode.step` on the sync face."""
        return run_now(self._step(text))

    def close(self) -> None:
        """:meth:`TextEpisode.close` on the sync face."""
        run_now(self._close())
