"""Episodes in flight on one machine (issue 48): how close ``collect`` comes to the model's latency at C in flight.

The workload: N = C "What is A + B?" episodes, each 2 model calls (the peers stand-in, ``benchmarks/peers.py``, at a
fixed latency, 20 s by default) and 1 tool call, to one of two shared add servers by the episode's operand (a stdio
server, ``"share": true``, and a streamable-HTTP server, ``"share_session": true``); ``collect`` with
``OpenAIPolicy(max_concurrency=C)`` and ``concurrency=C``, in a worker process of its own. Per level:

* the two clocks (``benchmarks/clocks.py``): the whole run (the worker's start to its exit) and the window (the
  stand-in's first request to ``collect``'s return); ``ideal_s`` = 2 x latency; ``efficiency`` = ideal / window;
* CPU per episode (the worker's, servers included, ``wait4``), the worker's peak RSS, its open files at the peak;
* the event loop's lag (p50, p99, max: a 50 ms timer on ``collect``'s loop, late by that much);
* the stand-in's own requests in flight over time (sampled every 0.5 s) and its peak: it must reach C, or the limit is
  on our side of the socket.

    python benchmarks/inflight.py [--levels 1024,4096,8192,16384] [--latency 20] [--out benchmarks/results/inflight.json]
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

    threading.Thread(target=count_fds, daemon=True).start()
    c = spec["concurrency"]
    tasks = [{"id": t["id"], "prompt": t["question"], "answer": str(t["answer"])} for t in spec["tasks"]]
    servers = {"stdio": {"command": sys.executable, "args": [spec["stdio_server"]], "share": True, "tool_prefix": "s"},
               "http": {"type": "streamable-http", "url": spec["http_url"], "share_session": True, "tool_prefix": "h"}}  # fmt: skip
    policy = Probe(model=MODEL, base_url=spec["base_url"], tool_mode="native", max_concurrency=c)
    t0 = now()
    summary = collect("AWorld/MCP-v0", policy, episodes=len(tasks), concurrency=c, progress=False,
                      env_kwargs={"mcp_config": {"mcpServers": servers}, "tasks": tasks})  # fmt: skip
    t1 = now()
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    lags.sort()

    def q(p: float) -> float | None:
        return lags[min(len(lags) - 1, int(p * len(lags)))] * 1000 if lags else None

    Path(spec["out"]).write_text(json.dumps({
        "collect_start": t0, "collect_end": t1, "recorded": summary.recorded, "successes": summary.successes,
        "cpu_s": own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime, "peak_rss_mb": own.ru_maxrss / 1024,
        "peak_open_files": peak_fds[0], "lag_ms_p50": q(0.5), "lag_ms_p99": q(0.99), "lag_ms_max": q(1.0),
    }))  # fmt: skip


def run_level(stand_in: StandIn, c: int, latency: float, work: Path, http_url: str) -> dict[str, Any]:
    counts = stand_in.reset(latency)
    spec = {"concurrency": c, "tasks": tasks_for(c, c), "base_url": stand_in.base_url, "http_url": http_url,
            "stdio_server": str(work / "add_server.py"), "out": str(work / f"level-{c}.json")}  # fmt: skip
    spec_path = work / f"spec-{c}.json"
    spec_path.write_text(json.dumps(spec))
    flight: list[tuple[float, int]] = []
    start = now()
    proc = subprocess.Popen([sys.executable, __file__, "--worker", str(spec_path)])
    while proc.poll() is None:
        flight.append((round(now() - start, 2), counts.in_flight))
        time.sleep(0.5)
    end = now()
    if proc.returncode:
        return {"concurrency": c, "error": f"the worker exited with {proc.returncode}"}
    w = json.loads(Path(spec["out"]).read_text())
    first = counts.first_request_at or w["collect_start"]
    clocks = Clocks.from_marks(start, first, w["collect_end"], end)
    ideal = 2 * latency
    return {"concurrency": c, "episodes": c, "latency_s": latency, **clocks.fields(c), "ideal_s": ideal,
            "efficiency": ideal / clocks.window_s if clocks.window_s else None,
            "cpu_ms_per_episode": 1000 * w["cpu_s"] / c, "model_requests": counts.requests,
            "tool_results_ok": counts.tool_results_ok,
            "standin_peak_in_flight": counts.peak_in_flight, "standin_in_flight_over_time": flight,
            **{k: w[k] for k in ("recorded", "successes", "peak_rss_mb", "peak_open_files", "lag_ms_p50",
                                 "lag_ms_p99", "lag_ms_max")}}  # fmt: skip


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| in flight | whole | window | ideal | efficiency | episodes/s | CPU ms/episode | peak RSS MB | "
             "open files | lag p99 ms | stand-in peak in flight | solved |", "|" + "---|" * 12]  # fmt: skip
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['concurrency']} | {r['error']} |" + " |" * 10)
            continue
        lines.append(f"| {r['concurrency']} | {r['whole_s']:.1f} s | {r['window_s']:.1f} s | {r['ideal_s']:.0f} s | "
                     f"{r['efficiency']:.2f} | {r['episodes_per_s']:.1f} | {r['cpu_ms_per_episode']:.1f} | "
                     f"{r['peak_rss_mb']:.0f} | {r['peak_open_files']} | {r['lag_ms_p99']:.0f} | "
                     f"{r['standin_peak_in_flight']} | {r['successes']}/{r['episodes']} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="1024,4096,8192,16384")
    ap.add_argument("--latency", type=float, default=20.0)
    ap.add_argument("--quick", action="store_true", help="256 in flight only")
    ap.add_argument("--out", default=None)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker)
        return
    levels = [256] if args.quick else [int(x) for x in args.levels.split(",")]
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
            for c in levels:
                rows.append(run_level(stand_in, c, args.latency, work, f"http://127.0.0.1:{port}/mcp"))
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
