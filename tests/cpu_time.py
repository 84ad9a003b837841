"""A pytest plugin that measures each test file's wall time and the machine's CPU time while it ran.

    PYTEST_ADDOPTS="-p tests.cpu_time" AWORLD_GYM_TEST_CPU=cpu.json make test     # or any pytest command

The CPU time is the whole machine's busy time (``/proc/stat``: every process, the servers, browsers and model
servers a test starts included), so it is only meaningful on an otherwise quiet machine and with the tests run one
at a time (serially: under xdist the files overlap). It says how much of the suite's time is work and how much is
waiting, hence how much running files in parallel can gain on a given number of cores. Writes a JSON list of
``[file, wall_s, cpu_s, tests]``, the most CPU first, and prints the totals.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from typing import Any

_files: defaultdict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
_started: dict[str, tuple[float, float]] = {}


def busy_cpu_s() -> float:
    """Seconds of CPU time the whole machine has spent busy since boot (all CPUs; idle and iowait left out)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    _started[nodeid] = (time.monotonic(), busy_cpu_s())


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    wall, cpu = _started.pop(nodeid)
    row = _files[nodeid.split("::", 1)[0]]
    row[0] += time.monotonic() - wall
    row[1] += busy_cpu_s() - cpu
    row[2] += 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    rows = sorted(([name, round(w, 1), round(c, 1), int(n)] for name, (w, c, n) in _files.items()), key=lambda r: -r[2])
    wall, cpu = sum(r[1] for r in rows), sum(r[2] for r in rows)
    out = os.environ.get("AWORLD_GYM_TEST_CPU", "test-cpu.json")
    with open(out, "w") as f:
        json.dump(rows, f, indent=0)
    terminalreporter.write_line(
        f"cpu_time: {len(rows)} files, {wall / 60:.1f} min of test wall time, {cpu / 60:.1f} CPU-minutes of machine "
        f"time ({cpu / max(wall, 1e-9):.2f} CPUs on average); per file in {out}"
    )
