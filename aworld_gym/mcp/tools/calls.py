"""Sending one checked tool call over its server's session, and turning every way it can end into a result.

The hub routes a call and checks it; :func:`send` then owns the request: the per-call deadline (the hub's
:class:`Watchdog`), telling a dead session from one failed request, and the text the model sees for each outcome.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mcp import MCPError
from mcp_types import CONNECTION_CLOSED, INVALID_REQUEST, REQUEST_TIMEOUT

from aworld_gym.base.calls import ToolCall
from aworld_gym.base.errors import ServerError
from aworld_gym.mcp.cache import CACHE_MISS_CODE, CacheError
from aworld_gym.mcp.redact import redact
from aworld_gym.mcp.results import (
    CACHE_MISS,
    SERVER_DIED,
    TIMEOUT,
    TOOL_ERROR,
    ToolResult,
    describe_error,
    readable,
    render_result,
    truncate,
)
from aworld_gym.mcp.results.images import ImageLimits, ToolImage
from aworld_gym.mcp.tools.listing import fetch_page
from aworld_gym.mcp.tools.namespace import RoutedTool
from aworld_gym.mcp.transports.connection import Connection
from aworld_gym.mcp.watchdog import Watchdog


async def send(
    tool: RoutedTool,
    call: ToolCall,
    *,
    meta: dict[str, Any],
    timeout: float,
    watchdog: Watchdog,
    max_output_chars: int,
    start: float,
    images: ImageLimits | None = None,
    through: Callable[[Callable[[str, Any], Awaitable[Any]]], Awaitable[Any]] | None = None,
    strict: bool = False,
) -> ToolResult:
    """Send ``call`` to ``tool``'s live session and return its result; never raises except for cancellation.

    ``images``: which of the result's images the model is shown (``None``: none, placeholders only).
    ``through``: the tool cache's way to the session (``record``/``replay``: ``through(send)`` returns a kept result
    or sends the call with ``send(name, arguments)`` over this session, and keeps its result). ``strict``: the session is a replay server
    (``replay-strict``), whose "no such result" error is kind ``cache_miss``.

    A transport that is really gone marks the connection dead (the hub restarts it at the next call); one failed
    request on a live session fails only this call, since the session may be shared by many envs.
    """
    conn = tool.conn
    generation = conn.generation  # a late error of an old session must not kill its replacement
    # The watchdog (one timer for all calls, no extra task) bounds every transport, in-process included;
    # cancelling the request also tells the session to drop it.
    key, deadline = watchdog.add(timeout)
    client = conn.client

    def over_session(name: str, arguments: Any) -> Awaitable[Any]:
        return client.call_tool(name, arguments, meta=meta)

    try:
        result = await (over_session(tool.name, call.arguments) if through is None else through(over_session))
    except asyncio.CancelledError:
        if deadline.expired():
            await probe(conn, generation, timeout)
            return timeout_result(call, tool, timeout, start, max_output_chars)
        raise
    except MCPError as exc:
        if strict and exc.code == CACHE_MISS_CODE:
            return make_result(call, tool, f"Error: {readable(exc.message)}", CACHE_MISS, start, max_output_chars)
        if deadline.expired() or exc.code == REQUEST_TIMEOUT:
            await probe(conn, generation, timeout)
            return timeout_result(call, tool, timeout, start, max_output_chars)
        if await session_lost(conn, generation, exc, timeout):
            conn.mark_dead(generation)
            text = f"Error: tool server {conn.spec.name!r} died during the call ({readable(exc.message)})."
            return make_result(call, tool, text, SERVER_DIED, start, max_output_chars)
        return make_result(call, tool, f"Error: {readable(exc.message)}", TOOL_ERROR, start, max_output_chars)
    except CacheError as exc:  # the store failed (on_error="stop"): the call is not scored as the tool's answer
        return make_result(call, tool, f"Error: {readable(str(exc))}", CACHE_MISS, start, max_output_chars)
    except Exception as exc:  # noqa: BLE001 - failures here become data, not crashes
        if deadline.expired():
            await probe(conn, generation, timeout)
            return timeout_result(call, tool, timeout, start, max_output_chars)
        if conn.transport_done():  # the session is really gone (pipe closed, HTTP stream ended)
            conn.mark_dead(generation)
            text = f"Error: lost the connection to tool server {conn.spec.name!r}: {describe_error(exc)}"
            return make_result(call, tool, text, SERVER_DIED, start, max_output_chars)
        # One failed request (a malformed result, an HTTP hiccup) on a live session: this call fails, the session
        # (perhaps shared by many envs) stays, unless it no longer answers.
        await probe(conn, generation, timeout)
        text = f"Error: the call failed: {describe_error(exc)}"
        return make_result(call, tool, text, TOOL_ERROR, start, max_output_chars)
    finally:
        watchdog.remove(key)
        deadline.expired()  # a cancellation that fired as the call ended must not linger on the task
    text, shown = render_result(result, images)
    if result.is_error and not text.strip():  # an empty <tool_response> would read as a success with no output
        text = "Error: the tool reported an error and gave no message."
    return make_result(
        call,
        tool,
        text,
        TOOL_ERROR if result.is_error else None,
        start,
        max_output_chars,
        structured=getattr(result, "structured_content", None),
        images=tuple(shown),
    )


async def send_internal(
    conn: Connection, name: str, tool: str, arguments: dict[str, Any], *, meta: dict[str, Any], timeout: float
) -> Any:
    """Call ``tool`` on ``conn`` for the env itself; returns the raw ``CallToolResult``.

    Raises:
        ServerError: the call timed out or failed in transport (``name`` is how the env asked for the tool).
    """
    generation = conn.generation
    try:
        async with asyncio.timeout(timeout):
            return await conn.client.call_tool(tool, arguments, meta=meta)
    except TimeoutError:
        raise ServerError(f"{name!r} did not answer within {timeout:g} s") from None
    except MCPError as exc:
        await session_lost(conn, generation, exc, timeout)
        raise ServerError(redact(f"{name!r} failed: {exc.message}")) from None
    except Exception as exc:  # noqa: BLE001 - reported to the env as a ServerError
        if conn.transport_done():
            conn.mark_dead(generation)
        raise ServerError(redact(f"{name!r} failed: {type(exc).__name__}: {exc}")) from None


PROBE_TIMEOUT_S = 2.0


async def probe(conn: Connection, generation: int, timeout: float) -> bool:
    """After a timeout or a failed request: does the session still answer a request (within ~2 s)? If not, it is
    wedged (a reader stuck behind a huge message, a server that stopped reading) and is marked dead (at once where a
    write to it has already waited that long), so the next
    call restarts or reconnects it instead of timing out too. Returns whether it answered."""
    client = conn.client
    if client is None or generation != conn.generation or not conn.alive or conn.transport_done():
        conn.mark_dead(generation)
        return False
    if conn.writes.blocked_for() >= PROBE_TIMEOUT_S:  # the server has stopped reading: a probe would only wait
        conn.mark_dead(generation)
        return False
    try:
        async with asyncio.timeout(min(PROBE_TIMEOUT_S, timeout)):
            await fetch_page(client, None)  # every server answers it (ping is gone from the newest protocol); read
            # raw, as the hub lists tools: a server with one malformed tool still counts as answering
    except asyncio.CancelledError:
        raise
    except Exception:  # noqa: BLE001 - no answer, or an error: either way the session is not usable
        conn.mark_dead(generation)
        return False
    return True


# The error codes a lost session is reported with: CONNECTION_CLOSED (a transport that ended; also the generic
# server error -32000) and INVALID_REQUEST (an HTTP session the server forgot, e.g. after a restart: a 404, which the
# client reports as its own "Session terminated" or as the server's JSON error, e.g. "Session not found"). Neither
# code alone says the session is gone, so the session is probed.
LOST_SESSION_CODES = (CONNECTION_CLOSED, INVALID_REQUEST)


async def session_lost(conn: Connection, generation: int, exc: MCPError, timeout: float) -> bool:
    """Whether ``exc`` means the session is gone: a code a lost session is reported with, and the session does not
    answer a probe either (:func:`probe` marks the connection dead then; the hub restarts it at the next call)."""
    return exc.code in LOST_SESSION_CODES and not await probe(conn, generation, timeout)


def timeout_result(call: ToolCall, tool: RoutedTool, timeout: float, start: float, max_output_chars: int) -> ToolResult:
    """The result of a call abandoned at its deadline."""
    text = f"Error: tool {call.name!r} did not answer within {timeout:g} s and was abandoned."
    return make_result(call, tool, text, TIMEOUT, start, max_output_chars)


def make_result(
    call: ToolCall,
    tool: RoutedTool,
    text: str,
    error: str | None,
    start: float,
    max_output_chars: int,
    structured: Any = None,
    images: tuple[ToolImage, ...] = (),
) -> ToolResult:
    """A result routed to ``tool``'s server, its text cut to ``max_output_chars``, timed from ``start``."""
    text, cut = truncate(text, max_output_chars)
    return ToolResult(
        call,
        text,
        error,
        server=tool.conn.spec.name,
        latency_s=time.perf_counter() - start,
        truncated=cut,
        structured=None if cut else structured,  # a cut result keeps no uncut copy
        images=images,
    )
