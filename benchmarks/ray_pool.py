"""The Ray engine's warm actor pool, and a simulated 3-node cluster that loses a node mid-run.

Workload: ``AWorld/MCP-v0`` with the scripted reference policy at a fixed latency per turn standing in for a model
server (2 turns per episode, one ``add`` call over streamable HTTP to one shared calculator), as in
``benchmarks/rollout_scaling.py``. Every row is put beside the sequential baseline of the same run (the in-process
engine at concurrency 1, 4 episodes): speedup = episodes/s / sequential episodes/s, efficiency = speedup / C (both
over the window). Two clocks (``benchmarks/clocks.py``): ``episodes_per_s_whole`` is the ``collect`` call timed from
outside (``whole_s`` = ``call_s``; a warm pool's ``RayEngine.start()`` is before it, timed as ``start_s``),
``episodes_per_s`` the window (collect's own ``wall_s``, which holds a one-shot engine's actors starting and their
envs being made: it leaves out only the probe env and closing, ``outside_window_s``).

1. **Warm pool** (a private local Ray, this machine): a one-shot ``RayEngine`` call (actors started inside the
   call, as ``collect(engine="ray")`` does), then ``RayEngine.start()`` (timed) and ``--calls`` calls of
   4 x C episodes on the same engine: the first call on the warm pool (its actors make their envs) and the later ones
   (everything warm), each with the time to its first record.
2. **Node loss** (``--cluster``; ``ray.cluster_utils.Cluster``: a head and two worker nodes of ``--node-cpus`` CPUs
   each on this machine): a warm engine at ``--cluster-concurrency`` (256), one call without faults, then one where
   a worker node is removed once a quarter of the records are in. Counted: records, distinct jobs, jobs re-run,
   records dropped as doubles, jobs given up, actors lost, processes of the lost node left.

    python benchmarks/ray_pool.py [--latency 1.0] [--concurrency 64] [--calls 3] [--cluster] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from aworld_gym.rollout.collect import collect  # noqa: E402
from aworld_gym.rollout.engines import AsyncEngine  # noqa: E402
from aworld_gym.rollout.engines.ray_engine import RayEngine  # noqa: E402
from aworld_gym.rollout.policies import make_policy  # noqa: E402
from benchmarks.clocks import Clocks, now  # noqa: E402
from benchmarks.provenance import stamp  # noqa: E402
from tests.helpers import http_demo_server, plan_tasks  # noqa: E402

ENV = "AWorld/MCP-v0"


def one_run(kwargs: dict, latency: float, episodes: int, engine: Any, sink: Path | None = None) -> dict:
    """One ``collect`` call; its row (and, for a Ray engine, what the engine saw)."""
    policy = functools.partial(make_policy, "reference", ENV, latency_s=latency)
    t0 = now()  # the whole call: a one-shot engine's actors, the envs, closing them (a warm pool's start is outside)
    s = collect(ENV, policy, episodes=episodes, env_kwargs=kwargs, engine=engine, sink=sink, progress=False)
    call = now() - t0
    row = {"engine": s.engine, "concurrency": s.concurrency, "episodes": s.recorded, "successes": s.successes,
           "wall_s": s.wall_s, "call_s": call, **Clocks.outside(call, s.wall_s).fields(s.recorded)}  # fmt: skip
    stats = getattr(engine, "last_run", None)
    if stats is not None:
        row.update(first_record_s=stats.first_record_s, batches=stats.batches, replies=stats.replies,
                   reruns=len(stats.reruns), duplicates=stats.duplicates, gave_up=len(stats.gave_up),
                   actors_lost=stats.actors_lost)  # fmt: skip
    return row


def rate(row: dict, seq: float) -> dict:
    row["speedup"] = row["episodes_per_s"] / seq
    row["efficiency"] = row["speedup"] / row["concurrency"]
    return row


def print_rows(title: str, rows: list[dict]) -> None:
    print(title)
    print(f"{'row':<28} {'conc':>5} {'episodes':>8} {'ok':>5} {'eps/s whole':>11} {'eps/s window':>12} "
          f"{'whole s':>7} {'window s':>8} {'speedup':>8} {'effic.':>7} {'1st rec s':>9} {'batches':>7} {'re-run':>6} "
          f"{'dup':>4}")  # fmt: skip
    for r in rows:
        first = r.get("first_record_s")
        print(f"{r['name']:<28} {r['concurrency']:>5} {r['episodes']:>8} {r['successes']:>5} "
              f"{r['episodes_per_s_whole']:>11.2f} {r['episodes_per_s']:>12.2f} {r['whole_s']:>7.2f} "
              f"{r['window_s']:>8.2f} {r['speedup']:>8.1f} {r['efficiency']:>7.2f} "
              f"{'' if first is None else f'{first:.2f}':>9} {r.get('batches', ''):>7} {r.get('reruns', ''):>6} "
              f"{r.get('duplicates', ''):>4}")  # fmt: skip


def warm_pool(kwargs: dict, latency: float, conc: int, calls: int, seq: float) -> dict:
    """Part 1: a one-shot call, then a started engine's calls."""
    import ray

    rows = [
        dict(rate(one_run(kwargs, latency, 4 * conc, RayEngine(concurrency=conc)), seq), name="one-shot (start-up in)")
    ]
    engine = RayEngine(concurrency=conc)
    t0 = time.perf_counter()
    engine.start()
    start_s = time.perf_counter() - t0
    try:
        for k in range(calls):
            row = rate(one_run(kwargs, latency, 4 * conc, engine), seq)
            rows.append(dict(row, name="warm, first call" if k == 0 else f"warm, call {k + 1}"))
        actors = len(engine.pool.members) if engine.pool else 0
    finally:
        engine.close()
    ray.shutdown()
    later = [r["efficiency"] for r in rows[2:]]
    return {"rows": rows, "start_s": start_s, "actors": actors,
            "later_efficiency": min(later) if later else None}  # fmt: skip


def node_loss(kwargs: dict, latency: float, conc: int, node_cpus: int, seq: float) -> dict:
    """Part 2: a warm engine on a simulated 3-node cluster; one clean call, one that loses a worker node."""
    import psutil
    import ray
    from ray.cluster_utils import Cluster

    fast = {"health_check_period_ms": 500, "health_check_timeout_ms": 500, "health_check_failure_threshold": 4}
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": node_cpus, "include_dashboard": False,
                                                      "_system_config": fast})  # fmt: skip
    workers = [c.add_node(num_cpus=node_cpus) for _ in range(2)]
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    out: dict[str, Any] = {"nodes": 3, "node_cpus": node_cpus}
    try:
        with RayEngine(concurrency=conc, address="auto") as engine, tempfile.TemporaryDirectory() as tmp:
            assert engine.pool is not None
            out["actors"] = len(engine.pool.members)
            out["clean"] = dict(rate(one_run(kwargs, latency, 4 * conc, engine), seq), name="cluster, no fault")
            sink, result = Path(tmp) / "n.jsonl", {}
            t = threading.Thread(target=lambda: result.update(row=one_run(kwargs, latency, 4 * conc, engine, sink)))
            t_call = time.perf_counter()
            t.start()
            while t.is_alive() and (not sink.exists() or len(sink.read_text().splitlines()) < conc):
                time.sleep(0.05)
            victim = workers[1].node_id
            victim_pids = engine.pool.pids().get(victim, [])
            t_removed = time.perf_counter()
            c.remove_node(workers[1])
            t.join()
            rows = [json.loads(x) for x in sink.read_text().splitlines()]
            stats = engine.last_run
            assert stats is not None
            time.sleep(5)  # what the lost node started has had time to go
            left = [p for p in victim_pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
            row = dict(rate(result["row"], seq), name="cluster, a node removed")
            out["node_removed"] = row
            out["check"] = {
                "records": len(rows), "distinct_jobs": len({(r["task_id"], r["sample"]) for r in rows}),
                "jobs_on_lost_node_rerun": len(stats.reruns), "duplicates_dropped": stats.duplicates,
                "gave_up": len(stats.gave_up), "actors_lost": stats.actors_lost,
                "removed_after_s": t_removed - t_call,
                "lost_node_processes": len(victim_pids), "lost_node_processes_left": len(left),
                "exactly_once": len(rows) == 4 * conc == len({(r["task_id"], r["sample"]) for r in rows}),
            }  # fmt: skip
    finally:
        ray.shutdown()
        c.shutdown()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latency", type=float, default=1.0, help="policy seconds per turn")
    ap.add_argument("--concurrency", type=int, default=64, help="the warm-pool part's concurrency")
    ap.add_argument("--calls", type=int, default=3, help="calls on the warm pool")
    ap.add_argument("--cluster", action="store_true", help="also the simulated 3-node cluster losing a node")
    ap.add_argument("--cluster-concurrency", type=int, default=256)
    ap.add_argument("--node-cpus", type=int, default=1, help="CPUs each simulated node declares")
    ap.add_argument("--quick", action="store_true", help="a smoke run: C=8, 2 calls, cluster C=24, 0.2 s latency")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/ray_pool.json"))
    args = ap.parse_args()
    if args.quick:
        args.concurrency, args.calls, args.cluster_concurrency, args.latency = 8, 2, 24, 0.2
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    result: dict[str, Any] = {"benchmark": "ray_pool", "latency_s": args.latency, "cpus": os.cpu_count()}
    with http_demo_server() as url, tempfile.TemporaryDirectory() as tmp:
        tasks = Path(tmp) / "tasks.jsonl"
        tasks.write_text("".join(json.dumps(t) + "\n" for t in plan_tasks(64)))
        calc = {"type": "streamable-http", "url": url, "share_session": True}
        kwargs = {"mcp_config": {"mcpServers": {"calc": calc}}, "tasks": str(tasks)}
        seq_row = one_run(kwargs, args.latency, 4, AsyncEngine(concurrency=1))
        seq = seq_row["episodes_per_s"]
        result["sequential"] = dict(rate(seq_row, seq), name="sequential (in-process, C=1)")
        head = f"reference policy, {args.latency:g} s per turn ({platform.machine()}, {os.cpu_count()} CPUs)"
        warm = warm_pool(kwargs, args.latency, args.concurrency, args.calls, seq)
        result["warm_pool"] = warm
        print_rows(f"Ray warm pool, {head}; RayEngine.start(): {warm['start_s']:.2f} s, {warm['actors']} actors",
                   [result["sequential"], *warm["rows"]])  # fmt: skip
        target = warm["later_efficiency"]
        if target is not None:
            met = "met" if target >= 0.9 else "NOT met"
            print(f"efficiency of the later calls on the warm pool at C={args.concurrency}: {target:.2f} "
                  f"(target >= 0.9: {met})")  # fmt: skip
        if args.cluster:
            loss = node_loss(kwargs, args.latency, args.cluster_concurrency, args.node_cpus, seq)
            result["node_loss"] = loss
            print()
            print_rows(f"simulated cluster: 3 nodes x {args.node_cpus} CPU, {loss['actors']} actors, {head}",
                       [result["sequential"], loss["clean"], loss["node_removed"]])  # fmt: skip
            print("node loss: " + ", ".join(f"{k} {v if not isinstance(v, float) else round(v, 2)}"
                                            for k, v in loss["check"].items()))  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(stamp(result), indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
