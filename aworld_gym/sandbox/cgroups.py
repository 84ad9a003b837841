"""Per-execution cgroups (v1 or v2) for a process-count and a total-memory limit, and a kill-all.

RLIMIT_NPROC is not enforced for root and counts every process of a user, so the process-count limit of a
sandboxed execution comes from the ``pids`` controller. Where no writable cgroup hierarchy exists, the
limiter reports itself unavailable and the sandbox says so in a loud warning.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from pathlib import Path

from aworld_gym.base.scratch import alive

_ROOT = Path("/sys/fs/cgroup")
_PARENT = "aworld-gym-sandbox"


class Cgroup:
    """One cgroup (in each needed v1 hierarchy, or one v2 node) for one execution."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def pids(self) -> set[int]:
        out: set[int] = set()
        for d in self.dirs:
            with contextlib.suppress(OSError):
                out.update(int(x) for x in (d / "cgroup.procs").read_text().split())
        return out

    def kill_all(self) -> None:
        """SIGKILL every process in the cgroup (v2: cgroup.kill; v1: freeze-free repeated kill)."""
        for d in self.dirs:
            kill = d / "cgroup.kill"
            if kill.exists():
                with contextlib.suppress(OSError):
                    kill.write_text("1")
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def peak_memory(self) -> int | None:
        for d in self.dirs:
            for name in ("memory.max_usage_in_bytes", "memory.peak"):
                with contextlib.suppress(OSError, ValueError):
                    return int((d / name).read_text())
        return None

    def remove(self) -> None:
        self.kill_all()
        for d in self.dirs:
            for _ in range(20):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


class CgroupLimiter:
    """Creates cgroups with ``pids.max`` and a memory limit, v1 or v2, if this machine lets us."""

    def __init__(self) -> None:
        self.version: int | None = None
        self.reason = ""
        self._base: list[Path] = []
        self._probe()

    @property
    def available(self) -> bool:
        return self.version is not None

    def _probe(self) -> None:
        v1 = [_ROOT / "pids", _ROOT / "memory"]
        if all((p / "cgroup.procs").exists() for p in v1):
            try:
                for p in v1:
                    (p / _PARENT).mkdir(exist_ok=True)
                self._base = [p / _PARENT for p in v1]
                self.version = 1
                return
            except OSError as exc:
                self.reason = f"cgroup v1 is not writable ({exc.strerror})"
        v2 = _ROOT if (_ROOT / "cgroup.controllers").exists() else None
        if v2 is not None:
            try:
                base = v2 / _PARENT
                base.mkdir(exist_ok=True)
                controllers = (v2 / "cgroup.controllers").read_text().split()
                if not {"pids", "memory"} <= set(controllers):
                    raise OSError(0, "the pids and memory controllers are not available")
                (v2 / "cgroup.subtree_control").write_text("+pids +memory")
                (base / "cgroup.subtree_control").write_text("+pids +memory")
                self._base = [base]
                self.version = 2
                return
            except OSError as exc:
                self.reason = f"cgroup v2 is not writable ({exc.strerror})"
        self.reason = self.reason or "no cgroup hierarchy is mounted"

    @property
    def bases(self) -> list[Path]:
        """The folders per-execution cgroups are made in (v1: one per hierarchy, ``pids`` first)."""
        return list(self._base)

    def sweep(self, prefix: str) -> int:
        """Kill and remove every cgroup whose name starts with ``prefix`` (those a dead fork server left)."""
        names = {d.name for base in self._base if base.is_dir() for d in base.iterdir() if d.name.startswith(prefix)}
        for name in names:
            Cgroup([base / name for base in self._base if (base / name).is_dir()]).remove()
        return len(names)

    def sweep_orphans(self) -> int:
        """Remove the execution cgroups (``exec-<pid>-...``) of processes that no longer exist."""
        dead: set[str] = set()
        for base in self._base:
            for d in base.iterdir() if base.is_dir() else ():
                parts = d.name.split("-")
                if len(parts) > 2 and parts[0] == "exec" and parts[1].isdigit() and not alive(int(parts[1])):
                    dead.add(f"exec-{parts[1]}-")
        return sum(self.sweep(prefix) for prefix in dead)

    def create(self, max_pids: int, memory_bytes: int) -> Cgroup:
        name = f"exec-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        dirs = []
        for base in self._base:
            d = base / name
            d.mkdir()
            dirs.append(d)
        if self.version == 1:
            (dirs[0] / "pids.max").write_text(str(max_pids))
            (dirs[1] / "memory.limit_in_bytes").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):
                (dirs[1] / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
        else:
            (dirs[0] / "pids.max").write_text(str(max_pids))
            (dirs[0] / "memory.max").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):
                (dirs[0] / "memory.swap.max").write_text("0")
        return Cgroup(dirs)
