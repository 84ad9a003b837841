"""The Ray engine of :func:`aworld_gym.rollout.collect.collect`: a pool of episode actors over the cluster."""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Callable
from typing import Any

from aworld_gym.rollout.collect import Job, failed_record
from aworld_gym.rollout.policies import Policy


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
    """Runs episodes on ``slots`` envs of its own (one asyncio loop; a finished episode frees its env at once)."""

    def __init__(
        self, env_id: str, make: Callable[[], Any], factory: Callable[[], Policy], slots: int, timeout: float | None
    ) -> None:
        import aworld_gym  # noqa: F401 - registers the ids in this worker process

        self.env_id, self.make, self.factory, self.timeout = env_id, make, factory, timeout
        self.slots = slots
        self._idle: asyncio.Queue[Any] | None = None
        self._made = 0

    def node(self) -> tuple[str, int]:
        import ray

        return ray.get_runtime_context().get_node_id(), os.getpid()

    async def run(self, job: Job) -> dict[str, Any]:
        from aworld_gym.rollout.collect import run_job

        if self._idle is None:
            self._idle = asyncio.Queue()
        if self._idle.empty() and self._made < self.slots:
            self._made += 1
            try:
                env = await asyncio.to_thread(self.make)
                policy = self.factory()
            except Exception as exc:  # noqa: BLE001 - recorded as this episode's env_error, as in-process
                self._made -= 1  # the slot stays usable
                return failed_record(self.env_id, job, None, "env_error", exc)
        else:
            env, policy = await self._idle.get()
        keep = False
        try:
            record = await run_job(env, policy, self.env_id, job, self.timeout)
            keep = record["termination"] != "env_error"
            return record
        finally:
            if keep:
                self._idle.put_nowait((env, policy))
            else:  # a broken env (or an error escaping the runner) frees its slot for a fresh one
                self._made -= 1
                try:
                    await env.aclose()
                except Exception:  # noqa: BLE001 - closing a broken env must not stop the actor
                    pass

    async def close(self) -> None:
        """Close every env of this actor (their sessions and server processes)."""
        while self._idle is not None and not self._idle.empty():
            env, _ = self._idle.get_nowait()
            try:
                await env.aclose()
            except Exception:  # noqa: BLE001 - best effort before the actor is killed
                pass


def collect_ray(
    env_id: str,
    make: Callable[[], Any],
    factory: Callable[[], Policy],
    jobs: list[Job],
    concurrency: int,
    on_record: Callable[[Job, dict[str, Any]], None],
    policy_timeout_s: float | None,
    ray_address: str | None,
    ray_actors: int | None,
    task_ids: list[str] | None = None,
) -> None:
    """Spread ``jobs`` over a pool of :class:`EpisodeWorker` actors; replace actors that die."""
    ray = init_ray(ray_address)
    from ray.exceptions import RayActorError

    cpus = int(ray.cluster_resources().get("CPU", 1))
    n_actors = max(1, min(ray_actors or cpus, concurrency, len(jobs)))
    slots = math.ceil(concurrency / n_actors)
    remote = ray.remote(num_cpus=0, max_concurrency=slots + 1, max_restarts=0)(EpisodeWorker)

    def spawn(i: int) -> Any:
        return remote.options(scheduling_strategy=spread(i)).remote(env_id, make, factory, slots, policy_timeout_s)

    actors = [spawn(i) for i in range(n_actors)]
    load = {i: 0 for i in range(n_actors)}
    pending: dict[Any, tuple[Job, int, Any]] = {}
    queue = list(reversed(jobs))
    try:
        while queue or pending:
            while queue and len(pending) < concurrency:
                i = min(load, key=load.__getitem__)
                job = queue.pop()
                pending[actors[i].run.remote(job)] = (job, i, actors[i])
                load[i] += 1
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=5.0)
            for ref in ready:
                job, i, actor = pending.pop(ref)
                load[i] -= 1
                task_id = task_ids[job.task_index] if task_ids else None
                try:
                    record = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - a dead actor, a lost object, a failed task: data
                    record = failed_record(env_id, job, task_id, "env_crash", exc)
                    if isinstance(exc, RayActorError) and actors[i] is actor:
                        actors[i] = spawn(i)  # replaced once; its other in-flight episodes surface as env_crash
                if record.get("task_id") is None:
                    record["task_id"] = task_id
                on_record(job, record)
    finally:
        closing = [a.close.remote() for a in actors]
        ray.wait(closing, num_returns=len(closing), timeout=30)  # let envs stop their servers first
        for actor in actors:
            ray.kill(actor)
