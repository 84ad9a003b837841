"""What every benchmark JSON says about where its numbers come from: the commit (and whether the tree had changes),
when, the machine, the load average when the benchmark started and ended (informational: the benchmark's own work
raises it), and the CPU that *other* processes used while it ran (``other_cpus``, see :class:`OtherWork`):
``quiet`` when that stayed under a quarter of one CPU. So a figure can be traced to the code that measured it and a
busy machine shows."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import threading
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
    """The CPU that processes *other* than the benchmark's used while it measured, read directly: every second a
    thread reads every process's CPU time from ``/proc``; a process is the benchmark's own when it descends from
    this process (once seen so, always: a browser its parent left behind stays ours); what the others gained
    between the first and the last time they were seen is the other work. (A process that starts and ends between
    two reads is missed.) The load average cannot tell: a row's own processes raise it, and a row starts in the last
    one's tail; nor can the machine's busy time minus our own, since a descendant that outlives its parent is never
    waited for by us.

    ``OtherWork()`` at a row's start, :meth:`stop` at its end.
    """

    BUSY_CPUS = 0.25  # other processes averaged more than a quarter of one CPU: the row shared the machine

    def __init__(self, interval_s: float = 1.0) -> None:
        self.t0 = time.monotonic()
        self._ours: set[tuple[int, int]] = set()
        self._first: dict[tuple[int, int], float] = {}
        self._last: dict[tuple[int, int], float] = {}
        self._lock = threading.Lock()
        self._scan(at_start=True)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(interval_s,), daemon=True)
        self._thread.start()

    def _loop(self, interval_s: float) -> None:
        while not self._done.wait(interval_s):
            self._scan()

    def _scan(self, at_start: bool = False) -> None:
        procs = _processes()
        children: dict[int, list[tuple[int, int]]] = {}
        for key, (ppid, _) in procs.items():
            children.setdefault(ppid, []).append(key)
        with self._lock:
            todo = [key for key in procs if key[0] == os.getpid() or key in self._ours]
            while todo:
                key = todo.pop()
                self._ours.add(key)
                todo.extend(k for k in children.get(key[0], []) if k not in self._ours)
            for key, (_, cpu) in procs.items():
                if key not in self._first:
                    self._first[key] = cpu if at_start else 0.0  # started since: all of its CPU is in the window
                self._last[key] = cpu

    def stop(self) -> dict[str, Any]:
        self._done.set()
        self._thread.join()
        self._scan()
        wall = max(time.monotonic() - self.t0, 1e-9)
        with self._lock:
            gains = {k: self._last[k] - self._first[k] for k in self._last if k not in self._ours}
        other = sum(max(0.0, g) for g in gains.values())
        top = sorted(gains.items(), key=lambda kv: -kv[1])[:3]
        return {"other_cpu_s": round(other, 2), "other_cpus": round(other / wall, 3),
                "other_top": [f"{_name(pid)} ({pid}): {g:.1f} s" for (pid, _), g in top if g >= 0.5],
                "busy": other / wall > self.BUSY_CPUS}  # fmt: skip


_TICK = os.sysconf("SC_CLK_TCK")


def _processes() -> dict[tuple[int, int], tuple[int, float]]:
    """(pid, start time) -> (parent pid, CPU seconds) of every process, from ``/proc/<pid>/stat``."""
    out: dict[tuple[int, int], tuple[int, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2 :].split()  # after "pid (comm) ": state ppid ... utime stime ... start
        out[(int(entry.name), int(fields[19]))] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK)
    return out


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "gone"


_RUN = OtherWork()  # the whole benchmark: from its import of this module to stamp()
