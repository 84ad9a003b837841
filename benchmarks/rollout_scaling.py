"""Rollout scaling: episodes per second against concurrency, in-process, in worker processes (one per CPU) and on
Ray, plus the whole command.

Latency-bound episodes: the scripted reference policy with a fixed per-turn latency standing in for a model
server, on ``AWorld/MCP-v0`` (a calculator server over streamable HTTP shared by every env, or with ``--pool K``
our stdio server with ``"pool": K``; 2 turns per episode)
and on ``AWorld/Code-v0`` (HumanEval; every episode also runs two sandboxed Python processes, so on a 2-core
machine it becomes CPU-bound as concurrency grows). For each engine and concurrency it reports episodes/s, the
speedup over sequential collection (concurrency 1; 4 x concurrency episodes per level), efficiency (speedup / concurrency) and peak memory (RSS of
this process and of its children); then it times the ``aworld-gym rollout`` command from outside, start-up
included: 256 episodes at concurrency 64 against 4 sequential episodes. Two clocks (``benchmarks/clocks.py``): a row's
``episodes_per_s_whole`` is its ``collect`` call timed from outside, ``episodes_per_s`` its window (collect's own
``wall_s``, which already holds a one-shot engine's worker processes or Ray actors starting and the envs being made:
it leaves out only the probe env, made before it and closed after it, and the envs closing, ``outside_window_s``);
the command's ``episodes_per_s`` is the whole command, ``episodes_per_s_window`` its run's
window. Prints tables and writes JSON.

    python benchmarks/rollout_scaling.py [--latency 1.0] [--quick] [--pool K]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import resource
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from aworld_gym.rollout.collect import collect  # noqa: E402
from aworld_gym.rollout.engines.ray_engine import RayEngine  # noqa: E402
from aworld_gym.rollout.policies import make_policy  # noqa: E402
from benchmarks.clocks import Clocks, cell, now, rollout_command  # noqa: E402
from benchmarks.provenance import stamp  # noqa: E402
from tests.helpers import http_demo_server, plan_tasks  # noqa: E402


def peak_rss_mb() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return own, kids


def run(env_id: str, kwargs: dict, latency: float, concurrency: int, episodes: int, engine: Any,
        label: str | None = None) -> dict:  # fmt: skip
    """One collect call: ``engine`` is a name (built at ``concurrency``) or an engine object (a warm RayEngine)."""
    policy = functools.partial(make_policy, "reference", env_id, latency_s=latency)
    conc = concurrency if isinstance(engine, str) else None
    t0 = now()  # the whole call: the engine's workers or actors (a one-shot engine's), the envs, closing them
    s = collect(env_id, policy, episodes=episodes, concurrency=conc, env_kwargs=kwargs, engine=engine,
                progress=False)  # fmt: skip
    clocks = Clocks.outside(now() - t0, s.wall_s)  # the window: collect's own wall_s
    own, kids = peak_rss_mb()
    return {"env": env_id, "engine": label or engine, "concurrency": concurrency, "episodes": s.recorded,
            "successes": s.successes, "wall_s": s.wall_s, **clocks.fields(s.recorded),
            "peak_rss_mb": own, "peak_child_rss_mb": kids}  # fmt: skip


def table(rows: list[dict], base: dict[tuple[str, str], float]) -> None:
    print(f"{'env':<16} {'engine':<9} {'conc':>5} {'episodes':>8} {'ok':>5} {'eps/s whole':>11} {'eps/s window':>12} "
          f"{'speedup':>8} {'effic.':>7} {'whole s = window + outside':>28} {'peak RSS MB':>12}")  # fmt: skip
    for r in rows:
        seq = base[(r["env"], "seq")]
        r["speedup"] = r["episodes_per_s"] / seq
        r["efficiency"] = r["speedup"] / r["concurrency"]
        print(f"{r['env']:<16} {r['engine']:<9} {r['concurrency']:>5} {r['episodes']:>8} {r['successes']:>5} "
              f"{r['episodes_per_s_whole']:>11.2f} {r['episodes_per_s']:>12.2f} {r['speedup']:>8.1f} "
              f"{r['efficiency']:>7.2f} {cell(r):>28} {r['peak_rss_mb'] + r['peak_child_rss_mb']:>12.0f}")  # fmt: skip


def calc_entry(url: str, pool: int) -> dict:
    """The calculator: one HTTP session shared by all envs, or (``--pool K``) our stdio server pooled K per process."""
    if pool:
        return {"command": sys.executable, "args": ["-m", "aworld_gym.mcp.demo_server"], "pool": pool}
    return {"type": "streamable-http", "url": url, "share_session": True}  # one MCP session for all envs


def whole_command(url: str, tasks_path: str, latency: float, pool: int = 0) -> dict:
    calc = calc_entry(url, pool)
    env_kwargs = json.dumps({"mcp_config": {"mcpServers": {"calc": calc}}, "tasks": tasks_path})
    out = {}
    for name, episodes, conc in (("sequential", 4, 1), ("parallel", 256, 64)):
        part, records = rollout_command(["--env", "AWorld/MCP-v0", "--policy", "reference", "--episodes",
                                         str(episodes), "--concurrency", str(conc), "--policy-latency", str(latency),
                                         "--env-kwargs", env_kwargs])  # fmt: skip
        out[name] = {"episodes": episodes, "concurrency": conc, "recorded": len(records), **part}
    out["ratio"] = out["parallel"]["episodes_per_s"] / out["sequential"]["episodes_per_s"]
    out["target"] = 40.0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latency", type=float, default=1.0, help="policy seconds per turn")
    ap.add_argument("--quick", action="store_true", help="fewer configurations (a smoke run)")
    ap.add_argument(
        "--pool",
        type=int,
        default=0,
        metavar="K",
        help='calculator as a stdio server with "pool": K (K processes per process) instead of HTTP',
    )
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/rollout_scaling[_poolK].json)")
    args = ap.parse_args()
    args.out = args.out or str(
        ROOT / f"benchmarks/results/rollout_scaling{f'_pool{args.pool}' if args.pool else ''}.json"
    )
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    lat = args.latency
    levels = [1, 4, 16, 64] if args.quick else [1, 4, 16, 64, 256, 1024]
    rows: list[dict] = []
    base: dict[tuple[str, str], float] = {}
    with http_demo_server() as url, tempfile.TemporaryDirectory() as tmp:
        tasks_path = f"{tmp}/tasks.jsonl"
        Path(tasks_path).write_text("".join(json.dumps(t) + "\n" for t in plan_tasks(64)))
        calc = calc_entry(url, args.pool)
        mcp = {"mcp_config": {"mcpServers": {"calc": calc}}, "tasks": tasks_path}
        for env_id, kwargs in (("AWorld/MCP-v0", mcp), ("AWorld/Code-v0", {})):
            seq = run(env_id, kwargs, lat, 1, 4, "async")
            base[(env_id, "seq")] = seq["episodes_per_s"]
            rows.append(seq)
            for c in levels[1:]:
                if env_id == "AWorld/Code-v0" and c > 64:
                    continue
                rows.append(run(env_id, kwargs, lat, c, 4 * c, "async"))
        # Worker processes, one per CPU (ProcessEngine): the driver's CPU per episode spread over the cores.
        for c in [16, 64] if args.quick else [64, 256, 1024]:
            rows.append(run("AWorld/MCP-v0", mcp, lat, c, 4 * c, "process"))
        for c in [4, 16] if args.quick else [4, 16, 64]:
            rows.append(run("AWorld/MCP-v0", mcp, lat, c, 4 * c, "ray"))
        # A warm pool (RayEngine.start(): actors started once, outside the calls), its first call and a later one.
        c = 16 if args.quick else 64
        with RayEngine(concurrency=c) as warm:
            rows.append(run("AWorld/MCP-v0", mcp, lat, c, 4 * c, warm, "ray-warm1"))
            rows.append(run("AWorld/MCP-v0", mcp, lat, c, 4 * c, warm, "ray-warm2"))
        print(
            f"rollout scaling, reference policy with {lat:g} s per turn ({platform.machine()}, {os.cpu_count()} CPUs)"
        )
        table(rows, base)
        ray_overhead = {}
        for r in rows:
            if r["engine"] == "ray":
                local = next(x for x in rows if x["engine"] == "async" and x["env"] == r["env"]
                             and x["concurrency"] == r["concurrency"])  # fmt: skip
                ray_overhead[r["concurrency"]] = local["episodes_per_s"] / r["episodes_per_s"]
        print("Ray vs in-process (in-process eps/s / Ray eps/s): "
              + ", ".join(f"c={c}: {v:.2f}x" for c, v in ray_overhead.items()))  # fmt: skip
        cmd = whole_command(url, tasks_path, lat, args.pool)
    seq, par = cmd["sequential"], cmd["parallel"]
    print(f"whole command (from outside, start-up included; the run's window in brackets): 4 sequential episodes "
          f"{seq['episodes_per_s']:.2f} eps/s ({seq['episodes_per_s_window']:.2f}; {cell(seq)} s); 256 at "
          f"concurrency 64 {par['episodes_per_s']:.2f} eps/s ({par['episodes_per_s_window']:.2f}; {cell(par)} s): "
          f"{cmd['ratio']:.1f}x (target >= 40x: {'met' if cmd['ratio'] >= 40 else 'NOT met'})")  # fmt: skip
    targets = {}
    for engine, conc, target in (("async", 256, 0.9), ("async", 1024, 0.8), ("process", 1024, 0.8), ("ray", 64, 0.85),
                                 ("ray-warm2", 64, 0.9)):  # fmt: skip
        eff = next((r["efficiency"] for r in rows if r["env"] == "AWorld/MCP-v0" and r["engine"] == engine
                    and r["concurrency"] == conc), None)  # fmt: skip
        if eff is None:
            continue
        targets[f"{engine}@{conc}"] = {"efficiency": eff, "target": target, "met": eff >= target}
        print(f"efficiency, MCP-v0, {engine} engine at concurrency {conc}: {eff:.2f} (target >= {target}: "
              f"{'met' if eff >= target else 'NOT met'})")  # fmt: skip
    eff64 = next(r["efficiency"] for r in rows if r["env"] == "AWorld/MCP-v0" and r["engine"] == "async"
                 and r["concurrency"] == 64)  # fmt: skip
    result = {"benchmark": "rollout_scaling", "latency_s": lat, "cpus": os.cpu_count(), "pool": args.pool, "rows": rows,
              "ray_overhead": ray_overhead, "whole_command": cmd, "efficiency_c64_mcp": eff64,
              "targets": targets}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(stamp(result), indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
