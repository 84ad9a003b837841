"""Driver CPU per tool call: what one MCP tool call costs the rollout driver's process, by transport, and where it goes.

The rollout driver's ceiling on one core is its CPU per episode (``rollout_scaling.py``: at concurrency 1024 the
in-process engine runs at one core's worth of driver CPU). This benchmark measures that CPU directly, so machine
load does not enter it: the driver process's own CPU time (``time.process_time``; the tool servers are other
processes) while the in-process engine collects episodes of ``AWorld/MCP-v0`` with the reference policy and no model
latency, at concurrency 64. Each episode makes ``k`` calls to the demo calculator in one turn (``k`` = 1, 2, 4: the
same 2 steps, more calls), so a line fitted through the three points splits the cost into **per tool call** (the
slope) and **per episode without its calls** (the intercept: reset, 2 steps, scoring, the record). Transports:

- ``stdio, "pool": 2``: our own stdio transport (:mod:`aworld_gym.mcp.transports.stdio`), 2 server processes shared by the
  process's envs;
- ``streamable HTTP, shared session``: the MCP SDK's streamable HTTP client (httpx) behind our bounded wrapper
  (:mod:`aworld_gym.mcp.transports.http`), one session for all envs (``"share_session": true``).

With ``--profile`` the streamable HTTP and stdio runs at ``k`` = 4 are profiled (cProfile timed by the thread's CPU
clock, the driver's main thread, where the engine's event loop runs every env and its MCP client) and the self time is summed by layer: the HTTP
client (httpx2, httpcore2, h11), the MCP SDK, pydantic, anyio, asyncio and the rest of the standard library, our
MCP layer, our env and engine. Prints tables and writes JSON.

    .venv/bin/python benchmarks/driver_cpu.py [--episodes 1024] [--reps 3] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from aworld_gym.rollout.collect import collect  # noqa: E402
from aworld_gym.rollout.policies import make_policy  # noqa: E402
from benchmarks.provenance import stamp  # noqa: E402
from tests.helpers import http_demo_server  # noqa: E402

ENV = "AWorld/MCP-v0"
CALLS = (1, 2, 4)
LAYERS = (  # (layer, path fragments of its files), first match wins
    ("aworld_gym MCP layer", ("aworld_gym/mcp/",)),
    ("aworld_gym env, engine, records", ("aworld_gym/",)),
    ("HTTP client (httpx2, httpcore2, h11)", ("/httpx", "/httpcore", "/h11/")),
    ("MCP SDK (mcp, mcp_types)", ("/mcp/", "/mcp_types/")),
    ("pydantic", ("/pydantic",)),
    ("anyio", ("/anyio/",)),
    ("asyncio", ("/asyncio/",)),
    ("built-in functions (C: sockets, select, json, ...)", ("~",)),
)


def call_tasks(k: int, n: int = 64) -> list[dict]:
    """Calculator tasks whose reference plan makes ``k`` ``add`` calls in one turn, then answers."""
    tasks = []
    for i in range(n):
        calls = [{"name": "add", "arguments": {"a": i, "b": j}} for j in range(k)]
        tasks.append({"id": f"add{k}-{i}", "prompt": f"What is {i} + {k - 1}? Use the add tool.",
                      "answer": f"{i + k - 1}.0", "reference": {"turns": [calls], "pattern": r"([\d.]+)\s*$"}})  # fmt: skip
    return tasks


def transports(url: str) -> dict[str, dict]:
    return {
        'stdio, "pool": 2': {"command": sys.executable, "args": ["-m", "aworld_gym.mcp.demo_server"], "pool": 2},
        "streamable HTTP, shared session": {"type": "streamable-http", "url": url, "share_session": True},
    }


def measure(server: dict, tasks_path: str, episodes: int, concurrency: int, profile: cProfile.Profile | None = None):
    """(driver CPU ms per episode, episodes/s, successes) of one collect call after a warm-up call."""
    kwargs = {"mcp_config": {"mcpServers": {"calc": server}}, "tasks": tasks_path}
    policy = functools.partial(make_policy, "reference", ENV, latency_s=0.0)
    collect(ENV, policy, episodes=concurrency, concurrency=concurrency, env_kwargs=kwargs, progress=False)  # warm-up
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if profile is not None:
        profile.enable()
    s = collect(ENV, policy, episodes=episodes, concurrency=concurrency, env_kwargs=kwargs, progress=False)
    if profile is not None:
        profile.disable()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return 1000 * cpu / max(s.recorded, 1), s.recorded / wall, s.successes, s.recorded


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares ``cpu = intercept + slope * calls``: (slope, intercept)."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


def layers(profile: cProfile.Profile) -> dict[str, float]:
    """Share of the profiled self time per layer."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    totals: dict[str, float] = {}
    for (path, _line, _name), (_cc, _nc, tottime, _ct, _callers) in stats.items():
        layer = next((name for name, marks in LAYERS if any(m in path for m in marks)), "standard library, other")
        totals[layer] = totals.get(layer, 0.0) + tottime
    whole = sum(totals.values()) or 1.0
    return {k: v / whole for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=1024, help="episodes per measured call")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3, help="measured calls per point (the median is kept)")
    ap.add_argument("--profile", action="store_true", help="also profile k=4 per transport, self time by layer")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/driver_cpu.json"))
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    fits: dict[str, dict[str, float]] = {}
    profiles: dict[str, dict[str, float]] = {}
    with http_demo_server() as url, tempfile.TemporaryDirectory() as tmp:
        for name, server in transports(url).items():
            points = []
            for k in CALLS:
                path = f"{tmp}/tasks{k}.jsonl"
                Path(path).write_text("".join(json.dumps(t) + "\n" for t in call_tasks(k)))
                runs = [measure(server, path, args.episodes, args.concurrency) for _ in range(args.reps)]
                cpu = statistics.median(r[0] for r in runs)
                rows.append({"transport": name, "calls_per_episode": k, "cpu_ms_per_episode": cpu,
                             "cpu_ms_runs": [r[0] for r in runs], "episodes_per_s": statistics.median(r[1] for r in runs),
                             "successes": sum(r[2] for r in runs), "episodes": sum(r[3] for r in runs)})  # fmt: skip
                points.append((k, cpu))
                if args.profile and k == CALLS[-1]:
                    prof = cProfile.Profile(time.thread_time)  # CPU of this thread, not waits
                    measure(server, path, args.episodes, args.concurrency, prof)
                    profiles[name] = layers(prof)
            slope, intercept = fit(points)
            fits[name] = {"cpu_ms_per_call": slope, "cpu_ms_per_episode_without_calls": intercept}
    print(f"driver CPU, {ENV}, reference policy with no latency, concurrency {args.concurrency}, "
          f"{args.episodes} episodes per point, median of {args.reps}")  # fmt: skip
    print(f"{'transport':<34} {'calls/ep':>8} {'CPU ms/ep':>10} {'eps/s':>8} {'ok':>11}")
    for r in rows:
        print(f"{r['transport']:<34} {r['calls_per_episode']:>8} {r['cpu_ms_per_episode']:>10.2f} "
              f"{r['episodes_per_s']:>8.0f} {r['successes']:>5}/{r['episodes']:<5}")  # fmt: skip
    print(f"\n{'transport':<34} {'CPU ms per call':>16} {'CPU ms per episode without its calls':>38}")
    for name, f in fits.items():
        print(f"{name:<34} {f['cpu_ms_per_call']:>16.3f} {f['cpu_ms_per_episode_without_calls']:>38.3f}")
    names = list(fits)
    ratio = fits[names[1]]["cpu_ms_per_call"] / fits[names[0]]["cpu_ms_per_call"]
    print(f"\nper call, {names[1]} / {names[0]}: {ratio:.2f}x")
    for name, shares in profiles.items():
        print(f"\nself time by layer, {name}, {CALLS[-1]} calls per episode (cProfile, main thread):")
        for layer, share in shares.items():
            print(f"  {share:6.1%}  {layer}")
    result = {"env": ENV, "concurrency": args.concurrency, "episodes": args.episodes, "reps": args.reps,
              "rows": rows, "fits": fits, "http_over_stdio_per_call": ratio, "profiles": profiles}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(stamp(result), indent=1) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
