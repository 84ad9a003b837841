"""What every benchmark JSON says about where its numbers come from: the commit when the run started (``git``; a
commit made while it ran shows as ``git_end``, and ``code_changed_during_run`` says whether the code under
``aworld_gym/`` or ``benchmarks/`` changed between the start and the end, committed or not); whether the tree had changes
(``dirty``: any tracked file, docs included) and whether the code did (``code_dirty``: any change, untracked files
included, under ``aworld_gym/`` or ``benchmarks/`` outside ``benchmarks/results/``, so neither a docs edit nor the
JSONs a figures run rewrites count); when; the machine: CPU model, the CPU flags that pick torch's kernels
(``cpu_flags``, see :data:`KERNEL_FLAGS`), cores; the load average when the benchmark started and ended
(informational: the benchmark's own work raises it); the steal time over the run (``steal_s``: CPU time the
hypervisor gave to other guests, from ``/proc/stat``, and ``steal_fraction``: that over the run's wall time x
cores); and the CPU that *other* processes used while it ran (``other_cpus``, see :class:`OtherWork`): ``quiet`` when
that stayed under a quarter of one CPU. So a figure can be traced to the code that measured it and a busy machine
shows. Where ``/proc`` or git is missing, the fields it would give are None."""

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
CODE = ("aworld_gym", "benchmarks", ":(exclude)benchmarks/results")  # what code_dirty looks at
# The /proc/cpuinfo flags (x86) or features (Arm) that decide which kernels torch/oneDNN/MKL pick.
KERNEL_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_vnni",
                "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve", "sve2",
                "bf16", "i8mm")  # fmt: skip
_TICK = os.sysconf("SC_CLK_TCK")


def _steal_ticks(path: str = "/proc/stat") -> int | None:
    """The ``steal`` column of ``/proc/stat``'s ``cpu`` line (all CPUs, in clock ticks); None without it."""
    try:
        with open(path) as f:
            for line in f:
                fields = line.split()
                if fields and fields[0] == "cpu":
                    return int(fields[8]) if len(fields) > 8 else None
    except (OSError, ValueError):
        return None
    return None


def cpu_info(path: str = "/proc/cpuinfo") -> tuple[str | None, list[str] | None]:
    """The CPU's model name and which of :data:`KERNEL_FLAGS` it has (None, None without ``/proc/cpuinfo``)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None, None
    model, flags = None, None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = value.strip() or None
        elif key in ("flags", "Features") and flags is None:
            have = set(value.split())
            flags = [f for f in KERNEL_FLAGS if f in have]
    return model, flags


_START = os.getloadavg()  # imported at a benchmark's start
_T0 = time.monotonic()
_STEAL0 = _steal_ticks()


def _git(*args: str) -> str | None:
    """git's output in the repository; None when git is missing or fails."""
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT)
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _changed(*args: str) -> bool | None:
    out = _git("status", "--porcelain", *args)
    return None if out is None else bool(out)


def _code_state() -> dict[str, Any]:
    """The commit, the tree's and the code's changes, and a digest of the code's uncommitted state."""
    diff = _git("diff", "HEAD", "--", *CODE)
    untracked = _git("ls-files", "--others", "--exclude-standard", "--", *CODE)
    return {"git": _git("rev-parse", "--short", "HEAD") or "", "dirty": _changed("--untracked-files=no"),
            "code_dirty": _changed("--", *CODE), "code": None if diff is None else (diff, untracked)}  # fmt: skip


def begin() -> None:
    """Read the code's state now: the run's start (done when this module is imported, first thing in a benchmark)."""
    global _AT_START
    _AT_START = _code_state()


_AT_START: dict[str, Any] = {}
begin()


def _code_moved(start: dict[str, Any], end: dict[str, Any]) -> bool | None:
    """Whether the code differs between the run's start and its end (another commit touching it, or other
    uncommitted changes); None without git."""
    if start["code"] is None or end["code"] is None:
        return None
    if start["git"] != end["git"]:
        same = subprocess.run(["git", "diff", "--quiet", start["git"], end["git"], "--", *CODE], cwd=ROOT,
                              capture_output=True).returncode == 0  # fmt: skip
        if not same:
            return True
    return start["code"] != end["code"]


def stamp(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with a ``provenance`` entry (see the module's docstring)."""
    start, now = _AT_START, _code_state()
    end = os.getloadavg()
    wall = time.monotonic() - _T0
    steal = _steal_ticks()
    steal_s = None if steal is None or _STEAL0 is None else max(0, steal - _STEAL0) / _TICK
    cores = os.cpu_count()
    model, flags = cpu_info()
    other = _RUN.stop()
    result["provenance"] = {
        "git": start["git"],  # the commit the run started on
        **({"git_end": now["git"]} if now["git"] != start["git"] else {}),
        "code_changed_during_run": _code_moved(start, now),
        "dirty": None if start["dirty"] is None else bool(start["dirty"] or now["dirty"]),  # any tracked change
        # aworld_gym/, benchmarks/ (not results/), untracked files included, at the start or the end
        "code_dirty": None if start["code_dirty"] is None else bool(start["code_dirty"] or now["code_dirty"]),
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {cores} cpus",
        "cpu_model": model,
        "cpu_flags": flags,
        "cores": cores,
        "load_avg_start": list(_START),
        "load_avg_end": list(end),
        "wall_s": round(wall, 2),
        "steal_s": None if steal_s is None else round(steal_s, 2),
        "steal_fraction": None
        if steal_s is None or not cores
        else round(min(1.0, steal_s / (max(wall, 1e-9) * cores)), 4),
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
