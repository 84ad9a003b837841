"""Record and replay of tool calls on a GRPO-style workload (issue 49): what a replayed search saves.

The workload: 32 tasks x 8 samples (GRPO groups of 8) x 3 steps, each step a ``collect`` of 256 episodes at 64 in
flight with the task's plan (``PlanPolicy``: 2 web searches, then the answer); a stand-in paid search (a stdio MCP
server shared by the envs, ``"share": true``, declared ``stateless``) that takes ``--latency`` seconds per call
and counts the calls that reach it. The same workload, in one run:

* ``live``: no cache; every search reaches the server;
* ``replay`` from an empty store: a search reaches the server the first time any sample of any step makes it (the
  samples of a group making it at once wait for the one on its way) and is served from the store after;
* ``replay-strict`` over the store ``replay`` filled: the server is never started.

Per mode and step: the calls that reached the server, the wall time of the ``collect`` call, the episodes solved.

    python benchmarks/tool_cache.py [--latency 0.5] [--out benchmarks/results/tool_cache.json]

Never part of ``make test``; prints a table and writes JSON (with ``provenance.stamp``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import stamp  # noqa: E402

SEARCH = '''"""A paid web search stand-in: each call takes argv[2] seconds and is logged to argv[1]."""
import asyncio
import sys

from mcp.server.mcpserver import MCPServer

LOG, LATENCY = sys.argv[1], float(sys.argv[2])
server = MCPServer("search", version="1.0")


@server.tool()
async def web_search(query: str) -> str:
    """Search the web."""
    with open(LOG, "a") as f:
        f.write(query + "\\n")
    await asyncio.sleep(LATENCY)
    return f"Results for {query}: the answer is {sum(map(ord, query)) % 1000}."


server.run()
'''


def tasks(n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        first, second = f"question {i} background", f"question {i} figure"
        plan = {"turns": [[{"name": "web_search", "arguments": {"query": first}}],
                          [{"name": "web_search", "arguments": {"query": second}}]],
                "pattern": r"the answer is (\d+)\.\s*$"}  # fmt: skip
        answer = str(sum(map(ord, second)) % 1000)
        out.append({"id": f"q{i}", "prompt": f"Question {i}?", "answer": answer, "metadata": {"reference": plan}})
    return out


def run_mode(mode: str, work: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    from aworld_gym.rollout.collect import collect
    from aworld_gym.rollout.policies.plan import PlanPolicy

    log = work / f"calls-{mode}.log"
    log.touch()
    server = {"command": sys.executable, "args": [str(work / "search.py"), str(log), str(args.latency)],
              "share": True, "cache": {"scope": "stateless"}}  # fmt: skip
    kwargs: dict[str, Any] = {"mcp_config": {"mcpServers": {"search": server}}, "tasks": tasks(args.tasks)}
    if mode != "live":
        kwargs["tool_cache"] = {"store": str(work / "tools.sqlite"), "mode": mode}
    rows = []
    for step in range(args.steps):
        before = len(log.read_text().splitlines())
        t0 = time.monotonic()
        s = collect("AWorld/MCP-v0", PlanPolicy(), episodes=args.tasks * args.samples, group_size=args.samples,
                    concurrency=args.concurrency, seed=1000 * step, progress=False, env_kwargs=kwargs)  # fmt: skip
        wall = time.monotonic() - t0
        reached = len(log.read_text().splitlines()) - before
        rows.append({"mode": mode, "step": step + 1, "episodes": s.recorded, "solved": s.successes,
                     "searches": 2 * s.recorded, "reached_server": reached, "wall_s": round(wall, 2)})  # fmt: skip
        print(f"| {mode} | {step + 1} | {s.successes}/{s.recorded} | {reached} | {wall:.1f} s |", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=32)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--latency", type=float, default=0.5, help="seconds per search (a paid API's)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "tool_cache.json"))
    args = ap.parse_args()
    print("| mode | step | solved | calls that reached the server | wall |\n|---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "search.py").write_text(SEARCH)
        rows = [row for mode in ("live", "replay", "replay-strict") for row in run_mode(mode, work, args)]
    totals = {mode: {"reached_server": sum(r["reached_server"] for r in rows if r["mode"] == mode),
                     "wall_s": round(sum(r["wall_s"] for r in rows if r["mode"] == mode), 2),
                     "solved": sum(r["solved"] for r in rows if r["mode"] == mode)}
              for mode in ("live", "replay", "replay-strict")}  # fmt: skip
    for mode, t in totals.items():
        print(f"{mode}: {t['reached_server']} calls reached the server, {t['wall_s']:.1f} s, {t['solved']} solved")
    result = {"benchmark": "tool_cache", "workload": {k: getattr(args, k) for k in
              ("tasks", "samples", "steps", "concurrency", "latency")}, "rows": rows, "totals": totals}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(stamp(result), indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
