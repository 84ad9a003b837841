"""The Ray engine's actor pool (driver side): how many episode actors, on which nodes, with how many slots each;
replacing a lost actor; closing them all.

Actors per node are sized from the node's CPUs (``actors_per_cpu`` each, at least one per node), or ``actors`` in
all shared out in proportion to the nodes' CPUs, and placed with hard node affinity (Ray's ``SPREAD`` and soft
affinity were seen to pile zero-CPU actors onto one node). The engine's concurrency is split over the actors as
slots. A lost actor is replaced on the alive node with the fewest actors per CPU, avoiding the nodes that have
just lost one (a node being removed may still be listed alive for a while).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aworld_gym.core.registry import worker_environ
from aworld_gym.rollout.engines.ray_worker import actor_class


def alive_nodes(ray: Any) -> dict[str, float]:
    """``{node id: CPUs}`` of the alive nodes (a node without CPUs counts as one)."""
    return {n["NodeID"]: float(n.get("Resources", {}).get("CPU", 0)) or 1.0 for n in ray.nodes() if n.get("Alive")}


def plan_actors(nodes: dict[str, float], actors: int | None, per_cpu: float, most: int) -> list[str]:
    """The node of each actor: interleaved over the nodes (actor ``i`` of a cut list still spreads), sized from CPUs.

    Args:
        nodes: ``{node id: CPUs}``.
        actors: actors in all (shared in proportion to CPUs); ``None``: ``per_cpu`` actors per CPU of each node.
        per_cpu: actors per CPU when ``actors`` is not given (at least one per node).
        most: the list is cut to this many (e.g. the concurrency).
    """
    if not nodes:
        return []
    ids = sorted(nodes)
    if actors is None:
        counts = {n: max(1, round(nodes[n] * per_cpu)) for n in ids}
    else:
        total = sum(nodes[n] for n in ids)
        exact = {n: actors * nodes[n] / total for n in ids}
        counts = {n: math.floor(exact[n]) for n in ids}
        for n in sorted(ids, key=lambda n: exact[n] - counts[n], reverse=True)[: actors - sum(counts.values())]:
            counts[n] += 1
    order: list[str] = []
    for r in range(max(counts.values())):
        order += [n for n in ids if counts[n] > r]
    return order[: max(1, most)]


def split(total: int, parts: int) -> list[int]:
    """``total`` slots over ``parts`` actors, as evenly as possible."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


@dataclass
class Member:
    """One actor of the pool: its handle, its node, its slots, and which incarnation of slot ``i`` it is."""

    handle: Any
    node: str
    slots: int
    generation: int = 0


@dataclass
class ActorPool:
    """Episode actors over the cluster, kept until :meth:`close`.

    Args:
        ray: the ``ray`` module (initialised).
        concurrency: episodes at once over the whole pool (split into the actors' slots).
        actors: actors in all (``None``: sized from each node's CPUs with ``actors_per_cpu``).
        actors_per_cpu: actors per CPU of a node when ``actors`` is not given.
        most: at most this many actors (besides ``concurrency``; e.g. a one-shot run's job count).
        linger_s: an actor's wait after a finished record for more to send with it.
        env_id: the env the actors will run (its declared worker share sets their environment); ``None`` (a warm
            pool started before any run): every declared share.
    """

    ray: Any
    concurrency: int
    actors: int | None = None
    actors_per_cpu: float = 1.0
    most: int | None = None
    linger_s: float = 0.002
    env_id: str | None = None
    members: list[Member] = field(default_factory=list)
    lost: int = 0
    start_s: float = 0.0
    _suspect: dict[str, float] = field(default_factory=dict)
    _nodes: dict[str, float] = field(default_factory=dict)  # {node id: CPUs} at the start
    _per_node: Counter[str] = field(default_factory=Counter)  # actors planned per node

    def __post_init__(self) -> None:
        self._remote = actor_class(self.ray)
        nodes = alive_nodes(self.ray)
        cap = min(self.concurrency, self.most or self.concurrency)
        placed = plan_actors(nodes, self.actors, self.actors_per_cpu, cap) or [""]
        self._nodes, self._per_node = nodes, Counter(placed)
        for node, slots in zip(placed, split(self.concurrency, len(placed)), strict=True):
            self.members.append(Member(self._spawn(node, slots), node, slots))

    def _spawn(self, node: str, slots: int) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options: dict[str, Any] = {}
        if node:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
        # the node's actors share its slots of the env's per-process gates (the browser env's, for one)
        environ = worker_environ(self.env_id, self._per_node.get(node, 1), self._nodes.get(node))
        return self._remote.options(**options).remote(slots, self.linger_s, environ)

    def wait_ready(self, timeout: float = 300.0) -> float:
        """Block until every actor is up (process started, aworld-gym imported); the seconds it took."""
        t0 = time.perf_counter()
        self.ray.get([m.handle.ready.remote() for m in self.members], timeout=timeout)
        self.start_s = time.perf_counter() - t0
        return self.start_s

    def replace(self, i: int) -> Member:
        """Kill actor ``i`` (lost: dead, unreachable or failing) and start a new one on the best alive node."""
        old = self.members[i]
        self.lost += 1
        self._suspect[old.node] = time.monotonic()
        try:
            self.ray.kill(old.handle)
        except Exception:  # noqa: BLE001 - already gone
            pass
        node = self._pick()
        new = Member(self._spawn(node, old.slots), node, old.slots, old.generation + 1)
        self.members[i] = new
        return new

    def _pick(self) -> str:
        nodes = alive_nodes(self.ray)
        recent = {n for n, t in self._suspect.items() if time.monotonic() - t < 60}
        choice = [n for n in nodes if n not in recent] or list(nodes)
        if not choice:
            return ""
        load = {n: 0 for n in choice}
        for m in self.members:
            if m.node in load:
                load[m.node] += 1
        return min(choice, key=lambda n: (load[n] / nodes[n], n))

    def pids(self, timeout: float = 30.0) -> dict[str, list[int]]:
        """``{node id: pids}`` of every actor process and its descendants (for tests and orphan checks)."""
        out: dict[str, list[int]] = {}
        lists = self.ray.get([m.handle.pids.remote() for m in self.members], timeout=timeout)
        for m, pids in zip(self.members, lists, strict=True):
            out.setdefault(m.node, []).extend(pids)
        return out

    def info(self, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Every actor's :meth:`~aworld_gym.rollout.engines.ray_worker.EpisodeWorker.info`, with its node."""
        infos = self.ray.get([m.handle.info.remote() for m in self.members], timeout=timeout)
        return [{**info, "node": m.node} for m, info in zip(self.members, infos, strict=True)]

    def close(self, timeout: float = 30.0) -> None:
        """Let every actor close its envs (their servers stop), then kill the actors."""
        members, self.members = self.members, []
        closing = [m.handle.close.remote() for m in members]
        self.ray.wait(closing, num_returns=len(closing), timeout=timeout)
        for m in members:
            try:
                self.ray.kill(m.handle)
            except Exception:  # noqa: BLE001 - already gone
                pass
