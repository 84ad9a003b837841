"""AWorld/Browser-v0: memory per env and step latency, one shared browser vs one browser per env.

For each browser mode (``shared``: one Playwright MCP server and one Chromium per process, an isolated context
per env; ``own``: a Playwright MCP server and a Chromium per env) and each number of envs, it opens the envs,
resets each on a task page, and sums RSS and PSS (proportional set size: shared pages split between the
processes that map them, so the sum is what the machine really spends) over every process below this one (page
server, Node, Chromium and its helpers). Then it times reset and step (the reference policy's clicks/typing,
each step including the env's own page-state read and snapshot) with the envs stepping concurrently.
Episodes/s on two clocks (``benchmarks/clocks.py``): the whole row (``episodes_per_s_whole``: making the envs and
their browsers, a first reset each, the episodes, closing them; less ``paused_s``, the memory reading; the process's
imports, paid once for every row, are outside) and the window (``episodes_per_s``: the timed episodes alone; it
leaves out ``startup_s`` and ``teardown_s``). Prints a table and writes JSON.

    python benchmarks/browser.py [--envs 1 8] [--episodes 3] [--out benchmarks/results/browser.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import gymnasium as gym  # noqa: E402

import aworld_gym  # noqa: E402
from aworld_gym.envs.browser.playwright import CHROMIUM_ARGS  # noqa: E402
from aworld_gym.envs.browser.reference import REFERENCE_TASKS, BrowserReferencePolicy  # noqa: E402
from aworld_gym.mcp.transports.shared import descendants  # noqa: E402
from benchmarks.clocks import CELL_HEAD, Clocks, cell, now  # noqa: E402
from benchmarks.provenance import stamp  # noqa: E402

TASKS = ["click-button", "enter-text", "click-checkboxes", "login-user"]
TARGETS = {"shared": 100, "own": 220}  # MB PSS per env at 8 envs (issue 19; were 136 and 300)


def memory_mb() -> tuple[float, float, int]:
    """(RSS, PSS) in MiB summed over this process's descendants, and how many there are."""
    rss = pss = 0
    pids = [p for p in descendants(os.getpid()) if p != os.getpid()]
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except OSError:
            continue
    return rss / 1024, pss / 1024, len(pids)


async def episode(env, policy, seed: int, task: str, resets: list[float], steps: list[float]) -> float | None:
    unwrapped = env.unwrapped
    t = time.perf_counter()
    await unwrapped.areset(seed=seed, options={"task_id": task})
    resets.append(time.perf_counter() - t)
    done = False
    while not done:
        action = policy.decide(unwrapped)
        t = time.perf_counter()
        _, _, terminated, truncated, info = await unwrapped.astep(action)
        steps.append(time.perf_counter() - t)
        done = terminated or truncated
    return info.get("score")


async def measure(mode: str, n: int, episodes: int) -> dict:
    started = now()  # the whole row: making the envs (and their browsers) to closing them
    made = [await asyncio.to_thread(gym.make, "AWorld/Browser-v0", tasks=TASKS, browser=mode) for _ in range(n)]
    envs = [aworld_gym.async_face(env) for env in made]
    try:
        await asyncio.gather(
            *(e.unwrapped.areset(seed=i, options={"task_id": TASKS[i % 4]}) for i, e in enumerate(envs))
        )
        paused = now()
        await asyncio.sleep(1.0)
        rss, pss, procs = memory_mb()
        paused = now() - paused  # the benchmark's own memory reading: in neither clock
        resets: list[float] = []
        steps: list[float] = []
        policy = BrowserReferencePolicy()
        window_start = now()

        async def worker(k: int) -> list:
            return [
                await episode(envs[k], policy, 100 * k + e, TASKS[(k + e) % 4], resets, steps) for e in range(episodes)
            ]

        scores = [s for chunk in await asyncio.gather(*(worker(k) for k in range(n))) for s in chunk]
        window_end = now()
    finally:
        for e in envs:
            await e.unwrapped.aclose()
    clocks = Clocks.from_marks(started, window_start, window_end, now(), paused_in_startup_s=paused)
    return {
        "mode": mode,
        "envs": n,
        "processes": procs,
        "rss_mb_total": round(rss, 1),
        "pss_mb_total": round(pss, 1),
        "pss_mb_per_env": round(pss / n, 1),
        "rss_mb_per_env": round(rss / n, 1),
        "reset_s_median": round(statistics.median(resets), 3),
        "step_s_median": round(statistics.median(steps), 3),
        "step_s_p90": round(sorted(steps)[int(0.9 * (len(steps) - 1))], 3),
        "episodes": len(scores),
        **clocks.fields(len(scores), digits=3),
        "success_rate": sum(1 for s in scores if s == 1.0) / len(scores),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--episodes", type=int, default=3, help="episodes per env for the latency columns")
    ap.add_argument("--modes", nargs="+", default=["shared", "own"], choices=["shared", "own"])
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/browser.json"))
    args = ap.parse_args()
    assert set(TASKS) <= set(REFERENCE_TASKS)
    rows = [asyncio.run(measure(mode, n, args.episodes)) for n in args.envs for mode in args.modes]
    cols = ["mode", "envs", "processes", "pss_mb_total", "pss_mb_per_env", "rss_mb_per_env", "reset_s_median",
            "step_s_median", "step_s_p90", "episodes_per_s_whole", "episodes_per_s", CELL_HEAD,
            "success_rate"]  # fmt: skip
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(str({**r, CELL_HEAD: cell(r)}[c]) for c in cols))
    ratios = {}
    for n in args.envs if len(args.modes) == 2 else []:
        shared = next(r for r in rows if r["mode"] == "shared" and r["envs"] == n)
        own = next(r for r in rows if r["mode"] == "own" and r["envs"] == n)
        ratios[str(n)] = round(own["pss_mb_per_env"] / shared["pss_mb_per_env"], 2)
        print(f"{n} envs: PSS per env, own / shared = {ratios[str(n)]}x")
    targets = {}
    for mode, bound in TARGETS.items():
        row = next((r for r in rows if r["mode"] == mode and r["envs"] == 8), None)
        if row is not None:
            met = row["pss_mb_per_env"] <= bound and row["success_rate"] == 1.0
            targets[mode] = {"pss_mb_per_env": row["pss_mb_per_env"], "target": bound, "met": met}
            print(f"target {mode} at 8 envs: <= {bound} MB PSS per env, all solved: {row['pss_mb_per_env']} MB, "
                  f"success {row['success_rate']} -> {'met' if met else 'NOT met'}")  # fmt: skip
    out = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "rows": rows,
           "own_over_shared_pss": ratios, "targets": targets,
           "chromium_args": list(CHROMIUM_ARGS)}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(stamp(out), indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
