"""The Ray engine: a pool of episode actors over the cluster, each running env slots on its own event loop."""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aworld_gym.core.trajectory import Termination, Trajectory
from aworld_gym.rollout.engines import Work
from aworld_gym.rollout.jobs import Job
from aworld_gym.rollout.policies import Policy
from aworld_gym.rollout.pool import EnvPool, failed_trajectory


def init_ray(address: str | None = None) -> Any:
    """Join ``address`` (``"auto"``: the running cluster) or start a private local one (no dashboard)."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address or "local", include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    return ray


def spread(i: int) -> Any:
    """A scheduling strategy that puts actor ``i`` on the ``i``-th alive node (round robin).

    Ray's ``SPREAD`` and soft node affinity are best effort and were seen to pile zero-CPU actors onto one node; hard
    affinity to a node alive now is exact. A node that dies later takes its actors with it: their episodes are
    recorded as ``env_crash`` and the replacements are placed on the nodes still alive.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))
    if not nodes:
        return "SPREAD"
    return NodeAffinitySchedulingStrategy(node_id=nodes[i % len(nodes)], soft=False)


class EpisodeWorker:
    """A Ray actor: runs up to ``slots`` episodes at once on an env pool of its own (one asyncio loop; a finished
    episode frees its env and its policy at once)."""

    def __init__(self, work: Work, slots: int, timeout: float | None) -> None:
        import aworld_gym  # noqa: F401 - registers the ids in this worker process

        self.work, self.timeout, self.slots = work, timeout, slots
        self.pool = EnvPool(work.make, max_idle=slots)
        self._policies: list[Policy] = []

    def node(self) -> tuple[str, int]:
        import ray

        return ray.get_runtime_context().get_node_id(), os.getpid()

    async def run(self, job: Job) -> dict[str, Any]:
        """One episode; its trajectory's record (what crosses the process boundary)."""
        policy = self._policies.pop() if self._policies else self.work.policy()
        try:
            return (await self.work.run(self.pool, policy, job, policy_timeout_s=self.timeout)).to_record()
        finally:
            self._policies.append(policy)

    async def close(self) -> None:
        """Close every env of this actor (their sessions and server processes)."""
        await self.pool.aclose()


@dataclass
class RayEngine:
    """Episodes on a pool of Ray actors.

    Args:
        concurrency: episodes in flight over the whole pool.
        address: the cluster to join (``None``: a new private local one; ``"auto"``: the running one).
        actors: actors in the pool (default: the cluster's CPUs, at most ``concurrency``); each runs
            ``ceil(concurrency / actors)`` env slots. A dead actor loses only its in-flight episodes (recorded as
            ``env_crash``) and is replaced.
        policy_timeout_s: a policy turn that takes longer ends its episode as ``policy_error``.
    """

    concurrency: int = 8
    address: str | None = None
    actors: int | None = None
    policy_timeout_s: float | None = None
    name = "ray"

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")

    async def run(self, work: Work) -> AsyncIterator[tuple[Job, Trajectory]]:
        ray = init_ray(self.address)
        from ray.exceptions import RayActorError

        cpus = int(ray.cluster_resources().get("CPU", 1))
        n_actors = max(1, min(self.actors or cpus, self.concurrency, len(work.jobs)))
        slots = math.ceil(self.concurrency / n_actors)
        remote = ray.remote(num_cpus=0, max_concurrency=slots + 1, max_restarts=0)(EpisodeWorker)

        def spawn(i: int) -> Any:
            return remote.options(scheduling_strategy=spread(i)).remote(work, slots, self.policy_timeout_s)

        actors = [spawn(i) for i in range(n_actors)]
        load = dict.fromkeys(range(n_actors), 0)
        pending: dict[asyncio.Future[Any], tuple[Job, int, Any]] = {}
        queue = list(reversed(work.jobs))
        try:
            while queue or pending:
                while queue and len(pending) < self.concurrency:
                    i = min(load, key=load.__getitem__)
                    job = queue.pop()
                    ref = actors[i].run.remote(job)
                    pending[asyncio.wrap_future(ref.future())] = (job, i, actors[i])
                    load[i] += 1
                done, _ = await asyncio.wait(list(pending), return_when=asyncio.FIRST_COMPLETED)
                for fut in done:
                    job, i, actor = pending.pop(fut)
                    load[i] -= 1
                    try:
                        traj = Trajectory.from_record(fut.result())
                    except Exception as exc:  # noqa: BLE001 - a dead actor, a lost object, a failed task: data
                        traj = failed_trajectory(work.env_id, Termination.ENV_CRASH, exc, task_id=work.task_id(job),
                                                 seed=job.seed, sample=job.sample, group=str(job.group))  # fmt: skip
                        if isinstance(exc, RayActorError) and actors[i] is actor:
                            actors[i] = spawn(i)  # replaced once; its other in-flight episodes surface as env_crash
                    if traj.task_id is None:
                        traj.task_id = work.task_id(job)
                    yield job, traj
        finally:
            for fut in pending:
                fut.cancel()
            await asyncio.shield(asyncio.to_thread(_close_actors, ray, actors))


def _close_actors(ray: Any, actors: list[Any]) -> None:
    closing = [a.close.remote() for a in actors]
    ray.wait(closing, num_returns=len(closing), timeout=30)  # let envs stop their servers first
    for actor in actors:
        ray.kill(actor)
