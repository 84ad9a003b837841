"""The two clocks of every throughput figure (issue 47): the whole run, as a user waits for it, and the steady window.

* **whole** (``whole_s``, ``<rate>_whole``): from the moment the row's work is started (for a benchmark that runs a
  row in a worker process: that process's start, before its imports, servers and envs) to its last record written
  and its teardown finished (the worker process reaped); what a user waits for.
* **window** (``window_s``, ``<rate>``, the figure the benchmarks quoted before): the steady state, from the row's
  first episode (or execution) to its last. What it leaves out is recorded beside it: ``startup_s`` (imports, servers,
  envs, browsers before the window) and ``teardown_s`` (closing them after it); where a benchmark can time only the
  whole and the window (a ``collect`` call timed from outside), both are None and ``outside_window_s`` (always set)
  holds their sum.

``paused_s`` is the benchmark's own measuring inside a row (a worker waiting while its process tree's memory is
read, a settling sleep before counting file descriptors): no user waits for it, so it is in neither clock.
``startup_s + window_s + teardown_s == whole_s`` whenever the split is known.

Every mark is :func:`now` (``time.monotonic``: ``CLOCK_MONOTONIC`` on Linux, one clock for every process of the
machine), so a driver's marks and its worker's subtract.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

now = time.monotonic


@dataclass(frozen=True)
class Clocks:
    """One row's two clocks. Build it with :meth:`from_marks`, :meth:`from_parts` or :meth:`outside`."""

    whole_s: float
    window_s: float
    startup_s: float | None = None  # None: the benchmark cannot split start-up from teardown (see outside_window_s)
    paused_s: float = 0.0

    def __post_init__(self) -> None:
        if self.window_s < 0 or self.whole_s < self.window_s:
            raise ValueError(f"the whole run ({self.whole_s:.3f} s) must hold the window ({self.window_s:.3f} s)")
        if self.startup_s is not None and not 0 <= self.startup_s <= self.whole_s - self.window_s + 1e-9:
            raise ValueError(f"start-up {self.startup_s:.3f} s does not fit outside the window")

    @classmethod
    def from_marks(cls, start: float, window_start: float, window_end: float, end: float,
                   paused_in_startup_s: float = 0.0, paused_in_teardown_s: float = 0.0) -> Clocks:  # fmt: skip
        """From four :func:`now` marks: the work started, the window opened and closed, the work ended; the pauses
        (the benchmark's own measuring) before and after the window are taken out of start-up and teardown."""
        if not start <= window_start <= window_end <= end:
            raise ValueError(f"marks out of order: {start}, {window_start}, {window_end}, {end}")
        paused = paused_in_startup_s + paused_in_teardown_s
        return cls(whole_s=end - start - paused, window_s=window_end - window_start,
                   startup_s=window_start - start - paused_in_startup_s, paused_s=paused)  # fmt: skip

    @classmethod
    def from_parts(cls, startup_s: float, window_s: float, teardown_s: float) -> Clocks:
        """From three durations timed one after the other."""
        return cls(whole_s=startup_s + window_s + teardown_s, window_s=window_s, startup_s=startup_s)

    @classmethod
    def outside(cls, whole_s: float, window_s: float) -> Clocks:
        """A call timed from outside (``whole_s``) around a window it reports (``window_s``): no split."""
        return cls(whole_s=whole_s, window_s=window_s)

    @property
    def teardown_s(self) -> float | None:
        return None if self.startup_s is None else max(0.0, self.whole_s - self.window_s - self.startup_s)

    def fields(self, count: int, rate: str = "episodes_per_s", digits: int | None = None) -> dict[str, Any]:
        """The row's clock fields: ``rate`` over the window and ``<rate>_whole`` over the whole run for ``count``
        episodes (or executions), rounded to ``digits`` when given, and the seconds of each part (to the ms). A rate
        is over the seconds the row holds, so that the row agrees with itself (a 0.4 s window's rounding to the ms
        would otherwise differ from its rate by 0.1%)."""

        def per_s(seconds: float) -> float:
            seconds = round(seconds, 3)
            value = count / seconds if seconds > 0 else 0.0
            return value if digits is None else round(value, digits)

        return {
            "whole_s": round(self.whole_s, 3),
            "window_s": round(self.window_s, 3),
            "startup_s": None if self.startup_s is None else round(self.startup_s, 3),
            "teardown_s": None if self.teardown_s is None else round(self.teardown_s, 3),
            "outside_window_s": round(self.whole_s - self.window_s, 3),
            "paused_s": round(self.paused_s, 3),
            f"{rate}_whole": per_s(self.whole_s),
            rate: per_s(self.window_s),
        }


def missing(rate: str = "episodes_per_s") -> dict[str, Any]:
    """The clock fields of a row that never opened its window (nothing ran): no seconds, rates 0."""
    out: dict[str, Any] = dict.fromkeys(("whole_s", "window_s", "startup_s", "teardown_s", "outside_window_s"))
    return {**out, "paused_s": 0.0, f"{rate}_whole": 0.0, rate: 0.0}


def cell(row: dict[str, Any]) -> str:
    """A table cell for a row's clocks: ``whole = start-up + window + teardown`` in seconds (``-`` without them)."""
    if row.get("whole_s") is None:
        return "-"
    if row.get("startup_s") is None:
        return f"{row['whole_s']:.1f} = {row['window_s']:.1f} + {row['outside_window_s']:.1f} outside"
    return f"{row['whole_s']:.1f} = {row['startup_s']:.1f} + {row['window_s']:.1f} + {row['teardown_s']:.1f}"


CELL_HEAD = "whole s = start-up + window + teardown"


def rollout_command(argv: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``aworld-gym rollout <argv>`` (this venv's) timed from outside: the part's fields and its records.

    The whole clock is the command, process start to exit; the window is the run's own ``wall_s`` (its summary):
    it leaves out the interpreter's start and imports, the probe env, and closing the envs and the engine. The part's ``episodes_per_s`` keeps its meaning in these JSONs, the
    command's rate from outside (= ``episodes_per_s_whole``); the window's rate is ``episodes_per_s_window``.
    """
    exe = str(Path(sys.executable).parent / "aworld-gym")
    with tempfile.TemporaryDirectory() as tmp:
        out, summary = Path(tmp) / "t.jsonl", Path(tmp) / "summary.json"
        t0 = now()
        p = subprocess.run([exe, "rollout", *argv, "--out", str(out), "--summary-json", str(summary), "--no-progress"],
                           capture_output=True, text=True, check=False)  # fmt: skip
        whole = now() - t0
        ok = p.returncode == 0 and out.exists()
        records = [json.loads(x) for x in out.read_text().splitlines()] if ok else []
        window = json.loads(summary.read_text())["wall_s"] if ok and summary.exists() else None
    timing = Clocks.outside(whole, window).fields(len(records)) if window is not None else missing()
    part = {**timing, "whole_s": round(whole, 3), "wall_s": whole, "episodes_per_s_window": timing["episodes_per_s"],
            "episodes_per_s": len(records) / whole, "returncode": p.returncode}  # fmt: skip
    part["episodes_per_s_whole"] = part["episodes_per_s"]
    return part, records
