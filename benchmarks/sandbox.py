"""Sandbox throughput: cold vs warm executions against the floors, and the Code-v0 rollout command on both paths.

For ``print(1)`` and for numpy-using code it measures, per way of running Python:

- ``python -c``: a bare ``python -I -c`` (no isolation at all: the floor of starting Python);
- ``bwrap python -c``: ``bwrap --ro-bind / / --unshare-pid --unshare-net ... python -I -c`` (the floor of a fresh
  namespace sandbox);
- ``cold``: ``Sandbox(warm=False).run`` (a fresh bubblewrap + setpriv + Python + cgroup per execution);
- ``warm``: ``Sandbox(warm=True).run`` (forked from the zygote: see aworld_gym/sandbox/warm.py);

the p50/p90 latency of one caller, executions/s with 1 and with 8 concurrent callers, and the CPU per execution
(the whole machine's busy time from /proc/stat during the 8-caller run, divided by the executions: on a quiet
machine that is the sandbox's own cost, kernel included). Executions/s from 8 callers on two clocks
(``benchmarks/clocks.py``): ``exec_per_s_8_whole`` over the whole (starting the way: ``Sandbox()`` and its first
execution, which starts the warm zygote, as ``startup_s``; the row's executions; closing it, ``teardown_s``: a
sandbox a user starts for these executions alone) and ``exec_per_s_8`` over the window (the executions alone). Then 10,000 warm executions (8 callers) with the RSS of
the host process and of the zygote before and after, and the ``aworld-gym rollout`` command on AWorld/Code-v0
(256 episodes at concurrency 64 against 4 sequential, 1 s per turn) warm and cold, timed from outside (its
``episodes_per_s``, start-up included, is the whole clock; ``episodes_per_s_window`` the run's own window). Prints tables
and writes JSON.

    python benchmarks/sandbox.py [--quick] [--executions 10000] [--no-rollout]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from aworld_gym.rollout.jobs import is_success  # noqa: E402
from aworld_gym.sandbox.runner import Sandbox  # noqa: E402
from benchmarks.clocks import CELL_HEAD, Clocks, cell, now  # noqa: E402
from benchmarks.clocks import rollout_command as timed_command  # noqa: E402
from benchmarks.provenance import stamp  # noqa: E402

CODES = {"print(1)": "print(1)", "numpy": "import numpy as np\nprint(int(np.arange(1000).sum()))"}
TARGETS = {"warm_exec_per_s_8": 150.0, "warm_p50_ms_print": 15.0, "warm_p50_ms_numpy": 30.0,
           "code_v0_speedup": 50.0, "rss_growth_mb": 50.0}  # fmt: skip


def busy_seconds() -> float:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def subprocess_runner(argv: list[str]) -> Callable[[str, Path], None]:
    def run(code: str, work: Path) -> None:
        p = subprocess.run([*argv, code], cwd=work, capture_output=True, env={"PATH": "/usr/bin:/bin"}, check=False)
        if p.returncode != 0:
            raise RuntimeError(p.stderr.decode(errors="replace"))

    return run


def sandbox_runner(sb: Sandbox) -> Callable[[str, Path], None]:
    def run(code: str, work: Path) -> None:
        res = sb.run(code, work)
        if not res.ok:
            raise RuntimeError(res.render())

    return run


def latency(run: Callable[[str, Path], None], code: str, work: Path, n: int) -> dict:
    run(code, work)  # warm-up (page cache, the zygote)
    times = []
    for _ in range(n):
        t = time.perf_counter()
        run(code, work)
        times.append(time.perf_counter() - t)
    times.sort()
    return {"p50_ms": 1000 * statistics.median(times), "p90_ms": 1000 * times[int(0.9 * (len(times) - 1))],
            "exec_per_s_1": len(times) / sum(times)}  # fmt: skip


def concurrent(run: Callable[[str, Path], None], code: str, works: list[Path], n: int) -> dict:
    left = [n]
    lock = threading.Lock()
    errors: list[str] = []

    def caller(work: Path) -> None:
        while True:
            with lock:
                if left[0] <= 0:
                    return
                left[0] -= 1
            try:
                run(code, work)
            except Exception as exc:  # noqa: BLE001 - reported in the table
                errors.append(str(exc)[:200])

    busy0, t0 = busy_seconds(), time.perf_counter()
    threads = [threading.Thread(target=caller, args=(w,)) for w in works]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, busy = time.perf_counter() - t0, busy_seconds() - busy0
    return {"exec_per_s_8": n / wall, "window_s": wall, "cpu_ms": 1000 * busy / n, "errors": len(errors)}


def zygote_rss_mb(sb: Sandbox) -> float:
    """RSS of the zygote itself (spares and executions are its children and not counted)."""
    proc = sb._warm.zygote.proc if sb._warm else None
    if proc is None:
        return 0.0
    try:  # the zygote is PID 1 of its namespace: bubblewrap's only child
        return sum(p.memory_info().rss for p in psutil.Process(proc.pid).children()) / 2**20
    except psutil.Error:
        return 0.0


def soak(n: int, tmp: Path) -> dict:
    works = [tmp / f"soak{i}" for i in range(8)]
    for w in works:
        w.mkdir()
    sb = Sandbox(warm=True)
    try:
        run = sandbox_runner(sb)
        concurrent(run, "print(1)", works, 200)
        before = {"host_mb": psutil.Process().memory_info().rss / 2**20, "zygote_mb": zygote_rss_mb(sb)}
        result = concurrent(run, "x = [i * i for i in range(1000)]\nprint(len(x))", works, n)
        after = {"host_mb": psutil.Process().memory_info().rss / 2**20, "zygote_mb": zygote_rss_mb(sb)}
    finally:
        sb.close()
    growth = (after["host_mb"] - before["host_mb"]) + (after["zygote_mb"] - before["zygote_mb"])
    return {"executions": n, "before": before, "after": after, "growth_mb": growth, **result}


def rollout_command(warm: str, latency_s: float) -> dict:
    out = {}
    for name, episodes, conc in (("sequential", 4, 1), ("parallel", 256, 64)):
        part, rows = timed_command(["--env", "AWorld/Code-v0", "--policy", "reference", "--episodes", str(episodes),
                                    "--concurrency", str(conc), "--policy-latency", str(latency_s),
                                    "--env-kwargs", json.dumps({"warm": warm})])  # fmt: skip
        out[name] = {"episodes": len(rows), "successes": sum(1 for r in rows if is_success(r)), **part}
    out["speedup"] = out["parallel"]["episodes_per_s"] / max(out["sequential"]["episodes_per_s"], 1e-9)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer executions (a smoke run)")
    ap.add_argument("--executions", type=int, default=10_000, help="warm executions in the memory soak")
    ap.add_argument("--no-rollout", action="store_true", help="skip the Code-v0 rollout command")
    ap.add_argument("--latency", type=float, default=1.0, help="policy seconds per turn in the rollout command")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/sandbox.json"))
    args = ap.parse_args()
    n_lat, n_conc = (10, 40) if args.quick else (40, 200)
    soak_n = 1000 if args.quick else args.executions
    python = [sys.executable, "-I", "-c"]
    bwrap = shutil.which("bwrap")
    ways: dict[str, Callable[[], tuple[Callable[[str, Path], None], Callable[[], None]]]] = {
        "python -c": lambda: (subprocess_runner(python), lambda: None),
    }
    if bwrap:
        floor = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--unshare-net",
                 "--die-with-parent", *python]  # fmt: skip
        ways["bwrap python -c"] = lambda: (subprocess_runner(floor), lambda: None)
    for name, warm in (("cold", False), ("warm", True)):

        def make(warm: bool = warm) -> tuple[Callable[[str, Path], None], Callable[[], None]]:
            sb = Sandbox(warm=warm)
            return sandbox_runner(sb), sb.close

        ways[name] = make
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        works = [tmp / f"w{i}" for i in range(8)]
        for w in works:
            w.mkdir()
        for way, make in ways.items():
            opened = now()  # the way's start-up, charged to each of its rows: made, and a first execution (warm:
            run, close = make()  # the zygote starts on first use)
            run("print(1)", works[0])
            opened = now() - opened
            mine = []
            try:
                for label, code in CODES.items():
                    n = n_conc if way == "warm" else max(16, n_conc // 4)  # the slow ways get fewer executions
                    row = {
                        "way": way,
                        "code": label,
                        "executions": n,
                        **latency(run, code, works[0], n_lat),
                        **concurrent(run, code, works, n),
                    }
                    rows.append(row)
                    mine.append(row)
                    print(f"  {way:<16} {label:<9} p50 {row['p50_ms']:7.1f} ms  {row['exec_per_s_8']:7.1f} exec/s (8)",
                          flush=True)  # fmt: skip
            finally:
                closed = now()
                close()
                closed = now() - closed
            for row in mine:  # whole: start the sandbox, run the row's executions from 8 callers, close it
                row.update(Clocks.from_parts(opened, row["window_s"], closed).fields(row["executions"], "exec_per_s_8"))
        soaked = soak(soak_n, tmp)
    rollout = {} if args.no_rollout else {w: rollout_command(w, args.latency) for w in ("on", "off")}

    print(f"\nsandbox executions ({platform.machine()}, {os.cpu_count()} CPUs)")
    print(f"{'way':<16} {'code':<9} {'p50 ms':>8} {'p90 ms':>8} {'exec/s 1':>9} {'exec/s 8 whole':>15} "
          f"{'exec/s 8 window':>16} {CELL_HEAD:>38} {'CPU ms/exec':>12}")  # fmt: skip
    for r in rows:
        print(f"{r['way']:<16} {r['code']:<9} {r['p50_ms']:>8.1f} {r['p90_ms']:>8.1f} {r['exec_per_s_1']:>9.1f} "
              f"{r['exec_per_s_8_whole']:>15.1f} {r['exec_per_s_8']:>16.1f} {cell(r):>38} {r['cpu_ms']:>12.1f}"
              + (f"  ({r['errors']} errors)" if r["errors"] else ""))  # fmt: skip
    print(f"\nwarm soak: {soaked['executions']} executions at {soaked['exec_per_s_8']:.1f}/s, "
          f"host RSS {soaked['before']['host_mb']:.0f} -> {soaked['after']['host_mb']:.0f} MB, zygote RSS "
          f"{soaked['before']['zygote_mb']:.0f} -> {soaked['after']['zygote_mb']:.0f} MB, growth "
          f"{soaked['growth_mb']:+.1f} MB, {soaked['errors']} errors")  # fmt: skip
    for w, r in rollout.items():
        seq, par = r["sequential"], r["parallel"]
        print(f"Code-v0 rollout command, warm={w} (whole command; window in brackets): 4 sequential "
              f"{seq['episodes_per_s']:.2f} eps/s ({seq['episodes_per_s_window']:.2f}; {cell(seq)} s); "
              f"256 at concurrency 64 {par['episodes_per_s']:.2f} eps/s ({par['episodes_per_s_window']:.2f}; "
              f"{cell(par)} s, {par['successes']}/{par['episodes']} solved): {r['speedup']:.1f}x")  # fmt: skip
    warm_row = {r["code"]: r for r in rows if r["way"] == "warm"}
    measured = {"warm_exec_per_s_8": warm_row["print(1)"]["exec_per_s_8"],
                "warm_p50_ms_print": warm_row["print(1)"]["p50_ms"], "warm_p50_ms_numpy": warm_row["numpy"]["p50_ms"],
                "rss_growth_mb": soaked["growth_mb"]}  # fmt: skip
    if "on" in rollout:
        measured["code_v0_speedup"] = rollout["on"]["speedup"]
    print("\ntargets:")
    verdicts = {}
    for key, value in measured.items():
        target = TARGETS[key]
        met = value >= target if key in ("warm_exec_per_s_8", "code_v0_speedup") else value <= target
        verdicts[key] = {"value": value, "target": target, "met": met}
        print(f"  {key:<20} {value:8.1f} (target {'>=' if key in ('warm_exec_per_s_8', 'code_v0_speedup') else '<='} "
              f"{target:g}: {'met' if met else 'NOT met'})")  # fmt: skip
    result = {"benchmark": "sandbox", "cpus": os.cpu_count(), "rows": rows, "soak": soaked, "rollout": rollout,
              "targets": verdicts}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(stamp(result), indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
