"""Every process a stdio server started, found and killed when its session ends (Linux; elsewhere a no-op).

Killing the server's process group misses a helper that moved to a group of its own and a grandchild that called
``setsid``; once the server has exited, its orphans belong to init and nothing links them to it. So:

- the server is started through a shim (:func:`launch_argv`) that makes it a *child subreaper*
  (``prctl(PR_SET_CHILD_SUBREAPER)``, kept across ``execve``) and then execs the server: every orphaned descendant is
  re-parented to the server instead of init, and stays in its ``/proc`` tree while the server lives;
- :class:`ProcessTree` snapshots that tree now and then, and at stop before the server's input is closed, each pid
  with its start time (a recycled pid is never killed);
- after the server has exited it SIGKILLs what is left: the snapshot, every process still in the server's session or
  process group (a setsid-free helper is found even when the server crashed before any snapshot saw it) and every
  process holding the server's end of our stdin or stdout pipe (``/proc/*/fd``), and every process whose environment
  holds the server's own marker (:data:`MARKER`, set at launch and inherited), which finds a setsid grandchild of a
  server that crashed before a snapshot saw it.

A cgroup per server would also catch a double-forked ``setsid`` daemon that closed our pipes, cleared its environment
and was started and orphaned between two snapshots of a server that then crashed. It is not used: it needs root and a writable, delegated
cgroup v2 hierarchy (many machines, this project's CI among them, have v1 or a hybrid mount), every server would cost a
cgroup to create and remove, and a driver killed with SIGKILL would leave them for a sweep. The shim works for every
user.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")
_SHIM = """import os, sys
try:
    import ctypes
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans stay in our tree
except Exception:
    pass
try:
    os.execvp(sys.argv[1], sys.argv[1:])
except OSError as exc:
    sys.stderr.write(f"cannot run {sys.argv[1]!r}: {exc.strerror}\\n")
    os._exit(127)
"""
MARKER = "AWORLD_GYM_MCP_SERVER"  # an environment variable naming the server a process descends from
SUPPORTED = sys.platform.startswith("linux") and _PROC.is_dir() and bool(sys.executable)


def launch_argv(argv: list[str]) -> list[str]:
    """``argv`` run through the subreaper shim (unchanged where the shim cannot work)."""
    if not SUPPORTED:
        return argv
    return [sys.executable, "-I", "-S", "-c", _SHIM, *argv]


@dataclass(frozen=True)
class Proc:
    """One process as ``/proc/PID/stat`` describes it (``start``: its start time in clock ticks since boot)."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    start: int


def stat(pid: int) -> Proc | None:
    """The process ``pid``, or None if there is none (or it is a zombie: it holds nothing and runs nothing)."""
    try:
        text = (_PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    fields = text[text.rfind(b")") + 2 :].split()
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None
    return Proc(pid, int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]))


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir(_PROC) if name.isdigit()]
    except OSError:
        return []


def all_procs() -> list[Proc]:
    """Every live process this user can see."""
    return [p for p in map(stat, _pids()) if p is not None]


def _children(pid: int) -> list[int] | None:
    """The children of ``pid`` (all its threads'), or None where the kernel has no ``children`` files."""
    out: list[int] = []
    try:
        tasks = os.listdir(_PROC / str(pid) / "task")
    except OSError:
        return []
    for tid in tasks:
        try:
            out += [int(x) for x in (_PROC / str(pid) / "task" / tid / "children").read_text().split()]
        except FileNotFoundError:
            if not (_PROC / str(pid) / "task" / tid).exists():
                continue
            return None
        except (OSError, ValueError):
            continue
    return out


def descendants(pid: int, full_scan: bool = True) -> dict[int, int] | None:
    """Every live descendant of ``pid`` as {pid: start time}. Without ``children`` files it scans all of /proc,
    unless ``full_scan`` is False (then None)."""
    found: dict[int, int] = {}
    todo, seen = [pid], {pid}
    while todo:
        kids = _children(todo.pop())
        if kids is None:
            break
        for kid in kids:
            info = stat(kid)
            if kid not in seen and info is not None:
                seen.add(kid)
                found[kid] = info.start
                todo.append(kid)
    else:
        return found
    if not full_scan:
        return None
    by_parent: dict[int, list[Proc]] = {}
    for p in all_procs():
        by_parent.setdefault(p.ppid, []).append(p)
    found, todo = {}, [pid]
    while todo:
        for p in by_parent.get(todo.pop(), []):
            if p.pid not in found:
                found[p.pid] = p.start
                todo.append(p.pid)
    return found


def _tree_of(pid: int, procs: Iterable[Proc]) -> set[int]:
    """``pid`` and its descendants among ``procs`` (by parent pid)."""
    by_parent: dict[int, list[int]] = {}
    for p in procs:
        by_parent.setdefault(p.ppid, []).append(p.pid)
    tree, todo = {pid}, [pid]
    while todo:
        for kid in by_parent.get(todo.pop(), []):
            if kid not in tree:
                tree.add(kid)
                todo.append(kid)
    return tree


def pipe_inode(fd: int) -> int | None:
    """The inode of the pipe ``fd`` is an end of."""
    with contextlib.suppress(OSError):
        return os.fstat(fd).st_ino
    return None


def pipe_holders(ends: dict[int, int], pids: Iterable[int] | None = None) -> dict[int, int]:
    """Processes (not this one; of ``pids``, default all) holding a pipe end: ``ends`` maps a pipe's inode to the
    access mode of the end wanted (``os.O_RDONLY`` for the server's stdin, ``os.O_WRONLY`` for its stdout); returns
    {pid: start time}."""
    links = {f"pipe:[{inode}]": mode for inode, mode in ends.items()}
    found: dict[int, int] = {}
    me = os.getpid()
    for pid in _pids() if pids is None else pids:
        if pid == me:
            continue
        fd_dir = _PROC / str(pid) / "fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                mode = links.get(os.readlink(fd_dir / fd))
                if mode is None or _access_mode(pid, fd) != mode:
                    continue
            except OSError:
                continue
            info = stat(pid)
            if info is not None:
                found[pid] = info.start
            break
    return found


def marked(marker: bytes, pids: Iterable[int] | None = None) -> dict[int, int]:
    """Processes (not this one; of ``pids``, default all) whose environment holds ``marker`` (``NAME=value``);
    returns {pid: start time}."""
    found: dict[int, int] = {}
    me = os.getpid()
    for pid in _pids() if pids is None else pids:
        if pid == me:
            continue
        try:
            env = (_PROC / str(pid) / "environ").read_bytes()
        except OSError:
            continue
        if marker in env.split(b"\0"):
            info = stat(pid)
            if info is not None:
                found[pid] = info.start
    return found


def _access_mode(pid: int, fd: str) -> int | None:
    for line in (_PROC / str(pid) / "fdinfo" / fd).read_text().splitlines():
        if line.startswith("flags:"):
            return int(line.split()[1], 8) & os.O_ACCMODE
    return None


def kill(procs: dict[int, int]) -> int:
    """SIGKILL each {pid: start time} still running with that start time; returns how many were signalled."""
    killed = 0
    for pid, start in procs.items():
        if pid <= 1 or pid in (os.getpid(), os.getppid()):
            continue
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # gone, or no pidfd here: check and signal by pid (a narrow window for reuse)
            info = stat(pid)
            if info is not None and info.start == start:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
            continue
        try:  # the pidfd pins the process: checked, then signalled, with no window for reuse
            info = stat(pid)
            if info is not None and info.start == start:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
                killed += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return killed


class ProcessTree:
    """What a stdio server (started through the shim, in a new session) left behind, and the kill of all of it."""

    def __init__(self, pid: int, pipes: dict[int, int], marker: str = "") -> None:
        """``pid``: the server (session leader); ``pipes``: {pipe inode: the server's access mode} of stdin/stdout;
        ``marker``: the value of :data:`MARKER` in the server's environment."""
        self.pid = pid
        self.pipes = pipes
        self.marker = f"{MARKER}={marker}".encode() if marker else b""
        leader = stat(pid) if SUPPORTED else None
        self.start = leader.start if leader is not None else None
        self.leads = leader is not None and leader.sid == pid  # its session and group are its own: swept at the end
        self.known: dict[int, int] = {}
        self.cheap = True  # whether a snapshot is a walk of children files (else, a scan of all of /proc)

    def snapshot(self, periodic: bool = False) -> None:
        """Remember the server's live descendants (``periodic``: only where that is cheap). While the server lives,
        the subreaper keeps every live descendant in its tree, so the newest snapshot replaces the last."""
        if self.start is None or (periodic and not self.cheap) or not self._leader_alive():
            return
        found = descendants(self.pid, full_scan=not periodic)
        if found is None:
            self.cheap = False
            return
        self.known = found

    def _leader_alive(self) -> bool:
        info = stat(self.pid)
        return info is not None and info.start == self.start

    def kill_rest(self) -> int:
        """SIGKILL everything the server left (call once it has exited); returns how many were signalled."""
        if self.start is None:
            return 0
        targets = dict(self.known)
        leader = stat(self.pid)
        recycled = leader is not None and leader.start != self.start
        procs = all_procs()
        for p in procs:  # the session and the group keep the server's pid while a member lives
            if self.leads and not recycled and (p.sid == self.pid or p.pgid == self.pid):
                targets[p.pid] = p.start
        # What escaped the tree is an orphan started after the server and outside our own process tree (the server
        # has exited: its orphans went to init). Only those are read for pipes and markers: reading every process's
        # descriptors and environment at every stop cost ~100 ms a stop on a busy machine, under the GIL.
        ours = _tree_of(os.getpid(), procs)
        loose = [p.pid for p in procs if p.start >= self.start and p.pid not in ours]
        if self.pipes:
            targets.update(pipe_holders(self.pipes, loose))
        if self.marker:
            targets.update(marked(self.marker, loose))
        return kill(targets)
