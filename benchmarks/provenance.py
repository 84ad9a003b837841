"""What every benchmark JSON says about where its numbers come from: the commit (and whether the tree had changes),
when, the machine, and the load average when the benchmark started and ended (``quiet``: the 1-minute load at the
start at most 1.5; the end's includes the benchmark's own work), so a figure can be traced to the code that measured
it and a busy machine shows."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
QUIET_LOAD = 1.5
_START = os.getloadavg()  # imported at a benchmark's start


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT)
    return out.stdout.strip() if out.returncode == 0 else ""


def stamp(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with a ``provenance`` entry (see the module's docstring)."""
    end = os.getloadavg()
    result["provenance"] = {
        "git": _git("rev-parse", "--short", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "load_avg_start": list(_START),
        "load_avg_end": list(end),
        "quiet": _START[0] <= QUIET_LOAD,
    }
    return result
