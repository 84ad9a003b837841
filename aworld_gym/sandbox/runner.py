"""Run untrusted Python in a sandbox: bubblewrap namespaces + rlimits + a per-execution cgroup.

Every execution:

- runs in a fresh mount namespace that holds only the read-only Python installation and system libraries,
  its work folder (read-write, at ``/sandbox/work``) and the task's files (read-only, at ``/sandbox/files``);
- has no network at all (a new, empty network namespace: not even the host's loopback);
- runs in its own PID namespace, so a wall-clock timeout kills the whole tree, daemons and ``setsid``
  children included, and nothing outlives the call;
- has CPU-time, address-space, open-file, file-size and core limits (rlimits), and a process-count and total
  memory limit (cgroup ``pids``/``memory``);
- sees a scrubbed environment (no variable of the parent is passed) and runs as ``nobody`` in a user
  namespace with every capability dropped.

Where bubblewrap or cgroups are missing, the runner falls back to what it can enforce and warns loudly
(``SandboxWarning``), never silently.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Literal

from aworld_gym.base import scratch
from aworld_gym.base.errors import SandboxError
from aworld_gym.sandbox.cgroups import Cgroup
from aworld_gym.sandbox.host import (
    NOBODY,
    SETPRIV,
    base_mounts,
    bwrap_problem,
    cgroup_limiter,
    child_setup,
    clean_env,
    dirs_for,
    kill_tree,
    world_readable,
)
from aworld_gym.sandbox.results import ExecResult, Limits, outcome
from aworld_gym.sandbox.warm import DEFAULT_PRELOAD, WarmPath

__all__ = ["FILES_DIR", "MAIN", "WORK_DIR", "ExecResult", "Limits", "Sandbox", "SandboxWarning", "world_readable"]

logger = logging.getLogger(__name__)
SCRATCH_PREFIX = "aworld-sandbox-exec-"

WORK_DIR = "/sandbox/work"
FILES_DIR = "/sandbox/files"
MAIN = "/sandbox/main.py"
ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": WORK_DIR,
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONIOENCODING": "utf-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MPLBACKEND": "Agg",
}


class SandboxWarning(UserWarning):
    """The machine cannot provide part of the sandbox; the message says which part is not enforced."""


Isolation = Literal["auto", "bwrap", "none"]


class Sandbox:
    """Runs Python code under :class:`Limits` with the strongest isolation this machine provides.

    Args:
        limits: default limits (a call may shorten the wall-clock timeout).
        isolation: ``"bwrap"`` (required: raise if unavailable), ``"none"`` (rlimits only, loudly warned), or
            ``"auto"`` (bwrap when it works, else ``none`` with a warning).
        python: interpreter inside the sandbox (default: this one, with its installation read-only).
    """

    def __init__(
        self,
        limits: Limits | None = None,
        isolation: Isolation = "auto",
        python: str | None = None,
        warm: bool | None = None,
        preload: Sequence[str] = DEFAULT_PRELOAD,
        max_concurrent: int = 64,
        queue_timeout_s: float = 120.0,
    ) -> None:
        self.limits = limits or Limits()
        self.python = python or sys.executable
        self._cgroups = cgroup_limiter()
        self.isolation = self._choose(isolation)
        self._warm: WarmPath | None = None
        self._warm_wanted = warm
        if warm is not False and self.isolation == "bwrap":
            self._warm = WarmPath(
                self.python, ENV, tuple(preload), self._cgroups, max_concurrent, queue_timeout_s=queue_timeout_s
            )
        elif warm:
            raise SandboxError("the warm path needs the bubblewrap sandbox (isolation='bwrap')")
        self._scratch = scratch.make_dir(SCRATCH_PREFIX)
        self._counter = 0
        self._closed = False
        self._lock = threading.Lock()
        self.report = self._report()
        for problem in self.report["not_enforced"]:
            warnings.warn(f"aworld-gym sandbox: {problem}", SandboxWarning, stacklevel=2)
            logger.warning("sandbox: %s", problem)

    def _choose(self, isolation: Isolation) -> str:
        if isolation == "none":
            return "none"
        problem = bwrap_problem()
        if problem is None:
            return "bwrap"
        if isolation == "bwrap":
            raise SandboxError(f"bubblewrap sandbox unavailable: {problem} (install it: apt-get install bubblewrap)")
        return "none"

    def _report(self) -> dict[str, object]:
        missing = []
        if self.isolation != "bwrap":
            why = bwrap_problem() or "disabled by isolation='none'"
            missing += [
                f"NO filesystem isolation and NO network isolation ({why}); code can read the host's files and "
                "reach the network. Install bubblewrap (apt-get install bubblewrap).",
                "no PID namespace: children that leave the process group may outlive a timeout",
            ]
        if not self._cgroups.available:
            missing.append(
                f"process-count and total-memory limits are not enforced ({self._cgroups.reason}); "
                "only per-process rlimits apply"
            )
        return {
            "isolation": self.isolation,
            "cgroups": self._cgroups.version,
            "network": "none" if self.isolation == "bwrap" else "HOST NETWORK",
            "warm": self._warm is not None,
            "not_enforced": missing,
        }

    # ----- execution -----------------------------------------------------------------------------------
    def run(
        self,
        code: str,
        workdir: str | Path,
        files: Sequence[str | Path] = (),
        timeout_s: float | None = None,
    ) -> ExecResult:
        """Run ``code`` with ``workdir`` as its only writable folder; never raises for what the code does."""
        workdir = Path(workdir)
        if not workdir.is_dir():
            raise SandboxError(f"work folder {str(workdir)!r} does not exist")
        if "\x00" in code:
            return ExecResult("", "SyntaxError: source code cannot contain null bytes", 1)
        limits = self.limits
        if timeout_s is not None:
            limits = replace(limits, wall_seconds=max(0.1, min(float(timeout_s), limits.wall_seconds)))
        exec_dir = self._exec_dir()
        try:
            main = exec_dir / "main.py"
            main.write_text(code, encoding="utf-8", errors="surrogateescape")
            main.chmod(0o644)
            if self.isolation == "bwrap" and os.geteuid() == 0:
                os.chown(workdir, NOBODY, NOBODY)  # the sandbox user's only writable folder
            staged = self._stage_files([Path(f) for f in files], exec_dir)
            warm = self._warm_path()
            if warm is not None:
                return warm.run(main, exec_dir, workdir, staged, limits)
            return self._run(main, exec_dir, workdir, staged, limits)
        finally:
            shutil.rmtree(exec_dir, ignore_errors=True)

    def _exec_dir(self) -> Path:
        """A new folder for one execution's files, in this sandbox's work folder (made again if removed)."""
        with self._lock:
            if self._closed:  # a late caller (a daemon thread during exit) must not bring the folder back
                raise SandboxError("the sandbox is closed")
            self._counter += 1
            self._scratch, exec_dir = scratch.make_child(self._scratch, f"e{self._counter}", SCRATCH_PREFIX)
        return exec_dir

    @property
    def warm(self) -> bool:
        """Executions are forked from the warm zygote (False: a fresh sandboxed process each)."""
        return self._warm is not None

    def _warm_path(self) -> WarmPath | None:
        """The warm path, started on first use; where it cannot start, the cold path from then on (warned)."""
        warm = self._warm
        if warm is None:
            return None
        try:
            warm.start()
        except SandboxError as exc:
            if self._warm_wanted:
                raise
            self._warm = None
            self.report["warm"] = False
            message = f"aworld-gym sandbox: warm executions are unavailable ({exc}); each execution starts cold"
            warnings.warn(message, SandboxWarning, stacklevel=3)
            logger.warning("%s", message)
            return None
        return warm

    def _argv(self, main: Path, workdir: Path, files: list[Path], limits: Limits) -> list[str]:
        python = [self.python, "-I", "-X", "utf8"]
        if self.isolation != "bwrap":
            return [*python, str(main)]
        privileged = os.geteuid() == 0
        if privileged:
            # bwrap as root sets up the mounts, then setpriv drops to the host's `nobody` for good: a uid that
            # owns nothing, cannot write /proc/sys, and whose setuid files grant nothing.
            argv = ["bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        else:
            argv = ["bwrap", "--unshare-all"]  # an unprivileged user: a user namespace of its own uid
        argv += ["--die-with-parent", "--new-session", "--as-pid-1", "--hostname", "sandbox"]
        made: set[str] = set()
        argv += base_mounts(self.python, limits.tmp_bytes, made)
        argv += [*dirs_for(WORK_DIR, made), "--bind", str(workdir), WORK_DIR, "--ro-bind", str(main), MAIN]
        if files:
            argv += dirs_for(f"{FILES_DIR}/x", made)
        for f in files:
            argv += ["--ro-bind", str(f), f"{FILES_DIR}/{f.name}"]
        argv += [*clean_env(ENV), "--chdir", WORK_DIR, "--"]
        if privileged:
            argv += [SETPRIV, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--no-new-privs"]
            argv += ["--inh-caps=-all", "--bounding-set=-all", "--"]
        # A shell is PID 1 of the namespace (the kernel ignores default-action signals such as SIGXCPU for a
        # namespace's init); the code runs as its child, and when the shell exits everything else dies.
        return [*argv, "/bin/sh", "-c", '"$@"; exit $?', "sh", *python, MAIN]

    def _stage_files(self, files: list[Path], exec_dir: Path) -> list[Path]:
        """Task files the sandbox user may read: world-readable ones as they are, others copied (0644)."""
        staged = []
        for f in files:
            if not f.is_file():
                continue
            f = f.resolve()
            if self.isolation == "bwrap" and os.geteuid() == 0 and not world_readable(f):
                copy = exec_dir / "files" / f.name
                copy.parent.mkdir(exist_ok=True)
                shutil.copyfile(f, copy)
                copy.chmod(0o644)
                f = copy
            staged.append(f)
        return staged

    def _run(self, main: Path, exec_dir: Path, workdir: Path, files: list[Path], limits: Limits) -> ExecResult:
        cgroup: Cgroup | None = None
        if self._cgroups.available:
            try:
                cgroup = self._cgroups.create(limits.max_processes, limits.memory_bytes)
            except OSError as exc:
                logger.warning("sandbox: could not create a cgroup (%s); limits are rlimits only", exc)
        out_path, err_path = exec_dir / "stdout", exec_dir / "stderr"
        env = dict(ENV) if self.isolation == "bwrap" else {**ENV, "HOME": str(workdir)}
        start = time.perf_counter()
        timed_out = False
        try:
            with open(out_path, "wb") as out, open(err_path, "wb") as err:
                try:
                    proc = subprocess.Popen(
                        self._argv(main, workdir, files, limits),
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=err,
                        cwd=str(workdir),
                        env=env,
                        start_new_session=True,
                        close_fds=True,
                        preexec_fn=child_setup(limits, cgroup.procs_files if cgroup else []),
                    )
                except OSError as exc:
                    raise SandboxError(f"could not start the sandboxed process: {exc}") from exc
                try:
                    proc.wait(timeout=limits.wall_seconds)
                except subprocess.TimeoutExpired:
                    timed_out = True
                    kill_tree(proc, cgroup)
                    proc.wait()
        finally:
            if cgroup is not None:
                cgroup.remove()  # nothing of this execution survives it
        duration = time.perf_counter() - start
        return outcome(proc.returncode, timed_out, duration, exec_dir, limits, bwrap=self.isolation == "bwrap")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            folder = self._scratch
        if self._warm is not None:
            self._warm.close()
        shutil.rmtree(folder, ignore_errors=True)


WARM_CHOICES = ("auto", "on", "off")


def warm_setting(choice: str) -> bool | None:
    """``Sandbox(warm=...)`` for a command-line or env option: ``"auto"`` (None), ``"on"`` (True), ``"off"``."""
    if choice not in WARM_CHOICES:
        raise SandboxError(f"warm must be one of {', '.join(WARM_CHOICES)}, not {choice!r}")
    return {"auto": None, "on": True, "off": False}[choice]


_shared: dict[tuple[Limits, str, str], Sandbox] = {}
_shared_lock = threading.Lock()


def shared_sandbox(limits: Limits | None = None, isolation: Isolation = "auto", warm: str = "auto") -> Sandbox:
    """One process-wide :class:`Sandbox` per (limits, isolation, warm), closed at exit: envs that run code in this
    process share its warm zygote instead of starting one each."""
    key = (limits or Limits(), isolation, warm)
    with _shared_lock:
        sandbox = _shared.get(key)
        if sandbox is None:
            sandbox = _shared[key] = Sandbox(key[0], isolation=isolation, warm=warm_setting(warm))
            if len(_shared) == 1:
                atexit.register(_close_shared)
        return sandbox


def _close_shared() -> None:
    with _shared_lock:
        for sandbox in _shared.values():
            sandbox.close()
        _shared.clear()
