"""Engines: where episodes run. Each is an object with its own settings, and one method: ``run(work)``, an async
iterator of ``(job, record)`` in the order episodes finish, with a bound on the episodes in flight, that stops its
workers and closes every env when the consumer leaves early.

- :class:`AsyncEngine` (in-process): ``concurrency`` env slots on one asyncio loop, each pulling the next job as soon
  as its last one ends (no lock-step): the engine for latency-bound work (model endpoints, remote tools).
- :class:`~aworld_gym.rollout.ray_engine.RayEngine`: a pool of Ray actors over the cluster, each running slots the
  same way.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aworld_gym.rollout.jobs import Job
from aworld_gym.rollout.policies import Policy
from aworld_gym.rollout.slots import Slot


@dataclass
class Work:
    """What an engine is asked to run."""

    env_id: str
    make: Callable[[], Any]
    policy: Callable[[], Policy]  # a factory: one policy per slot (per actor on Ray)
    jobs: list[Job]
    task_ids: list[str] = field(default_factory=list)

    def task_id(self, job: Job) -> str | None:
        return self.task_ids[job.task_index] if self.task_ids else None


class Engine(Protocol):
    """Runs the episodes of a :class:`Work`; yields ``(job, record)`` as each one finishes."""

    concurrency: int

    def run(self, work: Work) -> AsyncIterator[tuple[Job, dict[str, Any]]]: ...


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

    async def run(self, work: Work) -> AsyncIterator[tuple[Job, dict[str, Any]]]:
        queue = deque(work.jobs)
        results: asyncio.Queue[tuple[Job, dict[str, Any]]] = asyncio.Queue(maxsize=self.concurrency)

        async def worker() -> None:
            try:
                slot = Slot(work.env_id, work.make, work.policy(), self.policy_timeout_s, self.screenshots)
            except Exception as exc:  # noqa: BLE001 - e.g. the policy factory failed: the run must say so, not wait
                await results.put((None, exc))  # type: ignore[arg-type]
                return
            try:
                while queue:
                    job = queue.popleft()  # taken before any await: workers never race for the last job
                    await results.put((job, await slot.run(job, work.task_id(job))))
            except Exception as exc:  # noqa: BLE001 - a bug below the slot: raised in the consumer, never a hang
                await results.put((None, exc))  # type: ignore[arg-type]
            finally:
                await slot.close()

        workers = [asyncio.create_task(worker()) for _ in range(min(self.concurrency, len(work.jobs)))]
        try:
            for _ in range(len(work.jobs)):
                job, record = await results.get()
                if job is None:
                    raise RuntimeError(f"an episode worker failed: {type(record).__name__}: {record}") from record
                yield job, record
        finally:
            await _stop(workers)


async def _stop(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel the workers and wait for them to close their envs (a second cancellation is not passed on)."""
    for t in tasks:
        t.cancel()
    await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))
