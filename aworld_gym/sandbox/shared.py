"""One Python-execution server process per driver process, shared by every env in it (refcounted)."""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from aworld_gym.core.errors import ServerError
from aworld_gym.mcp.serving import TOKEN_ENV


class SharedPythonServer:
    """Starts ``python -m aworld_gym.sandbox.server`` over streamable HTTP on 127.0.0.1 on first use."""

    def __init__(
        self,
        isolation: str = "auto",
        wall_seconds: float = 10.0,
        memory_mb: int = 1024,
        file_roots: tuple[str, ...] = (),
    ) -> None:
        self.args = ["--isolation", isolation, "--wall-seconds", str(wall_seconds), "--memory-mb", str(memory_mb)]
        self.token = secrets.token_urlsafe(24)  # only this process's envs may use the server
        for root in file_roots:
            self.args += ["--files-root", root]
        self.proc: subprocess.Popen[bytes] | None = None
        self.url: str | None = None
        self.port: int | None = None
        self.refs = 0
        self.starts = 0
        self._lock = threading.Lock()
        self._log = tempfile.NamedTemporaryFile(prefix="aworld-python-server-", suffix=".log", delete=False)  # noqa: SIM115

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def acquire(self) -> str:
        """Take a reference; start (or restart) the server if needed; return its URL."""
        with self._lock:
            self.refs += 1
            return self._ensure()

    def ensure_alive(self) -> str:
        """Restart the server if it died; return its URL."""
        with self._lock:
            return self._ensure()

    def release(self) -> None:
        with self._lock:
            self.refs = max(0, self.refs - 1)
            if self.refs == 0:
                self._stop()

    def _ensure(self) -> str:
        if self.alive and self.url:
            return self.url
        self._stop()
        last = ""
        # A restart keeps the port: every env's session points at this URL.
        ports = [self.port] * 5 if self.port else [_free_port() for _ in range(3)]
        for port in ports:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "aworld_gym.sandbox.server",
                    "--transport",
                    "streamable-http",
                    "--port",
                    str(port),
                    *self.args,
                ],
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=self._log,
                start_new_session=True,
                env={**os.environ, TOKEN_ENV: self.token},
            )
            if _wait_port(port, self.proc, 60.0):
                self.port = port
                self.url = f"http://127.0.0.1:{port}/mcp"
                self.starts += 1
                return self.url
            last = self._tail()
            self._stop()
            time.sleep(0.5)
        raise ServerError(f"the Python-execution server did not start; its log:\n{last}")

    def _tail(self) -> str:
        with contextlib.suppress(OSError):
            return Path(self._log.name).read_text(errors="replace")[-2000:]
        return ""

    def _stop(self) -> None:
        proc, self.proc, self.url = self.proc, None, None  # the port is kept for a restart
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def shutdown(self) -> None:
        with self._lock:
            self.refs = 0
            self._stop()
            self._log.close()
            Path(self._log.name).unlink(missing_ok=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
        time.sleep(0.05)
    return False


_servers: dict[tuple[str, ...], SharedPythonServer] = {}
_lock = threading.Lock()


def shared_server(
    isolation: str = "auto", wall_seconds: float = 10.0, memory_mb: int = 1024, file_roots: tuple[str, ...] = ()
) -> SharedPythonServer:
    """The process-wide server for these settings."""
    key = (isolation, str(wall_seconds), str(memory_mb), *file_roots)
    with _lock:
        if key not in _servers:
            _servers[key] = SharedPythonServer(isolation, wall_seconds, memory_mb, file_roots)
        return _servers[key]


def python_server_entry(
    server: str, isolation: str, exec_timeout_s: float, memory_mb: int, file_roots: tuple[str, ...] = ()
) -> tuple[Any, SharedPythonServer | None]:
    """The ``mcpServers`` entry of the Python-execution server an env asked for, and the shared handle to release.

    Args:
        server: ``"shared"`` (one server process per driver process), ``"inprocess"``, or an http(s) URL.
        isolation, exec_timeout_s, memory_mb: sandbox settings (for ``shared`` and ``inprocess``).
        file_roots: folders whose files (the task's attachments) the server may hand in even when they are not
            world-readable.
    """
    from aworld_gym.core.errors import ConfigError

    if server == "shared":
        shared = shared_server(isolation, exec_timeout_s, memory_mb, file_roots)
        entry = {"type": "streamable-http", "url": shared.acquire(), "share_session": True,
                 "headers": {"Authorization": f"Bearer {shared.token}"}}  # fmt: skip
        return entry, shared
    if server == "inprocess":
        from aworld_gym.sandbox.runner import Limits, Sandbox
        from aworld_gym.sandbox.server import build_server

        limits = Limits(
            wall_seconds=exec_timeout_s, cpu_seconds=max(1, int(exec_timeout_s)), memory_bytes=memory_mb << 20
        )
        return build_server(Sandbox(limits, isolation=isolation), file_roots=file_roots), None  # type: ignore[arg-type]
    if server.startswith(("http://", "https://")):
        return {"type": "streamable-http", "url": server, "share_session": True}, None
    raise ConfigError("server must be 'shared', 'inprocess' or the http(s) URL of a Python-execution server")


@atexit.register
def _shutdown_all() -> None:
    for server in list(_servers.values()):
        server.shutdown()
