"""A local server process shared by every env of a driver process: refcounted, restarted on the same port.

Used for our Python-execution MCP server, the Playwright MCP server (one browser for all envs, a private
browser context per MCP session) and the MiniWoB++ page server. The process runs in its own process group;
stopping it ends the whole group and every descendant (a browser launched by the server included).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from aworld_gym.base import scratch
from aworld_gym.base.errors import ServerError


class SharedServer:
    """A server process listening on 127.0.0.1, started on first :meth:`acquire`, stopped at the last release.

    Subclasses say how to start it (:meth:`command`) and where it answers (:meth:`url_for`).

    Args:
        name: used in messages and the log file's name.
        env: extra environment variables of the process.
        start_timeout: seconds the process gets to open its port.
    """

    def __init__(self, name: str, env: Mapping[str, str] | None = None, start_timeout: float = 60.0) -> None:
        self.name = name
        self.extra_env = dict(env or {})
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.url: str | None = None
        self.port: int | None = None
        self.refs = 0
        self.starts = 0
        self._lock = threading.Lock()
        self._log = scratch.make_file(f"aworld-{name}-", ".log")
        with _registry_lock:
            _live.add(self)

    # ----- what subclasses define -------------------------------------------------------------------------
    def command(self, port: int) -> Sequence[str]:
        raise NotImplementedError

    def url_for(self, port: int) -> str:
        return f"http://127.0.0.1:{port}/mcp"

    def cwd(self) -> str | None:
        return None

    def ready(self, port: int, proc: subprocess.Popen[bytes]) -> bool:
        """Whether the started process answers (default: it, or a process below it, listens on its TCP port)."""
        return wait_port(port, proc, self.start_timeout)

    # ----- refcounting ------------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def acquire(self) -> str:
        """Take a reference; start (or restart) the server if needed; return its URL."""
        with self._lock:
            self.refs += 1
            try:
                return self._ensure()
            except BaseException:
                self.refs -= 1
                raise

    def ensure_alive(self) -> str:
        """Restart the server if it died; return its URL."""
        with self._lock:
            return self._ensure()

    def release(self) -> None:
        with self._lock:
            self.refs = max(0, self.refs - 1)
            if self.refs == 0:
                self._stop()
                self.port = None  # nobody holds the URL: the next start may take any free port
                self._idle()

    def _idle(self) -> None:
        """Stopped with nobody holding it: what it kept between starts goes too (its log file and descriptor; a
        subclass's folders), made again at the next start. A process that makes and closes envs again and again,
        each time on a new task site, kept one of each per cycle (the server is per site, the site's port new)."""
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)

    def shutdown(self) -> None:
        with self._lock:
            self.refs = 0
            self._stop()
            self._idle()
        with _registry_lock:
            _live.discard(self)

    @property
    def pids(self) -> list[int]:
        """The server process and its descendants (e.g. the browser it launched)."""
        return descendants(self.proc.pid) if self.alive and self.proc is not None else []

    # ----- internals --------------------------------------------------------------------------------------
    def _ensure(self) -> str:
        if self.alive and self.url:
            return self.url
        self._stop()
        if self._log.closed:  # idle since the last release
            self._log = scratch.make_file(f"aworld-{self.name}-", ".log")
        last = ""
        # A restart keeps the port: every env's session points at this URL.
        ports = [self.port] * 5 if self.port else [free_port() for _ in range(3)]
        for port in ports:
            self.proc = subprocess.Popen(
                list(self.command(port)),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=self._log,
                start_new_session=True,
                cwd=self.cwd(),
                env={**os.environ, **self.extra_env},
            )
            if self.ready(port, self.proc):
                self.port = port
                self.url = self.url_for(port)
                self.starts += 1
                return self.url
            last = self._tail()
            if self.proc.poll() is not None and listening_sockets(port):  # ours exited, and someone listens there
                last += f"\n(port {port} is held by another process)"
            self._stop()
            time.sleep(0.5)
        raise ServerError(f"the {self.name} server did not start; its log:\n{last}")

    def _tail(self) -> str:
        with contextlib.suppress(OSError):
            return Path(self._log.name).read_text(errors="replace")[-2000:]
        return ""

    def _stop(self) -> None:
        proc, self.proc, self.url = self.proc, None, None  # the port is kept for a restart
        if proc is None:
            return
        family = descendants(proc.pid) if proc.poll() is None else []
        stop_group(proc, family)


def stop_group(proc: subprocess.Popen[bytes], family: Sequence[int] = (), grace: float = 10.0) -> None:
    """SIGTERM the process group of ``proc`` (started with ``start_new_session``), then SIGKILL what is left,
    including ``family`` members that left the group (a browser may start its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + grace
    for pid in family:
        while _exists(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if _exists(pid):
                os.kill(pid, signal.SIGKILL)


def _exists(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (Linux ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(children.get(p, []))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait until ``proc`` (or a process below it) listens on TCP ``port``; False if it exits or time runs out.

    A port that answers is not enough: between :func:`free_port` and the server's bind, another process (a
    parallel test worker's server, another driver's) may take the port, and then it answers at once while ours
    is still importing and will exit on "address in use". Taken as ready, every env would talk to that stranger
    (and send it our bearer token). So the listening socket must be one of our process tree's (:func:`listens`).
    Where ``/proc`` cannot tell (not Linux, an empty ``/proc/net/tcp``, unreadable fds), a connection that stays up
    while ``proc`` still runs 0.1 s later is the best check there is."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        mine = listens(port, proc.pid)
        if mine is None and _answers(port):  # nobody in /proc's table, yet the port answers: look again
            mine = listens(port, proc.pid)  # (a listener may have bound between the two looks)
            if mine is None:  # /proc cannot tell: the port answers and our process still runs 0.1 s later
                time.sleep(0.1)
                return proc.poll() is None
        if mine:
            return True
        time.sleep(0.05)
    return False


def _answers(port: int) -> bool:
    """Whether something accepts a TCP connection on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def listens(port: int, pid: int) -> bool | None:
    """Whether ``pid`` or a process below it holds the socket listening on 127.0.0.1:``port``: False when another
    process does, None when ``/proc`` cannot tell (no table, no listener in it, ``pid``'s fds unreadable)."""
    links = listening_sockets(port)
    if not links:
        return None
    if not os.access(f"/proc/{pid}/fd", os.R_OK | os.X_OK):
        return None
    return owns_socket(descendants(pid), links)


# The local addresses a server reachable on 127.0.0.1 listens on: 0.0.0.0, 127.0.0.1, ::, ::ffff:127.0.0.1.
_LOOPBACK = {"00000000", "0100007F", "0" * 32, "0000000000000000FFFF00000100007F"}


def listening_sockets(port: int) -> set[str] | None:
    """The TCP sockets listening where 127.0.0.1:``port`` reaches (IPv4 and IPv6 tables), as the ``socket:[inode]``
    texts of their file descriptors' links; None where ``/proc/net/tcp`` cannot be read (not Linux)."""
    found: set[str] = set()
    tables = 0
    needle = f":{port:04X} "
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            text = Path(table).read_text()
        except OSError:
            continue
        tables += 1
        for line in text.splitlines()[1:]:
            if needle not in line:  # most lines (other ports) are skipped before they are split
                continue
            fields = line.split()  # sl, local_address (hex ip:port), rem_address, st (0A: LISTEN), ..., inode
            address, _, hex_port = fields[1].partition(":")
            if len(fields) > 9 and fields[3] == "0A" and int(hex_port, 16) == port and address in _LOOPBACK:
                found.add(f"socket:[{fields[9]}]")
    return found if tables else None


def owns_socket(pids: Sequence[int], links: set[str]) -> bool:
    """Whether one of ``pids`` holds a file descriptor of one of the sockets ``links`` (``socket:[inode]``)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.scandir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(fd.path) in links:
                        return True
    return False


_live: set[SharedServer] = set()
_registry_lock = threading.Lock()
_instances: dict[Hashable, SharedServer] = {}
_instances_lock = threading.Lock()
S = TypeVar("S", bound=SharedServer)


def shared_instance(key: Hashable, factory: Callable[[], S]) -> S:
    """The process-wide server for ``key`` (made by ``factory`` on first use)."""
    with _instances_lock:
        if key not in _instances:
            _instances[key] = factory()
        return _instances[key]  # type: ignore[return-value]


@atexit.register
def _shutdown_all() -> None:
    with _registry_lock:
        servers = list(_live)
    for server in servers:
        server.shutdown()
