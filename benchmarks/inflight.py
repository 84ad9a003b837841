"""Episodes in flight on one machine (issue 48): how close ``collect`` comes to the model's latency at C in flight.

The workload: N = C "What is A + B?" episodes, each 2 model calls (the peers stand-in, ``benchmarks/peers.py``, at a
fixed latency, 20 s by default) and 1 tool call, to one of two shared add servers by the episode's operand (a stdio
server, ``"share": true``, and a streamable-HTTP server, ``"share_session": true``); ``collect`` with
``OpenAIPolicy(max_concurrency=C)`` and ``concurrency=C``, in a worker process of its own. Per level:

* the two clocks (``benchmarks/clocks.py``): the whole run (the worker's start to its exit) and the window (the
  stand-in's first request to ``collect``'s return); ``ideal_s`` = 2 x latency; ``efficiency`` = ideal / window;
* CPU per episode (the worker's, servers included, ``wait4``), the worker's peak RSS and its process tree's (RSS
  summed over the worker and its descendants, sampled every 0.5 s: shared pages count once per process), its open
  files at the peak;
* the event loop's lag (p50, p99, max: a 50 ms timer on ``collect``'s loop, late by that much);
* the stand-in's own requests in flight over time (sampled every 0.5 s) and its peak: it must reach C, or the limit is
  on our side of the socket.

* **the edge** (``--fault-level``, 16,384 by default): the same workload with the stand-in answering a share of the
  requests (``--fault-share``, 1%) with 429 or a reset connection, half each: every episode must end recorded
  (retried, or void), none twice (``lost``, ``duplicated`` from the run's per-task counts);
* **two cores** (``--processes``, 8,192 over 2 by default): the same workload over ``ProcessEngine`` worker
  processes, each with its share of the slots and its own shared stdio server: what spreading the driver's CPU over
  this machine's cores buys (the stand-in and the tool servers run on the same cores);
* **a cluster** (``--cluster``, 3 x 8,192 by default): a simulated 3-node Ray cluster (``ray.cluster_utils.Cluster``,
  ``--node-cpus`` each) on this machine, ``RayEngine(concurrency=3 x C)``, one policy per slot; the same counts, the
  whole process tree's RSS (Ray's processes included) and the engine's re-runs and dropped doubles.

    python benchmarks/inflight.py [--levels 1024,4096,8192,16384] [--latency 20] [--fault-level 16384]
                                  [--processes 8192:2] [--cluster 8192] [--out benchmarks/results/inflight.json]
    python benchmarks/inflight.py --quick      # 256 in flight, a minute

Never part of ``make test``; prints a table and writes JSON (with ``provenance.stamp``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.clocks import Clocks, now  # noqa: E402
from benchmarks.peers import ADD_SERVER, MODEL, StandIn, tasks_for  # noqa: E402
from benchmarks.provenance import stamp  # noqa: E402

HTTP_ADD = ADD_SERVER.replace(
    "    server.run()", '    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))'
)


def worker(spec_path: str) -> None:
    """One level in this process: ``collect`` under a lag probe; writes its measures to the spec's ``out``."""
    spec = json.loads(Path(spec_path).read_text())
    from aworld_gym.rollout.collect import collect
    from aworld_gym.rollout.policies.openai_policy import OpenAIPolicy

    lags: list[float] = []

    class Probe(OpenAIPolicy):
        """OpenAIPolicy that starts a lag probe on the loop of its first request."""

        started = False

        async def aact(self, env: Any, observation: str, info: dict[str, Any]) -> Any:
            if not Probe.started:
                Probe.started = True
                asyncio.get_running_loop().create_task(probe())
            return await super().aact(env, observation, info)

    async def probe() -> None:
        while True:
            t = time.monotonic()
            await asyncio.sleep(0.05)
            lags.append(time.monotonic() - t - 0.05)

    peak_fds = [0]

    def count_fds() -> None:
        while True:
            peak_fds[0] = max(peak_fds[0], len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0)
            time.sleep(0.5)

    peak_tree = [0.0]

    def tree_rss() -> None:
        import psutil

        me = psutil.Process()
        while True:
            total = 0
            for proc in [me, *me.children(recursive=True)]:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    pass  # gone between the listing and the read
            peak_tree[0] = max(peak_tree[0], total / 2**20)
            time.sleep(0.5)

    threading.Thread(target=count_fds, daemon=True).start()
    threading.Thread(target=tree_rss, daemon=True).start()
    c = spec["concurrency"]
    tasks = [{"id": t["id"], "prompt": t["question"], "answer": str(t["answer"])} for t in spec["tasks"]]
    servers = {"stdio": {"command": sys.executable, "args": [spec["stdio_server"]], "share": True, "tool_prefix": "s"},
               "http": {"type": "streamable-http", "url": spec["http_url"], "share_session": True, "tool_prefix": "h"}}  # fmt: skip
    env_kwargs = {"mcp_config": {"mcpServers": servers}, "tasks": tasks}
    cluster = spec.get("cluster")
    engine_stats: dict[str, Any] = {}
    if cluster:
        summary, t0, t1, engine_stats = on_cluster(spec, cluster, env_kwargs)
    elif spec.get("processes"):
        summary, t0, t1, engine_stats = in_processes(spec, env_kwargs)
    else:
        policy = Probe(model=MODEL, base_url=spec["base_url"], tool_mode="native", max_concurrency=c)
        t0 = now()
        summary = collect("AWorld/MCP-v0", policy, episodes=len(tasks), concurrency=c, progress=False,
                          env_kwargs=env_kwargs)  # fmt: skip
        t1 = now()
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    lags.sort()

    def q(p: float) -> float | None:
        return lags[min(len(lags) - 1, int(p * len(lags)))] * 1000 if lags else None

    Path(spec["out"]).write_text(json.dumps({
        "collect_start": t0, "collect_end": t1, "recorded": summary.recorded, "successes": summary.successes,
        "cpu_s": own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime, "peak_rss_mb": own.ru_maxrss / 1024,
        "peak_open_files": peak_fds[0], "lag_ms_p50": q(0.5), "lag_ms_p99": q(0.99), "lag_ms_max": q(1.0),
        "peak_tree_rss_mb": peak_tree[0], "statuses": summary.statuses, "terminations": summary.terminations,
        "first_errors": summary.first_errors, "distinct_tasks": len(summary.tasks),
        "most_samples_of_a_task": max((v[0] for v in summary.tasks.values()), default=0), **engine_stats,
    }))  # fmt: skip


def on_cluster(spec: dict[str, Any], cluster: dict[str, Any], env_kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """``collect`` on a simulated Ray cluster of ``cluster["nodes"]`` nodes (``ray.cluster_utils.Cluster``), with
    ``RayEngine(concurrency=...)`` and a policy factory (one OpenAIPolicy per slot, sized for its actor's slots)."""
    import functools

    import ray
    from ray.cluster_utils import Cluster

    from aworld_gym.rollout.collect import collect
    from aworld_gym.rollout.engines.ray_engine import RayEngine
    from aworld_gym.rollout.policies.openai_policy import OpenAIPolicy

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    c, nodes, cpus = spec["concurrency"], cluster["nodes"], cluster["node_cpus"]
    ray_cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": cpus, "include_dashboard": False})
    for _ in range(nodes - 1):
        ray_cluster.add_node(num_cpus=cpus)
    ray_cluster.wait_for_nodes()
    ray.init(address=ray_cluster.address, log_to_driver=False)
    try:
        engine = RayEngine(concurrency=c, address="auto")
        actors = max(1, min(c, nodes * cpus))
        policy = functools.partial(OpenAIPolicy, model=MODEL, base_url=spec["base_url"], tool_mode="native",
                                   max_concurrency=-(-c // actors))  # fmt: skip
        t0 = now()
        summary = collect("AWorld/MCP-v0", policy, episodes=len(env_kwargs["tasks"]), engine=engine, progress=False,
                          env_kwargs=env_kwargs)  # fmt: skip
        t1 = now()
        stats = engine.last_run
        extra = {"nodes": nodes, "node_cpus": cpus}
        if stats is not None:
            extra.update(reruns=len(stats.reruns), duplicates_dropped=stats.duplicates, gave_up=len(stats.gave_up),
                         actors_lost=stats.actors_lost)  # fmt: skip
        return summary, t0, t1, extra
    finally:
        ray.shutdown()
        ray_cluster.shutdown()


def in_processes(spec: dict[str, Any], env_kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """``collect`` with ``ProcessEngine(concurrency=C, processes=P)``: the episodes split over P worker processes on
    this machine, each with its share of the slots, its own shared stdio server and one policy per slot (sharing one
    HTTP client per worker, sized for the worker's slots). The lag probe runs in no worker (``lag_ms_*`` are None)."""
    import functools

    from aworld_gym.rollout.collect import collect
    from aworld_gym.rollout.engines.process_engine import ProcessEngine
    from aworld_gym.rollout.policies.openai_policy import OpenAIPolicy

    c, processes = spec["concurrency"], spec["processes"]
    engine = ProcessEngine(concurrency=c, processes=processes)
    policy = functools.partial(OpenAIPolicy, model=MODEL, base_url=spec["base_url"], tool_mode="native",
                               max_concurrency=-(-c // processes))  # fmt: skip
    t0 = now()
    summary = collect("AWorld/MCP-v0", policy, episodes=len(env_kwargs["tasks"]), engine=engine, progress=False,
                      env_kwargs=env_kwargs)  # fmt: skip
    t1 = now()
    stats = engine.last_run
    extra: dict[str, Any] = {"processes": processes}
    if stats is not None:
        extra.update(workers_lost=stats.workers_lost, reruns=len(stats.reruns), duplicates_dropped=stats.duplicates)
    return summary, t0, t1, extra


def run_level(stand_in: StandIn, c: int, latency: float, work: Path, http_url: str, name: str = "",
              faults: dict[str, float] | None = None, cluster: dict[str, int] | None = None,
              processes: int = 0) -> dict[str, Any]:  # fmt: skip
    """One row: ``c`` episodes at ``c`` in flight in a worker process of its own (on a simulated ``cluster``, or over
    ``processes`` worker processes of ``ProcessEngine``, with the stand-in injecting ``faults``)."""
    counts = stand_in.reset(latency)
    stand_in.faults = dict(faults or {})
    tag = f"{c}-{name}" if name else str(c)
    spec = {"concurrency": c, "tasks": tasks_for(c, c), "base_url": stand_in.base_url, "http_url": http_url,
            "stdio_server": str(work / "add_server.py"), "out": str(work / f"level-{tag}.json"),
            "cluster": cluster, "processes": processes}  # fmt: skip
    spec_path = work / f"spec-{tag}.json"
    spec_path.write_text(json.dumps(spec))
    flight: list[tuple[float, int]] = []
    start = now()
    proc = subprocess.Popen([sys.executable, __file__, "--worker", str(spec_path)])
    while proc.poll() is None:
        flight.append((round(now() - start, 2), counts.in_flight))
        time.sleep(0.5)
    end = now()
    if proc.returncode:
        return {"concurrency": c, "name": name, "error": f"the worker exited with {proc.returncode}"}
    w = json.loads(Path(spec["out"]).read_text())
    first = counts.first_request_at or w["collect_start"]
    clocks = Clocks.from_marks(start, first, w["collect_end"], end)
    ideal = 2 * latency
    edge = {"faults": faults or {}, "injected": dict(counts.injected), "lost": c - w["distinct_tasks"],
            "duplicated": w["recorded"] - w["distinct_tasks"]}  # fmt: skip
    return {"concurrency": c, "name": name or "single process", "episodes": c, "latency_s": latency,
            **clocks.fields(c), "ideal_s": ideal, **edge,
            "efficiency": ideal / clocks.window_s if clocks.window_s else None,
            "cpu_ms_per_episode": 1000 * w["cpu_s"] / c, "model_requests": counts.requests,
            "tool_results_ok": counts.tool_results_ok,
            "standin_peak_in_flight": counts.peak_in_flight, "standin_in_flight_over_time": flight,
            **{k: v for k, v in w.items() if k not in ("collect_start", "collect_end", "cpu_s")}}  # fmt: skip


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}"


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| row | in flight | whole | window | ideal | efficiency | episodes/s | CPU ms/episode | peak RSS MB "
             "(tree) | open files | lag p99 ms | stand-in peak in flight | solved | faults injected | lost | doubled |",
             "|" + "---|" * 16]  # fmt: skip
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['name']} | {r['concurrency']} | {r['error']} |" + " |" * 13)
            continue
        injected = sum(r["injected"].values())
        lines.append(f"| {r['name']} | {r['concurrency']} | {r['whole_s']:.1f} s | {r['window_s']:.1f} s | "
                     f"{r['ideal_s']:.0f} s | {r['efficiency']:.2f} | {r['episodes_per_s']:.1f} | "
                     f"{r['cpu_ms_per_episode']:.1f} | {r['peak_rss_mb']:.0f} ({r['peak_tree_rss_mb']:.0f}) | "
                     f"{r['peak_open_files']} | {_ms(r['lag_ms_p99'])} | {r['standin_peak_in_flight']} | "
                     f"{r['successes']}/{r['episodes']} | {injected} | {r['lost']} | {r['duplicated']} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="1024,4096,8192,16384")
    ap.add_argument("--latency", type=float, default=20.0)
    ap.add_argument("--fault-level", type=int, default=16384, help="in flight for the faults row (0: none)")
    ap.add_argument("--fault-share", type=float, default=0.01, help="requests answered 429 or reset, half each")
    ap.add_argument("--cluster", type=int, default=8192, help="in flight per node of the 3-node row (0: none)")
    ap.add_argument("--node-cpus", type=int, default=1)
    ap.add_argument(
        "--processes",
        default="8192:2",
        help="rows over ProcessEngine workers, as in-flight:processes, comma-separated (empty: none)",
    )
    ap.add_argument("--quick", action="store_true", help="256 in flight only, 256 with faults, 3 x 128 on a cluster")
    ap.add_argument("--out", default=None)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker)
        return
    levels = [256] if args.quick else [int(x) for x in args.levels.split(",") if x]
    if args.quick:
        args.fault_level, args.cluster, args.processes = 256, 128, "256:2"
    out = Path(args.out or ROOT / "benchmarks" / "results" / ("inflight-quick.json" if args.quick else "inflight.json"))
    from aworld_gym.mcp.transports.shared import free_port, wait_port

    rows = []
    with tempfile.TemporaryDirectory() as tmp, StandIn(args.latency, backlog=65535) as stand_in:
        work = Path(tmp)
        (work / "add_server.py").write_text(ADD_SERVER)
        (work / "http_add_server.py").write_text(HTTP_ADD)
        port = free_port()
        http = subprocess.Popen([sys.executable, str(work / "http_add_server.py"), "", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            if not wait_port(port, http, 60):
                raise SystemExit("the streamable-HTTP add server did not start")
            url = f"http://127.0.0.1:{port}/mcp"
            runs: list[tuple[int, dict[str, Any]]] = [(c, {}) for c in levels]
            for item in filter(None, args.processes.split(",")):
                c, p = (int(x) for x in item.split(":"))
                runs.append((c, {"name": f"{p} worker processes", "processes": p}))
            if args.fault_level:
                half = args.fault_share / 2
                runs.append((args.fault_level, {"name": "faults", "faults": {"429": half, "reset": half}}))
            if args.cluster:
                runs.append((3 * args.cluster, {"name": "3-node Ray cluster",
                                                "cluster": {"nodes": 3, "node_cpus": args.node_cpus}}))  # fmt: skip
            for c, how in runs:
                rows.append(run_level(stand_in, c, args.latency, work, url, **how))
                print(table(rows[-1:]), flush=True)
        finally:
            http.terminate()
            http.wait(10)
    print(table(rows))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(stamp({"benchmark": "inflight", "latency_s": args.latency, "rows": rows}), indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
