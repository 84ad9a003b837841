"""Our stdio client transport: the SDK's, with bounds, so a hostile or careless server cannot wedge a session.

``mcp.client.stdio.stdio_client`` joins each chunk to the pending line (``buffer + chunk``): a 40 MB result takes
minutes of copying before it is even parsed. This transport reads lines with :class:`~aworld_gym.mcp.transports.lines.LineReader`
(linear; oversized and unparsable replies answer their requests at once with an error; junk warnings rate-limited),
and bounds everything else a server can do to it:

- **writes have a deadline** (``write_timeout``): a server that stops reading its input leaves our write blocked;
  then the session ends at once (its read stream is closed, so every waiting request fails and the hub restarts the
  server), and notifications (a courtesy cancel) never wait for the pipe at all; a call that times out sooner finds
  the write waiting (:class:`~aworld_gym.mcp.transports.replies.WriteClock`) and ends the session without a probe;
- **a reply is taken only for a request of ours in flight**: a late reply to an abandoned (cancelled) call or an id
  nobody asked for is dropped and counted (:class:`~aworld_gym.mcp.transports.replies.ReplyDrops`), as over HTTP;
- **server-to-client requests in flight are bounded** (``MAX_SERVER_REQUESTS``): the excess is answered at once with
  a JSON-RPC error (or, when even that cannot be queued, dropped and counted);
- **the server's exit ends the session at once**: a watcher waits for the process, and when it exits the output
  already in the pipe is read and the session ends, even if a child of the server still holds its stdout;
- **the pipes are ours** (:mod:`~aworld_gym.mcp.transports.pipes`): 64 kB kernel pipes on every event loop (uvloop would
  give the server socket pairs that swallow hundreds of kB, hiding a server that stopped reading);
- **stopping kills the whole tree** (:mod:`~aworld_gym.mcp.transports.proctree`): the server runs as a child subreaper, so its
  orphaned descendants, setsid ones included, are killed with it, and so is anything still holding its pipes or
  carrying its environment marker.

The rest is the SDK's: a new session per server, newline-delimited JSON-RPC, on exit stdin closed, then SIGTERM and
SIGKILL to the process group, each wait bounded.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
import time
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager, suppress
from types import TracebackType
from typing import Any, TextIO

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from aworld_gym.mcp.redact import module_logger
from aworld_gym.mcp.transports.lines import (
    DEFAULT_MAX_MESSAGE_BYTES,
    TOO_LARGE,
    LineReader,
    Warnings,
    message_id,
    too_large,
)
from aworld_gym.mcp.transports.pipes import ServerPipes
from aworld_gym.mcp.transports.proctree import MARKER, ProcessTree, launch_argv
from aworld_gym.mcp.transports.replies import ReplyDrops, WriteClock

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "TOO_LARGE", "LineReader", "bounded_stdio_client", "message_id", "too_large"]

logger = module_logger(__name__)

STOP_GRACE_S = 2.0
WRITE_TIMEOUT_S = 5.0  # a write the server has not taken in this long: it stopped reading, the session is over
MAX_SERVER_REQUESTS = 64  # server-to-client requests being answered at once
OUTBOX_MESSAGES = 1024  # messages queued for the server's stdin (a notification finding it full is dropped)
SNAPSHOT_EVERY_S = 1.0  # how often the server's process tree is remembered, in case it dies without a stop
DRAIN_IDLE_S = 0.1  # after the server exited: output already in the pipe is read until it is this quiet
DRAIN_MAX_S = 2.0  # ... or for this long at most (a child of the server may go on writing)
TOO_MANY = -32098  # a server-error code of our own: too many of the server's requests in flight


class Outbox:
    """The session's write stream: requests and responses wait for room, notifications never wait (one that finds
    the queue full is dropped and counted: the server is not reading, and the session is about to end)."""

    def __init__(self, send: MemoryObjectSendStream[SessionMessage]) -> None:
        self._send = send
        self.dropped = 0
        self.waiting: set[tuple[type, Any]] = set()  # (type, id) of our requests not answered yet ("1" is not 1)

    async def send(self, item: SessionMessage, /) -> None:
        """Queue ``item`` for the server (a request is remembered as waiting; a cancel forgets its request, so a
        late reply to it is dropped and counted)."""
        msg = item.message
        if isinstance(msg, types.JSONRPCRequest):
            self.waiting.add((type(msg.id), msg.id))
        elif isinstance(msg, types.JSONRPCNotification) and msg.method == "notifications/cancelled":
            rid = (msg.params or {}).get("requestId")
            self.waiting.discard((type(rid), rid))
        if isinstance(msg, types.JSONRPCNotification):
            try:
                self._send.send_nowait(item)
            except anyio.WouldBlock:
                self.dropped += 1
            return
        await self._send.send(item)

    def offer(self, item: SessionMessage) -> bool:
        """Queue ``item`` if there is room now; returns whether it was queued."""
        try:
            self._send.send_nowait(item)
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.dropped += 1
            return False
        return True

    async def aclose(self) -> None:
        """Close the stream (the writer ends once the queue is written)."""
        await self._send.aclose()

    async def __aenter__(self) -> Outbox:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def _check_command(command: str, env: dict[str, str], cwd: Any) -> None:
    """Raise FileNotFoundError now for a command that cannot be found (the shim would only fail in the child)."""
    found = os.path.exists(os.path.join(str(cwd or ""), command)) if os.sep in command else None
    if found is False or (found is None and shutil.which(command, path=env.get("PATH", os.defpath)) is None):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)


class _State:
    """What the transport's tasks share."""

    def __init__(self) -> None:
        self.leader_gone = anyio.Event()
        self.read_scope: anyio.CancelScope | None = None
        self.server_requests: set[Any] = set()  # ids of the server's requests the session is answering
        self.refused = 0


@asynccontextmanager
async def bounded_stdio_client(
    server: StdioServerParameters,
    errlog: TextIO = sys.stderr,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    write_timeout: float = WRITE_TIMEOUT_S,
    drops: ReplyDrops | None = None,
    writes: WriteClock | None = None,
) -> AsyncGenerator[Any, None]:
    """A stdio transport for ``mcp.Client`` (same streams as the SDK's), bounded as the module says; replies to no
    request of ours in flight (late, forged) are dropped and counted in ``drops``; ``writes`` tells since when the
    write in progress has waited for the server to read."""
    drops = drops if drops is not None else ReplyDrops(server.command, logger)
    writes = writes if writes is not None else WriteClock()
    writes.since = None
    marker = os.urandom(8).hex()
    env = get_default_environment() | (server.env or {}) | {MARKER: marker}
    argv = launch_argv([server.command, *server.args])
    if argv[0] != server.command:
        _check_command(server.command, env, server.cwd)
    pipes = ServerPipes()
    try:
        process = await anyio.open_process(argv, env=env, cwd=server.cwd, stdin=pipes.child_stdin,
                                           stdout=pipes.child_stdout, stderr=errlog, start_new_session=True)  # fmt: skip
    except BaseException:
        await pipes.aclose()
        raise
    pipes.started()
    tree = ProcessTree(process.pid, pipes.ends, marker)
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    send, write_reader = anyio.create_memory_object_stream[SessionMessage](OUTBOX_MESSAGES)
    outbox = Outbox(send)
    warnings = Warnings()
    reader = LineReader(max_message_bytes, warnings)
    state = _State()

    async def deliver(message: SessionMessage) -> None:
        msg = message.message
        if isinstance(msg, types.JSONRPCRequest):
            if len(state.server_requests) >= MAX_SERVER_REQUESTS:
                state.refused += 1
                text = f"the client is already answering {MAX_SERVER_REQUESTS} requests of this server; refused"
                error = types.ErrorData(code=TOO_MANY, message=text)
                outbox.offer(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=msg.id, error=error)))
                return
            state.server_requests.add(msg.id)
        elif isinstance(msg, types.JSONRPCNotification) and msg.method == "notifications/cancelled":
            state.server_requests.discard((msg.params or {}).get("requestId"))
        elif isinstance(msg, types.JSONRPCResponse | types.JSONRPCError) and msg.id is not None:
            key = (type(msg.id), msg.id)
            if key not in outbox.waiting:  # a late reply of an abandoned call, or an id nobody asked for
                drops.drop(msg.id, "stdout")
                return
            outbox.waiting.discard(key)
        await read_writer.send(message)

    async def stdout_reader() -> None:
        async with read_writer:
            with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
                drain_until: float | None = None
                while True:
                    if drain_until is None and state.leader_gone.is_set():
                        drain_until = anyio.current_time() + DRAIN_MAX_S
                    with anyio.CancelScope() as scope:
                        if drain_until is None:
                            state.read_scope = scope
                        else:
                            scope.deadline = min(drain_until, anyio.current_time() + DRAIN_IDLE_S)
                        chunk = await pipes.stdout.receive()
                    state.read_scope = None
                    if scope.cancelled_caught:
                        if drain_until is not None:
                            return  # the server is gone and its pipe quiet: the session ends here
                        continue
                    for message in reader.feed(chunk):
                        await deliver(message)

    async def stdin_writer() -> None:
        try:
            async with write_reader:
                async for message in write_reader:
                    msg = message.message
                    if isinstance(msg, types.JSONRPCResponse | types.JSONRPCError):
                        state.server_requests.discard(msg.id)
                    data = msg.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    writes.since = time.monotonic()
                    with anyio.move_on_after(write_timeout) as scope:
                        await pipes.stdin.send(data.encode())
                    writes.since = None
                    if scope.cancelled_caught:
                        logger.warning("MCP server %r has not read its input for %g s; ending its session",
                                       server.command, write_timeout)  # fmt: skip
                        break
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        await read_writer.aclose()  # the session sees the connection end instead of a request hanging

    async def watch_leader() -> None:
        while True:
            with anyio.move_on_after(SNAPSHOT_EVERY_S):
                await process.wait()
                break
            tree.snapshot(periodic=True)
        state.leader_gone.set()
        if state.read_scope is not None:
            state.read_scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stdout_reader)
        tg.start_soon(stdin_writer)
        tg.start_soon(watch_leader)
        try:
            yield read_stream, outbox
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process, tree, pipes)
                for stream in (read_stream, send, read_writer, write_reader):
                    with suppress(Exception):
                        await stream.aclose()
            tg.cancel_scope.cancel()
    warnings.close()
    if reader.dropped_logs or state.refused or outbox.dropped:
        logger.debug("MCP server %r: dropped %d log notifications, refused %d of its requests, dropped %d messages "
                     "to it", server.command, reader.dropped_logs, state.refused, outbox.dropped)  # fmt: skip


async def _stop(process: Any, tree: ProcessTree, pipes: ServerPipes) -> None:
    """Remember the server's tree, close stdin, give the server a moment, SIGTERM and SIGKILL its process group, then
    SIGKILL every process it left (:meth:`ProcessTree.kill_rest`)."""
    tree.snapshot()
    with suppress(Exception):
        await pipes.stdin.aclose()
    if not await _exited(process, STOP_GRACE_S):
        tree.snapshot()
        with suppress(Exception):
            await terminate_posix_process_tree(process, STOP_GRACE_S)
        await _exited(process, STOP_GRACE_S)
    with suppress(Exception):
        killed = await anyio.to_thread.run_sync(tree.kill_rest)
        if killed:
            logger.info("killed %d processes the MCP server (pid %d) left running", killed, process.pid)
    with suppress(Exception):
        await pipes.aclose()


async def _exited(process: Any, timeout: float) -> bool:
    with anyio.move_on_after(timeout):
        while process.returncode is None:
            await anyio.sleep(0.01)
        return True
    return False
