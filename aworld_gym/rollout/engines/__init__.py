"""Engines: where episodes run. Each is an object with its own settings, and one method: ``run(work)``, an async
iterator of ``(job, trajectory)`` in the order episodes finish, with a bound on the episodes in flight, that stops its
workers and closes every env when the consumer leaves early.

- :class:`AsyncEngine` (in-process): ``concurrency`` workers on one asyncio loop over one env pool, each pulling the next job as soon
  as its last one ends (no lock-step): the engine for latency-bound work (model endpoints, remote tools).
- :class:`~aworld_gym.rollout.engines.ray_engine.RayEngine`: a pool of Ray actors over the cluster, each running slots the
  same way.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aworld_gym.base.capacity import ensure_descriptors, warn_capacity
from aworld_gym.core.trajectory import Termination, Trajectory
from aworld_gym.rollout.envs import descriptors_per_episode
from aworld_gym.rollout.jobs import Job
from aworld_gym.rollout.policies import Policy
from aworld_gym.rollout.pool import EnvPool, failed_trajectory, run_pooled

logger = logging.getLogger(__name__)


@dataclass
class Work:
    """What an engine is asked to run."""

    env_id: str
    make: Callable[[], Any]
    policy: Callable[[], Policy]  # a factory: one policy per slot (per actor on Ray)
    jobs: list[Job]
    task_ids: list[str] = field(default_factory=list)
    retry_void: int = 0  # a void episode is run again this many times (void_policy="retry")
    # Episodes that finished but that the engine could not hand over before it was closed (an interrupted run: a
    # KeyboardInterrupt in one worker while another's record waited for the consumer); the caller writes them.
    unyielded: list[tuple[Job, Trajectory]] = field(default_factory=list)

    def task_id(self, job: Job) -> str | None:
        return self.task_ids[job.task_index] if self.task_ids else None

    async def run(self, pool: EnvPool, policy: Policy, job: Job, **driver: Any) -> Trajectory:
        """One job as an episode on a pooled env: the one place engines call the driver.

        A ``CancelledError`` that reaches here while the engine's own task is not being cancelled (a cancellation
        meant for something below that escaped it) ends the episode as ``env_crash`` (void): a worker that died of it
        would leave its job without a record and the run waiting for it for ever."""
        try:
            return await run_pooled(pool, policy, env_id=self.env_id, task_id=self.task_id(job),
                                    retry_void=self.retry_void, seed=job.seed, options={"task_index": job.task_index},
                                    sample=job.sample, group=str(job.group), **driver)  # fmt: skip
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise
            logger.error("episode %s of task %s: a stray cancellation ended it; recorded as env_crash", job.index,
                         self.task_id(job), exc_info=True)  # fmt: skip
            return failed_trajectory(self.env_id, Termination.ENV_CRASH, exc, task_id=self.task_id(job), seed=job.seed,
                                     sample=job.sample, group=str(job.group), policy=policy)  # fmt: skip


def take_jobs(queue: deque[Job], most: int, done: set[int]) -> list[Job]:
    """Up to ``most`` jobs from the front of ``queue``, skipping those already recorded (``done``): a batch for one
    worker of an engine that hands jobs out as slots free up."""
    batch: list[Job] = []
    while queue and len(batch) < most:
        job = queue.popleft()
        if job.index not in done:
            batch.append(job)
    return batch


class Engine(Protocol):
    """Runs the episodes of a :class:`Work`; yields ``(job, trajectory)`` as each one finishes."""

    concurrency: int

    def run(self, work: Work) -> AsyncIterator[tuple[Job, Trajectory]]: ...


@dataclass
class AsyncEngine:
    """Episodes on this process's event loop.

    Args:
        concurrency: episodes in flight (env slots); finished records waiting for the consumer count against the
            same bound, so a slow consumer slows the workers down instead of piling records up.
        policy_timeout_s: a policy turn that takes longer ends its episode as ``policy_error``.
        screenshots: a folder for a PNG per step of envs made with ``render_mode="rgb_array"``.
    """

    concurrency: int = 8
    policy_timeout_s: float | None = None
    screenshots: str | Path | None = None
    name = "async"

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")

    async def run(self, work: Work) -> AsyncIterator[tuple[Job, Trajectory]]:
        queue = deque(work.jobs)
        results: asyncio.Queue[tuple[Job, Any]] = asyncio.Queue(maxsize=self.concurrency)
        n = min(self.concurrency, len(work.jobs))
        # this process holds every episode: its soft limit raised, its hard limit checked against what its env holds
        ensure_descriptors(n, descriptors_per_episode(work.make))
        pool = EnvPool(work.make, max_idle=n)
        policies: list[Policy] = []
        sharing: dict[int, int] = {}  # id of a policy -> the slots that have it

        async def worker() -> None:
            try:
                policy = work.policy()
                policies.append(policy)
                sharing[id(policy)] = sharing.get(id(policy), 0) + 1
                check_shared(policy, sharing[id(policy)], n)
            except Exception as exc:  # noqa: BLE001 - e.g. the policy factory failed: the run must say so, not wait
                await results.put((None, exc))  # type: ignore[arg-type]
                return
            try:
                while queue:
                    job = queue.popleft()  # taken before any await: workers never race for the last job
                    traj = await work.run(pool, policy, job, policy_timeout_s=self.policy_timeout_s,
                                          screenshots=self.screenshots)  # fmt: skip
                    await results.put((job, traj))
            except Exception as exc:  # noqa: BLE001 - a bug below the pool: raised in the consumer, never a hang
                await results.put((None, exc))  # type: ignore[arg-type]

        workers = [asyncio.create_task(worker()) for _ in range(n)]
        try:
            for _ in range(len(work.jobs)):
                job, traj = await results.get()
                if job is None:
                    raise RuntimeError(f"an episode worker failed: {type(traj).__name__}: {traj}") from traj
                yield job, traj
        finally:
            await _stop(workers)
            while not results.empty():  # finished while the consumer was being interrupted: not lost
                job, traj = results.get_nowait()
                if job is not None:
                    work.unyielded.append((job, traj))
            await asyncio.shield(pool.aclose())
            await asyncio.shield(close_policies(policies))


def check_shared(policy: Any, sharing: int, in_flight: int) -> None:
    """Say once when more episodes share ``policy`` than its ``max_concurrency`` lets send requests at once (called
    as each slot takes its policy; ``sharing`` slots have this one so far): the run would be capped silently."""
    limit = getattr(policy, "max_concurrency", None)
    if isinstance(limit, int) and sharing == limit + 1:
        warn_capacity(f"{in_flight} episodes in flight share one {type(policy).__name__} with max_concurrency="
                      f"{limit}: at most {limit} of their model requests are in flight at once (give it "
                      f"max_concurrency={in_flight}, or a factory for one policy per slot)")  # fmt: skip


async def close_policies(policies: list[Any]) -> None:
    """Let each distinct policy close what it holds on this loop (an HTTP client's connections: ``aclose``)."""
    for policy in {id(p): p for p in policies}.values():
        aclose = getattr(policy, "aclose", None)
        if aclose is None:
            continue
        try:
            await aclose()
        except Exception:  # the run's records are in; a client that fails to close is only logged
            logger.warning("closing a policy's clients failed", exc_info=True)


async def _stop(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel the workers and wait for them to close their envs (a second cancellation is not passed on)."""
    for t in tasks:
        t.cancel()
    await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))
