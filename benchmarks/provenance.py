"""What every benchmark JSON says about where its numbers come from: the commit (and whether the tree had changes),
when, the machine, the load average when the benchmark started and ended (informational: the benchmark's own work
raises it), and the CPU that *other* processes used while it ran (``other_cpus``, see :class:`OtherWork`):
``quiet`` when that stayed under a quarter of one CPU. So a figure can be traced to the code that measured it and a
busy machine shows."""

from __future__ import annotations

import datetime
import os
import platform
import resource
import subprocess
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_START = os.getloadavg()  # imported at a benchmark's start


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT)
    return out.stdout.strip() if out.returncode == 0 else ""


def stamp(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with a ``provenance`` entry (see the module's docstring)."""
    end = os.getloadavg()
    other = _RUN.stop()
    result["provenance"] = {
        "git": _git("rev-parse", "--short", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "load_avg_start": list(_START),
        "load_avg_end": list(end),
        "other_cpu_s": other["other_cpu_s"],
        "other_cpus": other["other_cpus"],
        "quiet": not other["busy"],
    }
    return result


class OtherWork:
    """The CPU that processes *other* than the benchmark's used while it measured: the machine's busy CPU time
    (``/proc/stat``) minus this process's and its waited-for children's (the benchmark's workers and what they
    started). The load average cannot tell: a row's own processes raise it, and a row starts in the last one's tail.

    ``OtherWork()`` at a row's start, :meth:`stop` after its worker was waited for.
    """

    BUSY_CPUS = 0.25  # other processes averaged more than a quarter of one CPU: the row shared the machine

    def __init__(self) -> None:
        self.t0, self.busy0, self.own0 = time.monotonic(), _machine_busy_s(), _own_cpu_s()

    def stop(self) -> dict[str, Any]:
        wall = max(time.monotonic() - self.t0, 1e-9)
        other = max(0.0, _machine_busy_s() - self.busy0 - (_own_cpu_s() - self.own0))
        return {"other_cpu_s": round(other, 2), "other_cpus": round(other / wall, 3),
                "busy": other / wall > self.BUSY_CPUS}  # fmt: skip


def _machine_busy_s() -> float:
    """Seconds of CPU the whole machine has spent busy since boot (every CPU; idle and iowait left out)."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0.0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    """CPU seconds of this process and of the children it has waited for."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        use = resource.getrusage(who)
        total += use.ru_utime + use.ru_stime
    return total


_RUN = OtherWork()  # the whole benchmark: from its import of this module to stamp()
