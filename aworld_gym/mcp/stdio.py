"""Our stdio client transport: the SDK's, with bounds, so a hostile or careless server cannot wedge a session.

``mcp.client.stdio.stdio_client`` joins each chunk to the pending line (``buffer + chunk``): a 40 MB result takes
minutes of copying before it is even parsed, and every later call on the session times out behind it. This
transport reads bytes into a list and joins a line once (linear), and:

- a message over ``max_message_bytes`` is not assembled at all: the rest of its line is skipped, and the request it
  answers (its id read from the line's first bytes) gets a JSON-RPC error saying how big it was;
- log notifications (``notifications/message``) are dropped unparsed (the hub never shows server logs), so a
  flood of them costs a substring test each instead of a validation and a dispatch.

Everything else is what the SDK does: a new process group per server, newline-delimited JSON-RPC, on exit stdin
closed, then SIGTERM and SIGKILL to the process group, each wait bounded.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager, suppress
from typing import Any, TextIO

import anyio
import mcp_types as types
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

logger = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGE_BYTES = 16 << 20
STOP_GRACE_S = 2.0
_ID = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.){0,200}"|-?\d{1,20})')
_LOG = b'"notifications/message"'
TOO_LARGE = -32099  # a server-error code of our own: the message was dropped by this client


def message_id(head: bytes) -> Any:
    """The JSON-RPC id in the first bytes of a message, or None (the id of a result precedes a long payload in
    every server we know; one that puts it last is answered by the call's timeout instead)."""
    m = _ID.search(head)
    if m is None:
        return None
    raw = m.group(1)
    return raw[1:-1].decode(errors="replace") if raw.startswith(b'"') else int(raw)


def too_large(rid: Any, size: int, limit: int) -> SessionMessage:
    text = f"the server's reply was over {size >> 20} MB, more than this client accepts ({limit >> 20} MB); dropped"
    error = types.JSONRPCError(jsonrpc="2.0", id=rid, error=types.ErrorData(code=TOO_LARGE, message=text))
    return SessionMessage(error)


def parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        logger.warning("MCP server wrote a line that is not JSON-RPC (%d bytes): %.200r", len(line), line)
        return exc


class LineReader:
    """Splits a byte stream into messages, linear in its size, with a bound on one message."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.parts: list[bytes] = []
        self.size = 0
        self.skipping: tuple[Any, int] | None = None  # (id, bytes so far) of an oversized message being skipped
        self.dropped_logs = 0

    def feed(self, chunk: bytes) -> list[SessionMessage | Exception]:
        out: list[SessionMessage | Exception] = []
        while chunk:
            nl = chunk.find(b"\n")
            piece, chunk = (chunk, b"") if nl < 0 else (chunk[:nl], chunk[nl + 1 :])
            if self.skipping is not None:
                rid, seen = self.skipping
                self.skipping = (rid, seen + len(piece))
                if nl >= 0:
                    self.skipping = None
                    if rid is not None:
                        out.append(too_large(rid, seen + len(piece), self.max_bytes))
                continue
            self.parts.append(piece)
            self.size += len(piece)
            if self.size > self.max_bytes:
                head, seen = b"".join(self.parts)[:4096], self.size
                self.parts, self.size = [], 0
                self.skipping = (message_id(head), seen)
                if nl >= 0:  # the oversized line ended in this chunk
                    rid = self.skipping[0]
                    self.skipping = None
                    if rid is not None:
                        out.append(too_large(rid, seen, self.max_bytes))
                continue
            if nl < 0:
                break
            line = b"".join(self.parts)
            self.parts, self.size = [], 0
            if not line.strip():
                continue
            if _LOG in line[:200] and b'"id"' not in line[:200]:
                self.dropped_logs += 1
                continue
            out.append(parse(line))
        return out


@asynccontextmanager
async def bounded_stdio_client(
    server: StdioServerParameters, errlog: TextIO = sys.stderr, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
) -> AsyncGenerator[Any, None]:
    """A stdio transport for ``mcp.Client`` (same streams as the SDK's), bounded as the module says."""
    process = await anyio.open_process(
        [server.command, *server.args],
        env=get_default_environment() | (server.env or {}),
        cwd=server.cwd,
        stderr=errlog,
        start_new_session=True,
    )
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    reader = LineReader(max_message_bytes)

    async def stdout_reader() -> None:
        assert process.stdout is not None
        async with read_writer:
            with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
                async for chunk in process.stdout:
                    for message in reader.feed(chunk):
                        await read_writer.send(message)

    async def stdin_writer() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(data.encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()  # the session sees the connection end instead of a request hanging

    async with anyio.create_task_group() as tg:
        tg.start_soon(stdout_reader)
        tg.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
                for stream in (read_stream, write_stream, read_writer, write_reader):
                    with suppress(Exception):
                        await stream.aclose()
            tg.cancel_scope.cancel()
    if reader.dropped_logs:
        logger.debug("dropped %d log notifications from %r", reader.dropped_logs, server.command)


async def _stop(process: Any) -> None:
    """Close stdin, give the server a moment, then SIGTERM and SIGKILL its process group."""
    with suppress(Exception):
        await process.stdin.aclose()
    if not await _exited(process, STOP_GRACE_S):
        with suppress(Exception):
            await terminate_posix_process_tree(process, STOP_GRACE_S)
        await _exited(process, STOP_GRACE_S)
    with suppress(Exception):
        await process.stdout.aclose()


async def _exited(process: Any, timeout: float) -> bool:
    with anyio.move_on_after(timeout):
        while process.returncode is None:
            await anyio.sleep(0.01)
        return True
    return False
