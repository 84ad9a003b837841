"""The episode actor of :class:`~aworld_gym.rollout.engines.ray_engine.RayEngine`: one Ray actor process running many
episodes at once on its own event loop, kept warm across runs.

The driver talks to it in batches: ``submit`` hands it a list of jobs (each starts at once: the driver never gives an
actor more jobs than its slots), ``drain`` waits until at least one of them has finished and returns every record
finished since the last drain. What the jobs run on (the env factory, the policy factory, the task ids) arrives as a
:class:`Spec` with each submit, by reference; the actor loads it only when its keys change, so envs (their MCP
sessions, their server processes) and policies made for one run are reused by the next run of the same spec.
"""

from __future__ import annotations

import asyncio
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aworld_gym.base import capacity
from aworld_gym.base.capacity import ensure_descriptors
from aworld_gym.rollout.engines import Work
from aworld_gym.rollout.envs import descriptors_per_episode
from aworld_gym.rollout.jobs import Job
from aworld_gym.rollout.policies import Policy
from aworld_gym.rollout.pool import EnvPool

# One finished job as it crosses the process boundary: (job index, its trajectory's record or None, the error text
# when the job raised below the driver, which never happens for what the env or the policy do).
Result = tuple[int, dict[str, Any] | None, str | None]


@dataclass(frozen=True)
class Spec:
    """What a run's jobs run on: a :class:`~aworld_gym.rollout.engines.Work` without its jobs, and the keys that tell
    an actor whether its envs (``env_key``) and its policies (``policy_key``) can be kept from the last run."""

    work: Work
    env_key: str
    policy_key: str
    policy_timeout_s: float | None = None

    @classmethod
    def of(cls, work: Work, policy_timeout_s: float | None) -> Spec:
        """The spec of ``work``, keyed by the pickled bytes of its env and policy parts."""
        import hashlib

        from ray import cloudpickle

        bare = Work(work.env_id, work.make, work.policy, [], list(work.task_ids), work.retry_void)

        def key(*parts: Any) -> str:
            try:
                return hashlib.sha256(cloudpickle.dumps(parts)).hexdigest()
            except Exception:  # noqa: BLE001 - unpicklable here means unpicklable for Ray too: it will say so
                return f"unkeyed-{id(parts)}"

        return cls(bare, key(work.env_id, work.make, bare.task_ids), key(work.policy), policy_timeout_s)


@dataclass
class _Run:
    tasks: dict[int, asyncio.Task[None]] = field(default_factory=dict)
    outbox: list[Result] = field(default_factory=list)
    cancelled: bool = False


class EpisodeWorker:
    """A Ray actor: runs the jobs it is given, up to ``slots`` at once, on an env pool and policies of its own.

    Args:
        slots: episodes at once (the driver keeps within it; a semaphore makes sure).
        linger_s: how long ``drain`` waits after the first finished record for more to batch with it.
        environ: environment variables for this actor's process, unless set there already (the pool passes the
            actor's share of its node's browser slots, ``$AWORLD_GYM_BROWSER_ACTIVE``).
    """

    def __init__(self, slots: int, linger_s: float = 0.0, environ: dict[str, str] | None = None) -> None:
        import aworld_gym  # noqa: F401 - registers the ids in this worker process

        for key, value in (environ or {}).items():  # e.g. this actor's share of its node's browser slots
            os.environ.setdefault(key, value)

        # an actor's limits are its raylet's, not the driver's: raised here, and checked when its env is known
        ensure_descriptors(slots, capacity.FDS_MODEL)
        self.slots, self.linger_s = slots, linger_s
        self.spec: Spec | None = None
        self.pool: EnvPool | None = None
        self._policies: list[Policy] = []
        self._runs: dict[int, _Run] = {}
        self._cancelled: set[int] = set()  # runs stopped early: a late submit or drain for one returns at once
        self._wake = asyncio.Event()
        self._adopting = asyncio.Lock()
        self._sem = asyncio.Semaphore(slots)

    async def ready(self) -> tuple[str, int]:
        """``(node id, pid)`` of this actor, once its process is up and aworld-gym imported."""
        import ray

        return ray.get_runtime_context().get_node_id(), os.getpid()

    async def pids(self) -> list[int]:
        """This actor's process and its live descendants (its envs' server processes)."""
        import psutil

        me = psutil.Process()
        return [me.pid, *(p.pid for p in me.children(recursive=True))]

    async def info(self) -> dict[str, Any]:
        """Envs made so far, runs still open, jobs running: what a test or benchmark asks a warm actor."""
        running = sum(len(r.tasks) for r in self._runs.values())
        return {"envs_made": self.pool.made if self.pool else 0, "runs_open": len(self._runs), "running": running}

    async def submit(self, run: int, spec: list[Any], env_key: str, policy_key: str, jobs: list[Job]) -> None:
        """Start ``jobs`` of run ``run`` now; ``spec`` is ``[ObjectRef of a Spec]``, fetched only when a key changed."""
        try:
            await self._adopt(spec, env_key, policy_key)
            error = None
        except Exception:  # noqa: BLE001 - e.g. a factory that does not unpickle here: each job says so
            error = traceback.format_exc()
        if run in self._cancelled:
            return
        state = self._runs.setdefault(run, _Run())  # after the await: a drain may have retired the old state
        if error is not None:
            state.outbox.extend((job.index, None, error) for job in jobs)
            self._wake.set()
            return
        for job in jobs:
            state.tasks[job.index] = asyncio.create_task(self._one(run, state, job))

    async def _adopt(self, spec: list[Any], env_key: str, policy_key: str) -> None:
        async with self._adopting:
            current = self.spec
            if current is not None and (current.env_key, current.policy_key) == (env_key, policy_key):
                return
            new: Spec = await spec[0]
            if current is None or current.env_key != env_key:
                ensure_descriptors(self.slots, descriptors_per_episode(new.work.make))  # each job says so if short
                old, self.pool = self.pool, EnvPool(new.work.make, max_idle=self.slots)
                if old is not None:
                    await old.aclose()
            if current is None or current.policy_key != policy_key:
                self._policies = []
            self.spec = new

    async def _one(self, run: int, state: _Run, job: Job) -> None:
        spec, pool = self.spec, self.pool
        assert spec is not None and pool is not None
        result: Result
        async with self._sem:
            try:
                policy = self._policies.pop() if self._policies else spec.work.policy()
                try:
                    traj = await spec.work.run(pool, policy, job, policy_timeout_s=spec.policy_timeout_s)
                    result = (job.index, traj.to_record(), None)
                finally:
                    self._policies.append(policy)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a bug below the driver: recorded by the engine, never a hang
                result = (job.index, None, traceback.format_exc())
        state.tasks.pop(job.index, None)
        if not state.cancelled:
            state.outbox.append(result)
            self._wake.set()

    async def drain(self, run: int) -> list[Result]:
        """Wait until a job of ``run`` has finished (or the run is cancelled); every result finished since."""
        if run in self._cancelled:
            return []
        state = self._runs.setdefault(run, _Run())
        while not state.outbox and not state.cancelled:
            self._wake.clear()
            await self._wake.wait()
        if self.linger_s > 0 and state.tasks and not state.cancelled:
            await asyncio.sleep(self.linger_s)  # let near-simultaneous finishes share this reply
        out, state.outbox = state.outbox, []
        if not state.tasks and not state.outbox:
            self._runs.pop(run, None)
        return out

    async def cancel(self, run: int) -> int:
        """Stop the jobs of ``run`` still running (their envs are closed, not reused); how many there were."""
        self._cancelled.add(run)
        state = self._runs.pop(run, None)
        if state is None:
            return 0
        state.cancelled = True
        self._wake.set()  # a drain waiting on this run returns
        tasks = list(state.tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return len(tasks)

    async def close(self) -> None:
        """Stop every run and close every env of this actor (their sessions and server processes)."""
        for run in list(self._runs):
            await self.cancel(run)
        if self.pool is not None:
            await self.pool.aclose()


def actor_class(ray: Any, max_concurrency: int = 64) -> Callable[..., Any]:
    """:class:`EpisodeWorker` as a Ray actor class: no CPU reserved (its episodes wait on models and tools), never
    restarted by Ray (the engine replaces a lost actor where it sees fit and re-runs its jobs).

    ``max_concurrency`` bounds the actor's method calls at once (``submit``, ``drain``, ``cancel``, ...; the driver
    keeps one drain and a few submits per actor in flight), not its episodes: ``submit`` starts each job as a task
    of the actor's loop and returns, so an actor's episodes in flight are its ``slots`` whatever this number is."""
    return ray.remote(num_cpus=0, max_concurrency=max_concurrency, max_restarts=0)(EpisodeWorker)  # type: ignore[no-any-return]
