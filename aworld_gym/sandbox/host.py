"""What the sandbox needs from the host: killing a process tree, the child's set-up (rlimits, cgroup), file
checks, where Python lives, and whether bubblewrap works here."""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from aworld_gym.sandbox.cgroups import Cgroup, CgroupLimiter

if TYPE_CHECKING:
    from aworld_gym.sandbox.results import Limits

NOBODY = 65534  # the host's unprivileged user, as which sandboxed code runs
SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc/alternatives", "/etc/ld.so.cache",
                "/etc/localtime", "/etc/ssl/certs")  # fmt: skip


def kill_tree(proc: subprocess.Popen[bytes], cgroup: Cgroup | None) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if cgroup is not None:
        cgroup.kill_all()


def child_setup(limits: Limits, procs_files: list[str]):
    """preexec_fn: join the execution's cgroup, then apply rlimits (only async-signal-safe-ish calls)."""
    rlimits = [(_RLIMITS[name], value) for name, value in rlimit_values(limits).items()]

    def setup() -> None:
        pid = str(os.getpid()).encode()
        for path in procs_files:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        for which, value in rlimits:
            resource.setrlimit(which, value)

    return setup


def base_mounts(python: str, tmp_bytes: int, made: set[str]) -> list[str]:
    """bubblewrap arguments for what every sandbox sees: the system folders and the Python installation
    read-only, a fresh /proc and /dev, and a private /tmp of ``tmp_bytes``."""
    argv: list[str] = []
    for d in SYSTEM_DIRS:
        argv += ["--ro-bind-try", d, d]
    # /proc, /dev and the private /tmp first: a Python installation under /tmp is then bound on top of it.
    argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(tmp_bytes), "--tmpfs", "/tmp"]
    for prefix in python_roots(python):
        argv += dirs_for(prefix, made)
        argv += ["--ro-bind", prefix, prefix]
    return argv


def clean_env(env: dict[str, str]) -> list[str]:
    """bubblewrap arguments for an environment of exactly ``env``."""
    argv = ["--clearenv"]
    for k, v in env.items():
        argv += ["--setenv", k, v]
    return argv


def rlimit_values(limits: Limits) -> dict[str, tuple[int, int]]:
    """The rlimits of an execution, by the names the zygote knows."""
    cpu = max(1, int(limits.cpu_seconds))
    return {
        "cpu": (cpu, cpu + 1),
        "as": (limits.memory_bytes, limits.memory_bytes),
        "nofile": (limits.max_open_files, limits.max_open_files),
        "fsize": (limits.max_file_bytes, limits.max_file_bytes),
        "core": (0, 0),
    }


_RLIMITS = {"cpu": resource.RLIMIT_CPU, "as": resource.RLIMIT_AS, "nofile": resource.RLIMIT_NOFILE,
            "fsize": resource.RLIMIT_FSIZE, "core": resource.RLIMIT_CORE}  # fmt: skip


def dirs_for(path: str, made: set[str]) -> list[str]:
    """``--perms 0755 --dir`` for each missing ancestor of ``path`` (bwrap would make them 0700 as root)."""
    out: list[str] = []
    parts = Path(path).parent.parts
    for i in range(2, len(parts) + 1):
        d = "/" + "/".join(parts[1:i])
        if d in made or d in SYSTEM_DIRS or d in ("/usr", "/proc", "/dev", "/tmp"):
            continue
        made.add(d)
        out += ["--perms", "0755", "--dir", d]
    return out


def world_readable(path: Path) -> bool:
    """The file and every folder above it are readable/traversable by others."""
    try:
        if not path.stat().st_mode & 0o004:
            return False
        return all(p.stat().st_mode & 0o001 for p in path.parents)
    except OSError:
        return False


def python_roots(python: str) -> list[str]:
    """Folders that make up the Python installation (base prefix, venv prefix, the executable's folder)."""
    roots = {sys.base_prefix, sys.prefix, str(Path(python).resolve().parent.parent)}
    if Path(python).parent.parent.exists():
        roots.add(str(Path(python).parent.parent))
    return sorted(r for r in roots if r and Path(r).exists() and r not in ("/", "/usr"))


_probe_lock = threading.Lock()
_probe_result: dict[str, str | None] = {}
_limiter: CgroupLimiter | None = None


def cgroup_limiter() -> CgroupLimiter:
    global _limiter
    with _probe_lock:
        if _limiter is None:
            _limiter = CgroupLimiter()
        return _limiter


def bwrap_problem() -> str | None:
    """None when bubblewrap can create the namespaces we need here; else why not (cached)."""
    with _probe_lock:
        if "bwrap" in _probe_result:
            return _probe_result["bwrap"]
        exe = shutil.which("bwrap")
        if exe is None:
            problem: str | None = "bwrap is not installed"
        else:
            try:
                probe = [exe, "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
                if os.geteuid() == 0:
                    probe = [*probe[:1], "--unshare-pid", "--unshare-net", "--as-pid-1", *probe[1:], "--",
                             SETPRIV, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--no-new-privs",
                             "true"]  # fmt: skip
                else:
                    probe = [*probe[:1], "--unshare-all", *probe[1:], "--", "true"]
                cp = subprocess.run(probe, capture_output=True, timeout=20, env={})
                err = cp.stderr.decode(errors="replace").strip()
                problem = None if cp.returncode == 0 else f"bwrap cannot create namespaces here: {err}"
            except (OSError, subprocess.TimeoutExpired) as exc:
                problem = f"bwrap failed: {exc}"
        _probe_result["bwrap"] = problem
        return problem
