"""The Python-execution MCP server: ``run_python`` in the sandbox, one work folder per env episode.

One server process serves many envs at once: each call's ``_meta`` (sent by the ToolHub) names the calling
env's session and episode, and each (session, episode) gets its own fresh work folder; a new episode of the
same session deletes the previous folder. Run it standalone for a whole node (Ray actors connect to it)::

    python -m aworld_gym.sandbox.server --transport streamable-http --port 8940
"""

from __future__ import annotations

import argparse
import atexit
import functools
import os
import shutil
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer

from aworld_gym.base import scratch
from aworld_gym.base.errors import SandboxError
from aworld_gym.base.version import __version__
from aworld_gym.mcp.hub import META_PREFIX
from aworld_gym.mcp.serving import exit_on_sigterm, serve
from aworld_gym.sandbox.runner import (
    FILES_DIR,
    WARM_CHOICES,
    Limits,
    Sandbox,
    shared_sandbox,
    warm_setting,
    world_readable,
)

RUN_PYTHON_DOC = f"""Run Python 3 code in a fresh sandboxed process; returns the exit status, stdout and stderr.

Files written to the current folder persist across calls for this task; nothing else does. There is no
network access. Files attached to the task are read-only in {FILES_DIR}. Use print() to see values.

Args:
    code: the Python source to run.
    timeout_s: wall-clock limit in seconds (capped by the server's limit).
"""

RUN_SHELL_DOC = f"""Run a bash command line in the same sandbox as run_python; returns the exit status, stdout and stderr.

The usual tools are there (grep, sed, awk, sort, find, file, unzip, tar, sqlite3, jq, python3). Files written to
the current folder persist across calls for this task. There is no network access. Files attached to the task
are read-only in {FILES_DIR}.

Args:
    command: the bash command line, e.g. "unzip -l {FILES_DIR}/data.zip | head".
    timeout_s: wall-clock limit in seconds (capped by the server's limit).
"""


def shell_program(command: str) -> str:
    """The Python program that runs ``command`` with bash in the sandbox (its output and exit status are bash's)."""
    return f"import subprocess, sys\nsys.exit(subprocess.run(['/bin/bash', '-c', {command!r}]).returncode)\n"


class Workspaces:
    """Work folders keyed by (session, episode); the newest episode of a session replaces the older one."""

    def __init__(self, root: Path | None = None, max_sessions: int = 4096) -> None:
        self._prefix = None if root else "aworld-sandbox-work-"  # a root the caller chose is made again as it was
        self.root = Path(root) if root else scratch.make_dir(self._prefix)
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, tuple[int, Path]] = OrderedDict()
        self._lock = threading.Lock()
        self._n = 0
        self._closed = False

    def get(self, session: str, episode: int) -> Path:
        """The episode's folder. One removed while its episode runs is not replaced (its files are lost: the run
        fails with a clear error); the next episode or session gets a new one, and a new root where that is gone."""
        stale: list[Path] = []
        with self._lock:
            if self._closed:  # a late tool call (a worker thread during exit) must not bring the root back
                raise SandboxError("the sandbox server is closed")
            current = self._sessions.get(session)
            if current is not None and current[0] == episode:
                self._sessions.move_to_end(session)
                return current[1]
            if current is not None:
                stale.append(current[1])
            self._n += 1
            self.root, path = scratch.make_child(self.root, f"w{self._n}", self._prefix)
            self._sessions[session] = (episode, path)
            while len(self._sessions) > self.max_sessions:
                stale.append(self._sessions.popitem(last=False)[1][1])
        for p in stale:
            shutil.rmtree(p, ignore_errors=True)
        return path

    def __len__(self) -> int:
        return len(self._sessions)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        shutil.rmtree(self.root, ignore_errors=True)


_shared_workspaces: Workspaces | None = None
_shared_workspaces_lock = threading.Lock()


def shared_workspaces() -> Workspaces:
    """One process-wide :class:`Workspaces`, removed at exit: what the in-process servers of this process's envs
    share (each env is a session of its own, so its folders stay apart), like the shared HTTP server's one."""
    global _shared_workspaces
    with _shared_workspaces_lock:
        if _shared_workspaces is None:
            _shared_workspaces = Workspaces()
            atexit.register(_shared_workspaces.close)
        return _shared_workspaces


def _meta(ctx: Context, roots: tuple[Path, ...] = ()) -> tuple[str, int, list[str]]:
    meta: dict[str, Any] = dict(ctx.request_context.meta or {})
    files = meta.get(f"{META_PREFIX}files") or []
    files = [f for f in files if isinstance(f, str) and os.path.isfile(f) and _may_hand_in(Path(f), roots)]
    return str(meta.get(f"{META_PREFIX}session", "default")), int(meta.get(f"{META_PREFIX}episode", 0)), files


def _may_hand_in(path: Path, roots: tuple[Path, ...]) -> bool:
    """A client may hand in a file anyone can read, or one under a configured data root; never others (the server
    may run as root, and any local user can reach a server on 127.0.0.1)."""
    real = path.resolve()
    return world_readable(real) or any(real.is_relative_to(r) for r in roots)


def build_server(
    sandbox: Sandbox | None = None,
    workspaces: Workspaces | None = None,
    max_concurrent: int | None = None,
    name: str = "python",
    file_roots: tuple[str | Path, ...] = (),
) -> MCPServer:
    """A Python-execution MCP server object (serve it in-process, or with ``run()``). Without a ``sandbox`` it uses
    the process's shared one (:func:`~aworld_gym.sandbox.runner.shared_sandbox`, closed at exit): a sandbox of its
    own would start a warm zygote that nothing closes when the server object is dropped."""
    sandbox = shared_sandbox() if sandbox is None else sandbox
    workspaces = Workspaces() if workspaces is None else workspaces  # not `or`: an empty Workspaces is falsy
    limiter = anyio.CapacityLimiter(max_concurrent or max(4, 2 * (os.cpu_count() or 1)))
    roots = tuple(Path(r).resolve() for r in file_roots)
    server = MCPServer(name, version=__version__, log_level="WARNING")
    server.sandbox = sandbox  # type: ignore[attr-defined]
    server.workspaces = workspaces  # type: ignore[attr-defined]

    async def run_python(code: str, ctx: Context, timeout_s: float = 10.0) -> str:
        session, episode, files = _meta(ctx, roots)
        workdir = workspaces.get(session, episode)
        run = functools.partial(sandbox.run, code, workdir, files, timeout_s)
        result = await anyio.to_thread.run_sync(run, limiter=limiter)
        return result.render()

    async def run_shell(command: str, ctx: Context, timeout_s: float = 10.0) -> str:
        session, episode, files = _meta(ctx, roots)
        workdir = workspaces.get(session, episode)
        run = functools.partial(sandbox.run, shell_program(command), workdir, files, timeout_s)
        result = await anyio.to_thread.run_sync(run, limiter=limiter)
        return result.render()

    run_python.__doc__ = RUN_PYTHON_DOC
    run_shell.__doc__ = RUN_SHELL_DOC
    server.tool(name="run_python", description=RUN_PYTHON_DOC.split("\n\nArgs:")[0])(run_python)
    server.tool(name="run_shell", description=RUN_SHELL_DOC.split("\n\nArgs:")[0])(run_shell)
    return server


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transport", default="stdio", choices=["stdio", "streamable-http", "sse"])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8940)
    ap.add_argument("--isolation", default="auto", choices=["auto", "bwrap", "none"])
    ap.add_argument("--warm", default="auto", choices=list(WARM_CHOICES), help="executions forked from a zygote")
    ap.add_argument("--wall-seconds", type=float, default=Limits.wall_seconds)
    ap.add_argument("--memory-mb", type=int, default=Limits.memory_bytes >> 20)
    ap.add_argument("--max-concurrent", type=int, default=None)
    ap.add_argument("--files-root", action="append", default=[], help="folder whose files clients may hand in")
    args = ap.parse_args(argv)
    exit_on_sigterm()  # before the folders are made: a SIGTERM from now on removes them
    limits = Limits(wall_seconds=args.wall_seconds, cpu_seconds=max(1, int(args.wall_seconds)),
                    memory_bytes=args.memory_mb << 20)  # fmt: skip
    sandbox = Sandbox(limits, isolation=args.isolation, warm=warm_setting(args.warm))
    workspaces = Workspaces()
    atexit.register(workspaces.close)
    atexit.register(sandbox.close)
    server = build_server(sandbox, workspaces, args.max_concurrent, file_roots=tuple(args.files_root))
    serve(server, args.transport, args.host, args.port)


if __name__ == "__main__":
    main()
