"""One Python-execution server process per driver process, shared by every env in it (refcounted)."""

from __future__ import annotations

import secrets
import sys
from typing import Any

from aworld_gym.mcp.serving import TOKEN_ENV
from aworld_gym.mcp.transports.shared import SharedServer, shared_instance


class SharedPythonServer(SharedServer):
    """Starts ``python -m aworld_gym.sandbox.server`` over streamable HTTP on 127.0.0.1 on first use."""

    def __init__(
        self,
        isolation: str = "auto",
        wall_seconds: float = 10.0,
        memory_mb: int = 1024,
        file_roots: tuple[str, ...] = (),
        warm: str = "auto",
    ) -> None:
        self.args = ["--isolation", isolation, "--wall-seconds", str(wall_seconds), "--memory-mb", str(memory_mb),
                     "--warm", warm]  # fmt: skip
        self.token = secrets.token_urlsafe(24)  # only this process's envs may use the server
        for root in file_roots:
            self.args += ["--files-root", root]
        super().__init__("python-server", env={TOKEN_ENV: self.token})

    def command(self, port: int) -> list[str]:
        return [sys.executable, "-m", "aworld_gym.sandbox.server", "--transport", "streamable-http",
                "--port", str(port), *self.args]  # fmt: skip


def shared_server(
    isolation: str = "auto",
    wall_seconds: float = 10.0,
    memory_mb: int = 1024,
    file_roots: tuple[str, ...] = (),
    warm: str = "auto",
) -> SharedPythonServer:
    """The process-wide server for these settings."""
    key = ("python", isolation, str(wall_seconds), str(memory_mb), warm, *file_roots)
    return shared_instance(key, lambda: SharedPythonServer(isolation, wall_seconds, memory_mb, file_roots, warm))


def python_server_entry(
    server: str,
    isolation: str,
    exec_timeout_s: float,
    memory_mb: int,
    file_roots: tuple[str, ...] = (),
    warm: str = "auto",
) -> Any:
    """The ``mcpServers`` value of the Python-execution server an env asked for.

    Args:
        server: ``"shared"`` (one server process per driver process: a
            :class:`~aworld_gym.core.resources.LocalServer` the env holds), ``"inprocess"``, or an http(s) URL.
        isolation, exec_timeout_s, memory_mb: sandbox settings (for ``shared`` and ``inprocess``).
        warm: ``"auto"`` (executions forked from a warm zygote where it can start), ``"on"`` or ``"off"``.
        file_roots: folders whose files (the task's attachments) the server may hand in even when they are not
            world-readable.
    """
    from aworld_gym.base.errors import ConfigError
    from aworld_gym.core.resources import LocalServer

    if server == "shared":
        shared = shared_server(isolation, exec_timeout_s, memory_mb, file_roots, warm)
        return LocalServer(shared, headers={"Authorization": f"Bearer {shared.token}"}, share_session=True)
    if server == "inprocess":  # the process's shared sandbox and work folders: one zygote, removed at exit
        from aworld_gym.sandbox.runner import Limits, shared_sandbox
        from aworld_gym.sandbox.server import build_server, shared_workspaces

        limits = Limits(
            wall_seconds=exec_timeout_s, cpu_seconds=max(1, int(exec_timeout_s)), memory_bytes=memory_mb << 20
        )
        sandbox = shared_sandbox(limits, isolation, warm)  # type: ignore[arg-type]
        return build_server(sandbox, shared_workspaces(), file_roots=file_roots)  # type: ignore[arg-type]
    if server.startswith(("http://", "https://")):
        return {"type": "streamable-http", "url": server, "share_session": True}
    raise ConfigError("server must be 'shared', 'inprocess' or the http(s) URL of a Python-execution server")
