"""Overhead of ``env.step`` over a bare MCP ``call_tool``, per transport.

For each transport (in-process, stdio, streamable HTTP on 127.0.0.1) it measures, against the same demo
server, the median latency of

- a bare ``mcp.Client.call_tool("noop")`` awaited in a tight async loop (``bare async``);
- the same bare call made from synchronous code, one event-loop run per call (``bare sync``) — what any
  synchronous API such as ``env.step`` must do, and so the like-for-like baseline of the 1.3x target;
- ``env.step('<tool_call>{"name": "noop", ...}</tool_call>')`` on ``AWorld/MCP-v0``, alternating call by call
  with the bare sync call so that machine noise hits both alike.

It also counts the processes that ``reset()`` spawns once the servers are up (the target is none). Prints a
table and writes JSON.

    python benchmarks/step_overhead.py [--calls 20] [--rounds 50] [--out benchmarks/results/step_overhead.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym

import aworld_gym  # noqa: F401
from aworld_gym.mcp.demo_server import build_server

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.provenance import stamp  # noqa: E402
from tests.helpers import child_pids, free_port, http_demo_server  # noqa: E402

ACTION = '<tool_call>\n{"name": "noop", "arguments": {}}\n</tool_call>'
TASKS = [{"id": "t", "prompt": "call noop", "answer": "ok"}]


class BareClient:
    """A bare ``mcp.Client`` on its own long-lived loop; each round awaits ``call_tool`` in a tight loop."""

    def __init__(self, target) -> None:
        self.loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._ready = self.loop.create_future()
        self._task = self.loop.create_task(self._own(target))
        self.client = self.loop.run_until_complete(self._ready)

    async def _own(self, target) -> None:
        from mcp import Client

        async with Client(target) as client:
            self._ready.set_result(client)
            await self._stop.wait()

    async def _round(self, n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            await self.client.call_tool("noop", {})
            out.append(time.perf_counter() - t0)
        return out

    def round(self, n: int) -> list[float]:
        return self.loop.run_until_complete(self._round(n))

    def sync_call(self) -> float:
        """One bare call driven from synchronous code, as ``env.step`` must be: one loop run per call."""
        t0 = time.perf_counter()
        self.loop.run_until_complete(self.client.call_tool("noop", {}))
        return time.perf_counter() - t0

    def close(self) -> None:
        self._stop.set()
        self.loop.run_until_complete(self._task)
        self.loop.close()


def env_round(env: gym.Env, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        _, _, term, trunc, _ = env.step(ACTION)
        out.append(time.perf_counter() - t0)
        assert not (term or trunc)
    return out


def measure(name: str, config: dict, target_factory, calls: int, rounds: int) -> dict:
    env = gym.make(
        "AWorld/MCP-v0", mcp_config=config, tasks=TASKS, max_episode_steps=-1, max_turns=10**9, disable_env_checker=True
    )
    env.reset(seed=0)
    before = child_pids()
    for _ in range(10):
        env.reset()
    spawned_by_reset = len(child_pids() - before)
    bare_client = BareClient(target_factory())
    bare_client.round(20)  # warm-up both
    env_round(env, 20)
    bare: list[float] = []
    bare_sync: list[float] = []
    stepped: list[float] = []
    for _ in range(rounds):  # short alternating rounds: machine noise hits all three alike
        bare += bare_client.round(calls)
        env.reset()  # episodes of realistic length: the history does not grow over the whole benchmark
        for _ in range(calls):  # a bare sync call and an env.step, one after the other
            bare_sync.append(bare_client.sync_call())
            stepped += env_round(env, 1)
    bare_client.close()
    env.close()
    b, bs, s = statistics.median(bare), statistics.median(bare_sync), statistics.median(stepped)
    return {
        "transport": name,
        "bare_call_async_median_ms": b * 1e3,
        "bare_call_sync_median_ms": bs * 1e3,
        "env_step_median_ms": s * 1e3,
        "ratio_vs_sync_bare": s / bs,
        "ratio_vs_async_bare": s / b,
        "target_ratio": 1.3,
        "meets_target": s / bs <= 1.3,
        "processes_spawned_by_10_resets": spawned_by_reset,
        "samples_each": len(bare),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20, help="calls per round")
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/step_overhead.json"))
    args = ap.parse_args()
    from mcp import StdioServerParameters

    stdio = {"command": sys.executable, "args": ["-m", "aworld_gym.mcp.demo_server"]}
    rows = [
        measure(
            "in-process",
            {"mcpServers": {"demo": build_server}},
            build_server,
            args.calls,
            args.rounds,
        ),
        measure(
            "stdio",
            {"mcpServers": {"demo": stdio}},
            lambda: StdioServerParameters(**stdio),
            args.calls,
            args.rounds,
        ),
    ]
    with http_demo_server() as url:
        rows.append(
            measure(
                "streamable-http",
                {"mcpServers": {"demo": {"type": "streamable-http", "url": url}}},
                lambda: url,
                args.calls,
                args.rounds,
            )
        )
    header = (
        f"{'transport':<16} {'bare async ms':>13} {'bare sync ms':>12} {'env.step ms':>11} "
        f"{'step/sync':>9} {'step/async':>10} {'<=1.3x':>6} {'procs/10 resets':>15}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['transport']:<16} {r['bare_call_async_median_ms']:>13.3f} {r['bare_call_sync_median_ms']:>12.3f} "
            f"{r['env_step_median_ms']:>11.3f} {r['ratio_vs_sync_bare']:>9.2f} {r['ratio_vs_async_bare']:>10.2f} "
            f"{'yes' if r['meets_target'] else 'NO':>6} {r['processes_spawned_by_10_resets']:>15}"
        )
    out = {
        "benchmark": "step_overhead",
        "python": sys.version.split()[0],
        "machine": f"{platform.machine()} {os.cpu_count()} cpu",
        "git": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip(),
        "calls_per_round": args.calls,
        "rounds": args.rounds,
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(stamp(out), indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    _ = free_port
    main()
