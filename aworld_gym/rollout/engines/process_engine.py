"""The process engine: episodes in worker processes on this machine, one per core by default, without Ray.

The in-process :class:`~aworld_gym.rollout.engines.AsyncEngine` runs every episode's driver work (the MCP client stack,
the policy's client, the reward hooks) on one core, under one GIL: at a high concurrency of short tool calls that core
is the ceiling. ``ProcessEngine`` starts ``processes`` workers (``python -m aworld_gym.rollout.engines.process_worker``), each
an asyncio loop with its share of the slots, its own env pool and its own policies, and hands them jobs as their
slots free up; records come back as they finish.

Lost workers: a job whose worker dies (killed, out of memory) runs again on a new worker, at most ``job_retries``
more times, and is recorded as ``env_crash`` (status ``void``) only after that. Records are exactly once (the engine
keeps one record per job). The env and policy factories must pickle (cloudpickle: lambdas and closures do).

A worker's stdout and stdin carry only the engine's frames (length-prefixed pickles); what the envs or policies
print goes to its stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import struct
import sys
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aworld_gym.base.capacity import ensure_descriptors
from aworld_gym.core.registry import worker_environ
from aworld_gym.core.trajectory import Termination, Trajectory
from aworld_gym.rollout.engines import Work, take_jobs
from aworld_gym.rollout.envs import descriptors_per_episode
from aworld_gym.rollout.jobs import Job
from aworld_gym.rollout.pool import failed_trajectory

__all__ = ["ProcessEngine", "ProcessRunStats", "read_frame", "write_frame"]

HEADER = struct.Struct(">I")
STOP_GRACE_S = 10.0  # a worker told to close has this long to close its envs before it is killed


def write_frame(obj: Any) -> bytes:
    """``obj`` as one frame: its pickle's length (4 bytes, big-endian), then the pickle."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


async def read_frame(reader: asyncio.StreamReader) -> Any:
    """The next frame's object; raises ``asyncio.IncompleteReadError`` at the end of the stream."""
    (n,) = HEADER.unpack(await reader.readexactly(HEADER.size))
    return pickle.loads(await reader.readexactly(n))


@dataclass
class ProcessRunStats:
    """What the last run did: jobs, workers lost, jobs re-run and given up, records dropped as doubles."""

    jobs: int = 0
    workers: int = 0
    workers_lost: int = 0
    attempts: dict[int, int] = field(default_factory=dict)  # job index -> workers it was given to
    gave_up: list[int] = field(default_factory=list)
    duplicates: int = 0
    start_s: float = 0.0  # until every worker had its spec loaded
    wall_s: float = 0.0

    @property
    def reruns(self) -> dict[int, int]:
        return {i: n for i, n in self.attempts.items() if n > 1}


@dataclass
class _Worker:
    proc: asyncio.subprocess.Process
    slots: int
    generation: int
    assigned: dict[int, Job] = field(default_factory=dict)
    reader: asyncio.Task[None] | None = None


@dataclass
class ProcessEngine:
    """Episodes in ``processes`` worker processes on this machine (see the module's docstring).

    Args:
        concurrency: episodes in flight over all workers (split into their slots).
        processes: worker processes (default: the CPUs this process may use); never more than ``concurrency`` nor
            the run's episodes.
        policy_timeout_s: a policy turn that takes longer ends its episode as ``policy_error``.
        job_retries: how many times a job whose worker died is run again before it is recorded as ``env_crash``.
    """

    concurrency: int = 8
    processes: int | None = None
    policy_timeout_s: float | None = None
    job_retries: int = 2
    name = "process"
    last_run: ProcessRunStats | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if self.processes is not None and self.processes < 1:
            raise ValueError("processes must be at least 1")
        if self.job_retries < 0:
            raise ValueError("job_retries must be at least 0")

    def plan(self, episodes: int) -> list[int]:
        """Slots per worker for a run of ``episodes``."""
        from aworld_gym.rollout.engines.ray_pool import split

        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        n = max(1, min(self.processes or cpus, self.concurrency, episodes))
        return split(min(self.concurrency, max(episodes, n)), n)

    async def run(self, work: Work) -> AsyncIterator[tuple[Job, Trajectory]]:
        """``(job, trajectory)`` for every job of ``work``, in the order they finish (once each)."""
        if not work.jobs:
            return
        import cloudpickle

        spec = cloudpickle.dumps((Work(work.env_id, work.make, work.policy, [], list(work.task_ids),
                                       work.retry_void), self.policy_timeout_s))  # fmt: skip
        stats = self.last_run = ProcessRunStats(jobs=len(work.jobs))
        jobs = {j.index: j for j in work.jobs}
        queue: deque[Job] = deque(work.jobs)
        done: set[int] = set()
        events: asyncio.Queue[tuple[int, int, Any]] = asyncio.Queue()  # (worker, generation, frame or None: gone)
        workers: list[_Worker] = []
        t0 = time.perf_counter()

        planned = self.plan(len(work.jobs))
        # the soft limit raised here is the workers' (inherited); the hard one checked against what the env holds
        ensure_descriptors(max(planned), descriptors_per_episode(work.make))
        # the workers share the machine's slots of the env's per-process gates (the browser env's, for one)
        environ = {**os.environ, **worker_environ(work.env_id, len(planned))}

        async def spawn(i: int, slots: int, generation: int) -> _Worker:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "aworld_gym.rollout.engines.process_worker", str(slots),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=environ,
                limit=2**26,  # one record per frame; the reader's limit only bounds readline, kept generous
            )  # fmt: skip
            w = _Worker(proc, slots, generation)
            assert proc.stdin is not None
            proc.stdin.write(write_frame(("spec", spec)))
            w.reader = asyncio.create_task(pump(i, w))
            stats.workers += 1
            return w

        async def pump(i: int, w: _Worker) -> None:
            assert w.proc.stdout is not None
            try:
                while True:
                    await events.put((i, w.generation, await read_frame(w.proc.stdout)))
            except (asyncio.IncompleteReadError, ConnectionError, pickle.UnpicklingError, EOFError):
                await events.put((i, w.generation, None))

        def finish(job: Job, traj: Trajectory) -> tuple[Job, Trajectory]:
            done.add(job.index)
            if traj.task_id is None:
                traj.task_id = work.task_id(job)
            if stats.attempts.get(job.index, 0) > 1:
                traj.extra["worker_attempts"] = stats.attempts[job.index]
            return job, traj

        def crashed(job: Job, why: str) -> Trajectory:
            traj = failed_trajectory(work.env_id, Termination.ENV_CRASH, RuntimeError(why), task_id=work.task_id(job),
                                     seed=job.seed, sample=job.sample, group=str(job.group))  # fmt: skip
            traj.extra["worker_attempts"] = stats.attempts.get(job.index, 0)
            return traj

        async def lose(i: int) -> list[tuple[Job, Trajectory]]:
            """Worker ``i`` is gone: its jobs go back to the queue (or are given up), a new worker takes its slots."""
            old = workers[i]
            stats.workers_lost += 1
            await _reap(old)
            out = []
            for job in sorted(old.assigned.values(), key=lambda j: j.index, reverse=True):
                if job.index in done:
                    continue
                if stats.attempts.get(job.index, 0) > self.job_retries:
                    stats.gave_up.append(job.index)
                    why = f"its worker process died {stats.attempts[job.index]} times (exit {old.proc.returncode})"
                    out.append(finish(job, crashed(job, why)))
                else:
                    queue.appendleft(job)
            if len(done) + len(out) < len(jobs):
                workers[i] = await spawn(i, old.slots, old.generation + 1)
            return out

        try:
            for i, slots in enumerate(planned):
                workers.append(await spawn(i, slots, 0))
            stats.start_s = time.perf_counter() - t0
            while len(done) < len(jobs):
                for w in workers:
                    if w.proc.returncode is not None:
                        continue  # gone: its end is in the events, and lose() gives its jobs to a new worker
                    batch = take_jobs(queue, w.slots - len(w.assigned), done)
                    if batch:
                        for job in batch:
                            w.assigned[job.index] = job
                            stats.attempts[job.index] = stats.attempts.get(job.index, 0) + 1
                        assert w.proc.stdin is not None
                        with contextlib.suppress(ConnectionError):
                            w.proc.stdin.write(write_frame(("jobs", batch)))
                i, generation, frame = await events.get()
                w = workers[i]
                if generation != w.generation:
                    continue  # a replaced worker's last words
                if frame is None:
                    for item in await lose(i):
                        yield item
                    continue
                _, index, record, error = frame
                w.assigned.pop(index, None)
                if index in done:
                    stats.duplicates += 1
                    continue
                job = jobs[index]
                traj = Trajectory.from_record(record) if record is not None else crashed(job, error or "no record")
                yield finish(job, traj)
        finally:
            stats.wall_s = time.perf_counter() - t0
            await asyncio.shield(asyncio.gather(*(_reap(w) for w in workers), return_exceptions=True))


async def _reap(w: _Worker) -> None:
    """Tell a worker to close (its envs and their servers), wait, kill it if it does not."""
    proc = w.proc
    if proc.returncode is None and proc.stdin is not None:
        with contextlib.suppress(Exception):
            proc.stdin.write(write_frame(("close",)))
            await proc.stdin.drain()
            proc.stdin.close()
    try:
        await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
    if w.reader is not None:
        w.reader.cancel()
        with contextlib.suppress(BaseException):
            await w.reader
