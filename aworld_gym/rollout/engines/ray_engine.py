"""The Ray engine: episodes on a pool of Ray actors over the cluster, each running many episodes on its own loop.

Two ways to use it:

- **One-shot** (``collect(..., engine=RayEngine(...))`` or ``engine="ray"``): each run starts its actors and closes
  them at its end.
- **Warm** (``with RayEngine(...) as engine:``, or ``engine.start()`` ... ``engine.close()``): the actors start once
  and stay until ``close()``; every ``collect`` / ``stream`` / ``stream_groups`` call given this engine runs on them,
  and an actor keeps its envs (their MCP sessions and server processes) and policies from one run to the next while
  the env and policy factories pickle to the same bytes. A trainer keeps one engine across its steps.

Jobs go to the actors in batches (as many as an actor has free slots, one call) and records come back in batches
(whatever finished since the last reply, one call). **Lost actors and nodes**: a job whose actor dies (its process
killed, its node removed) is run again on another actor, at most ``job_retries`` more times, and recorded as
``env_crash`` (status ``void``) only after that; the replacement actor goes to an alive node. Execution is
at-least-once (an episode cut short by the loss ran partly: its side effects are the env's business); records are
exactly once: the engine keeps one record per job and drops any later one (``last_run.duplicates``).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aworld_gym.core.trajectory import Termination, Trajectory
from aworld_gym.rollout.engines import Work, take_jobs
from aworld_gym.rollout.engines.ray_pool import ActorPool
from aworld_gym.rollout.engines.ray_worker import Spec
from aworld_gym.rollout.jobs import Job
from aworld_gym.rollout.pool import failed_trajectory

__all__ = ["RayEngine", "RunStats", "init_ray", "spread"]


def init_ray(address: str | None = None) -> Any:
    """Join ``address`` (``"auto"``: the running cluster) or start a private local one (no dashboard)."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address or "local", include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    return ray


def spread(i: int) -> Any:
    """A scheduling strategy that puts actor ``i`` on the ``i``-th alive node (round robin, hard node affinity)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))
    if not nodes:
        return "SPREAD"
    return NodeAffinitySchedulingStrategy(node_id=nodes[i % len(nodes)], soft=False)


@dataclass
class RunStats:
    """What one run on the pool did, per job index: for tests, benchmarks and post-mortems."""

    jobs: int = 0
    attempts: dict[int, list[str]] = field(default_factory=dict)  # the node of every dispatch of each job
    recorded_on: dict[int, str] = field(default_factory=dict)  # the node whose record was kept ("" if none ran)
    gave_up: list[int] = field(default_factory=list)  # recorded as env_crash after job_retries re-runs
    actors_lost: int = 0
    duplicates: int = 0  # records of a job already recorded, dropped
    batches: int = 0  # submit calls
    replies: int = 0  # drain replies with records
    wall_s: float = 0.0
    first_record_s: float | None = None

    @property
    def reruns(self) -> dict[int, list[str]]:
        """The jobs dispatched more than once, with the node of each dispatch."""
        return {i: nodes for i, nodes in self.attempts.items() if len(nodes) > 1}


@dataclass
class RayEngine:
    """Episodes on a pool of Ray actors (see the module's docstring for one-shot and warm use).

    Args:
        concurrency: episodes in flight over the whole pool (split into the actors' slots).
        address: the cluster to join (``None``: a new private local one; ``"auto"``: the running one).
        actors: actors in the pool, shared over the nodes in proportion to their CPUs (default: ``actors_per_cpu``
            per CPU of each node); never more than ``concurrency`` (nor, one-shot, than the run's episodes).
        policy_timeout_s: a policy turn that takes longer ends its episode as ``policy_error``.
        actors_per_cpu: actors per CPU of each node when ``actors`` is not given (at least one per node).
        job_retries: how many times a job whose actor was lost is run again (on another actor) before it is
            recorded as ``env_crash``.
        linger_s: how long an actor holds a finished record for others to send with it.
    """

    concurrency: int = 8
    address: str | None = None
    actors: int | None = None
    policy_timeout_s: float | None = None
    actors_per_cpu: float = 1.0
    job_retries: int = 2
    linger_s: float = 0.002
    name = "ray"
    last_run: RunStats | None = field(default=None, init=False, repr=False)
    _pool: ActorPool | None = field(default=None, init=False, repr=False)
    _busy: bool = field(default=False, init=False, repr=False)
    _runs: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if self.job_retries < 0:
            raise ValueError("job_retries must be at least 0")

    # ----- the warm pool --------------------------------------------------------------------------------------
    def start(self, timeout: float = 300.0) -> RayEngine:
        """Start the actors now and keep them until :meth:`close` (idempotent); blocks until every one is up."""
        if self._pool is None:
            pool = self._new_pool(None)
            try:
                pool.wait_ready(timeout)
            except BaseException:
                pool.close()
                raise
            self._pool = pool
        return self

    @property
    def warm(self) -> bool:
        """Whether a started pool is waiting for runs."""
        return self._pool is not None

    @property
    def pool(self) -> ActorPool | None:
        """The started pool (``None`` until :meth:`start`)."""
        return self._pool

    def close(self) -> None:
        """Close every actor's envs and stop the actors (idempotent; a later run starts a one-shot pool)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def __enter__(self) -> RayEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _new_pool(self, most: int | None, env_id: str | None = None) -> ActorPool:
        ray = init_ray(self.address)
        return ActorPool(ray, self.concurrency, self.actors, self.actors_per_cpu, most, self.linger_s, env_id)

    # ----- a run ----------------------------------------------------------------------------------------------
    async def run(self, work: Work) -> AsyncIterator[tuple[Job, Trajectory]]:
        """``(job, trajectory)`` for every job of ``work``, in the order they finish (once each)."""
        if self._busy:
            raise RuntimeError("this RayEngine is running another rollout: one run at a time per engine")
        if not work.jobs:
            return
        self._busy = True
        one_shot = self._pool is None
        try:
            pool = self._new_pool(len(work.jobs), work.env_id) if one_shot else self._pool
            assert pool is not None
            try:
                async for item in self._dispatch(pool, work):
                    yield item
            finally:
                if one_shot:
                    await asyncio.shield(asyncio.to_thread(pool.close))
        finally:
            self._busy = False

    async def _dispatch(self, pool: ActorPool, work: Work) -> AsyncIterator[tuple[Job, Trajectory]]:
        ray = pool.ray
        self._runs += 1
        run_id = (id(self) << 16) + self._runs
        spec = Spec.of(work, self.policy_timeout_s)
        ref = ray.put(spec)
        stats = self.last_run = RunStats(jobs=len(work.jobs))
        jobs = {j.index: j for j in work.jobs}
        queue: deque[Job] = deque(work.jobs)
        assigned: list[dict[int, Job]] = [{} for _ in pool.members]
        waiting: dict[asyncio.Future[Any], tuple[str, int, int, str]] = {}  # -> (kind, actor, generation, node)
        draining: set[int] = set()
        done: set[int] = set()
        t0 = time.perf_counter()

        def watch(kind: str, i: int, obj: Any) -> None:
            member = pool.members[i]
            waiting[asyncio.wrap_future(obj.future())] = (kind, i, member.generation, member.node)

        def lose(i: int, exc: BaseException) -> list[tuple[Job, Trajectory]]:
            """Actor ``i`` is lost: replace it, queue its jobs again (or give up on those out of retries)."""
            pool.replace(i)
            stats.actors_lost += 1
            draining.discard(i)
            crashed = []
            for job in sorted(assigned[i].values(), key=lambda j: j.index, reverse=True):
                if job.index in done:
                    continue
                if len(stats.attempts[job.index]) > self.job_retries:
                    stats.gave_up.append(job.index)
                    crashed.append(finish(job, self._crashed(work, job, exc, len(stats.attempts[job.index])), ""))
                else:
                    queue.appendleft(job)
            assigned[i] = {}
            return crashed

        def finish(job: Job, traj: Trajectory, node: str) -> tuple[Job, Trajectory]:
            done.add(job.index)
            stats.recorded_on[job.index] = node
            if stats.first_record_s is None:
                stats.first_record_s = time.perf_counter() - t0
            if traj.task_id is None:
                traj.task_id = work.task_id(job)
            if len(stats.attempts.get(job.index, ())) > 1:
                traj.extra["actor_attempts"] = len(stats.attempts[job.index])
            return job, traj

        try:
            while len(done) < len(jobs):
                for i, member in enumerate(pool.members):
                    batch = take_jobs(queue, member.slots - len(assigned[i]), done)
                    if batch:
                        for job in batch:
                            assigned[i][job.index] = job
                            stats.attempts.setdefault(job.index, []).append(member.node)
                        stats.batches += 1
                        watch("submit", i, member.handle.submit.remote(run_id, [ref], spec.env_key,
                                                                       spec.policy_key, batch))  # fmt: skip
                    if assigned[i] and i not in draining:
                        draining.add(i)
                        watch("drain", i, member.handle.drain.remote(run_id))
                if not waiting:
                    raise RuntimeError("the Ray engine has jobs left but nothing running (a bug)")
                ready, _ = await asyncio.wait(list(waiting), return_when=asyncio.FIRST_COMPLETED)
                for fut in ready:
                    kind, i, generation, node = waiting.pop(fut)
                    current = pool.members[i].generation == generation
                    if kind == "drain" and current:
                        draining.discard(i)
                    try:
                        results = fut.result()
                    except Exception as exc:  # noqa: BLE001 - a dead or unreachable actor, a lost node
                        if current:  # a stale incarnation's failure was handled when it was replaced
                            for item in lose(i, exc):
                                yield item
                        continue
                    if kind == "submit":
                        continue
                    stats.replies += 1
                    for index, record, error in results:
                        if current:
                            assigned[i].pop(index, None)
                        if index in done:
                            stats.duplicates += 1
                            continue
                        job = jobs[index]
                        if record is None:
                            traj = self._crashed(work, job, RuntimeError(error or "no record"), 1)
                        else:
                            traj = Trajectory.from_record(record)
                        yield finish(job, traj, node)
        finally:
            stats.wall_s = time.perf_counter() - t0
            for fut in waiting:
                fut.cancel()
            if len(done) < len(jobs) and pool.members:  # the consumer left early: stop this run's episodes
                await asyncio.shield(asyncio.to_thread(_cancel, ray, pool, run_id))

    @staticmethod
    def _crashed(work: Work, job: Job, exc: BaseException, attempts: int) -> Trajectory:
        traj = failed_trajectory(work.env_id, Termination.ENV_CRASH, exc, task_id=work.task_id(job), seed=job.seed,
                                 sample=job.sample, group=str(job.group))  # fmt: skip
        if attempts > 1:
            traj.extra["actor_attempts"] = attempts
        return traj


def _cancel(ray: Any, pool: ActorPool, run_id: int) -> None:
    """Cancel a run's episodes on every actor (a warm pool stays clean for the next run)."""
    refs = [m.handle.cancel.remote(run_id) for m in pool.members]
    ray.wait(refs, num_returns=len(refs), timeout=30)
