"""Our streamable-HTTP client transport: the SDK's, with the id check and the bounds of our stdio transport.

``mcp.client.streamable_http`` has three gaps a hostile or careless server can use (issue 30):

- **Id confusion.** It rewrites the id of any response on a request's SSE stream to that request's id. A late reply
  to a call that timed out, sent on the next call's stream, became the next call's result. Here a response is
  taken only for its own request id; another one (late or forged) is dropped and counted in :class:`ReplyDrops`.
  A JSON body, a POST's only answer, that answers another id also answers its own request at once with an error.
- **Unbounded bodies.** A JSON body was read whole (``aread``) whatever its size or ``Content-Length``. Here every
  response body that is not an event stream is bounded (:func:`bound_bodies`, a response hook the client's other
  hooks run after), its declared length checked before a byte is read; a JSON reply over the bound answers its
  request with :func:`~aworld_gym.mcp.transports.stdio.too_large`'s error, and one SSE event is bounded the same way (16 MB,
  as a stdio message; the SDK's 1 MB refused results stdio accepts).
- **Abandoned requests read on.** Below the 2026 era an abandoned request's POST went on reading its response
  after the courtesy ``notifications/cancelled``. Here the cancel also closes that response.

Everything else is the SDK's transport: :func:`bounded_http_client` takes the place of ``streamable_http_client``
(a caller-owned ``httpx2.AsyncClient``; the session's DELETE on exit).
"""

from __future__ import annotations

import asyncio
import re
import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
from mcp.client.streamable_http import StreamableHTTPTransport, StreamWriter
from mcp.shared._context_streams import create_context_streams
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
from mcp.shared.message import SessionMessage
from mcp_types import (
    CONNECTION_CLOSED,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCResponse,
    RequestId,
)

from aworld_gym.mcp.redact import module_logger
from aworld_gym.mcp.transports.lines import DEFAULT_MAX_MESSAGE_BYTES, parse_message, too_large
from aworld_gym.mcp.transports.replies import ReplyDrops, same_id

logger = module_logger(__name__)

WRONG_ID = -32098  # a server-error code of our own: the server's only answer to a request named another request
_SSE_OVER = re.compile(r"Server-sent event exceeded the (\d+) byte limit")


class BodyTooLarge(httpx2.StreamError):
    """A response body over the client's bound (declared by its ``Content-Length``, or read so far)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"the response body is over {limit} bytes ({size} declared or read); not read further")
        self.size = size
        self.limit = limit


class BoundedStream(httpx2.AsyncByteStream):
    """A response's byte stream that stops (raising :class:`BodyTooLarge`) past ``limit`` bytes; with ``encoding``
    (``gzip``/``deflate``) it also decodes, bounding the decoded bytes the same way (a 200 KB gzip body can hold
    200 MB of zeros: decoded in one piece, as the client's own decoder does, it is read whole)."""

    def __init__(self, inner: Any, limit: int, declared: int | None, encoding: str | None = None) -> None:
        self.inner, self.limit, self.declared, self.encoding = inner, limit, declared, encoding

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self.declared is not None and self.declared > self.limit:
            raise BodyTooLarge(self.declared, self.limit)
        seen = decoded = 0
        decoder = None if self.encoding is None else _decoder(self.encoding)
        async for chunk in self.inner:
            seen += len(chunk)
            if seen > self.limit:
                raise BodyTooLarge(seen, self.limit)
            if decoder is None:
                yield chunk
                continue
            while chunk:
                try:  # at most one byte past the bound per piece: a bomb is never expanded
                    piece = decoder.decompress(chunk, self.limit - decoded + 1)
                except zlib.error as exc:
                    raise httpx2.DecodingError(f"the {self.encoding} body could not be decoded: {exc}") from None
                decoded += len(piece)
                if decoded > self.limit:
                    raise BodyTooLarge(decoded, self.limit)
                if piece:
                    yield piece
                chunk = decoder.unconsumed_tail

    async def aclose(self) -> None:
        await self.inner.aclose()


def _decoder(encoding: str) -> Any:
    """A streaming zlib decoder for a ``Content-Encoding`` of ``gzip`` or ``deflate`` (either header is detected)."""
    return zlib.decompressobj(32 + zlib.MAX_WBITS)


def declared_length(response: httpx2.Response) -> int | None:
    """The response's ``Content-Length``, or None when it has none (or an unreadable one)."""
    value = response.headers.get("content-length", "").strip()
    return int(value) if value.isdigit() else None


def is_event_stream(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").partition(";")[0].strip().lower() == "text/event-stream"


def cancelled_read_race(context: dict[str, Any]) -> bool:
    """Whether an event loop's error ``context`` is anyio's benign race on a Unix socket's cancelled read.

    anyio (4.16, asyncio backend) waits for a UNIX socket stream to turn readable with
    ``loop.add_reader(sock, future.set_result, None)`` and removes that reader from the future's done-callback. When
    the reading task is cancelled in the same turn of the loop in which the socket turned readable (a session closed
    while the server still writes, or ends its stream: Browser-v0's shared Playwright server on its Unix socket, at
    an episode's end), the reader's callback is already queued and runs after the cancellation: ``set_result`` on a
    cancelled future, logged by the loop as ``Exception in callback Future.set_result(None)`` with an
    ``InvalidStateError`` traceback. Nothing is lost (the read was abandoned on purpose; the socket is closed after
    it), but it reads as a crash. Only that case matches: the loop's exception is ``InvalidStateError`` and its
    callback is ``set_result`` of a future that was cancelled. (TCP streams go through asyncio transports: no race.)
    """
    callback = getattr(context.get("handle"), "_callback", None)  # asyncio.Handle keeps its callback only there
    future = getattr(callback, "__self__", None)
    return (
        isinstance(context.get("exception"), asyncio.InvalidStateError)
        and getattr(callback, "__name__", None) == "set_result"
        and isinstance(future, asyncio.Future)
        and future.cancelled()
    )


def quiet_cancelled_reads(loop: asyncio.AbstractEventLoop) -> None:
    """Drop :func:`cancelled_read_race`'s benign error on ``loop``; every other error goes to the handler the loop
    had (or its default). Called once per loop that opens a Unix-socket connection (a second call does nothing)."""
    previous = loop.get_exception_handler()
    if getattr(previous, "quiets_cancelled_reads", False):
        return

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if cancelled_read_race(context):
            return
        if previous is None:
            loop.default_exception_handler(context)
        else:
            previous(loop, context)

    handler.quiets_cancelled_reads = True  # type: ignore[attr-defined]
    loop.set_exception_handler(handler)


def bound_bodies(http: httpx2.AsyncClient, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
    """Bound every response body of ``http`` but event streams (bounded per event) to ``max_bytes``, its hooks
    included: the bound's hook runs first, so a hook that reads an error body reads at most ``max_bytes``."""

    async def bound(response: httpx2.Response) -> None:
        if not is_event_stream(response):
            encoding = response.headers.get("content-encoding", "").strip().lower()
            decode = encoding if encoding in ("gzip", "x-gzip", "deflate") else None
            response.stream = BoundedStream(response.stream, max_bytes, declared_length(response), decode)
            if decode:  # decoded (and bounded) here: the client must not decode it again
                del response.headers["content-encoding"]

    # only encodings decoded under the bound are asked for (a server that sends brotli anyway is read raw-bounded)
    http.headers["accept-encoding"] = "gzip, deflate"
    http.event_hooks.setdefault("response", []).insert(0, bound)


async def read_bounded(response: httpx2.Response, limit: int) -> bytes:
    """The (decoded) body of ``response``, read as a stream and joined once.

    Raises:
        BodyTooLarge: its ``Content-Length`` says it is over ``limit`` (nothing is read), or it grew past it.
    """
    declared = declared_length(response)
    if declared is not None and declared > limit:
        raise BodyTooLarge(declared, limit)
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(size, limit)
        parts.append(chunk)
    return b"".join(parts)


def wrong_id(request_id: RequestId, got: RequestId | None) -> SessionMessage:
    """The error that answers ``request_id`` when its only reply named another request."""
    text = f"the server answered with a reply for another request (id {got!r}), not this one; dropped"
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=WRONG_ID, message=text)))


class BoundedHTTPTransport(StreamableHTTPTransport):
    """The SDK's streamable-HTTP transport with replies checked against their request id and bodies bounded."""

    def __init__(
        self, url: str, *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, drops: ReplyDrops | None = None
    ) -> None:
        super().__init__(url, max_sse_event_size=max_message_bytes)
        self.max_message_bytes = max_message_bytes
        self.drops = drops if drops is not None else ReplyDrops(url, logger)

    async def _handle_sse_event(
        self,
        sse: httpx2.ServerSentEvent,
        read_stream_writer: StreamWriter,
        original_request_id: RequestId | None = None,
        resumption_callback: Callable[[str], Awaitable[None]] | None = None,
    ) -> bool:
        """Pass one SSE event's message on, unless it is a response to another request than the stream's
        (``original_request_id``; None for the GET stream, where only a request in flight may be answered)."""
        if sse.event != "message" or not sse.data:
            return await super()._handle_sse_event(sse, read_stream_writer, original_request_id, resumption_callback)
        try:
            message = parse_message(sse.data)
        except ValueError:  # the SDK's parse-error answer
            return await super()._handle_sse_event(sse, read_stream_writer, original_request_id, resumption_callback)
        done = isinstance(message, JSONRPCResponse | JSONRPCError)
        if done:
            if original_request_id is None:
                own = message.id is not None and message.id in self._in_flight_posts
            elif message.id is None and isinstance(message, JSONRPCError):
                message.id, own = original_request_id, True  # an error the server could not tie to its request
            else:
                own = same_id(message.id, original_request_id)
            if not own:
                where = "the GET stream" if original_request_id is None else f"request {original_request_id!r}'s stream"
                self.drops.drop(message.id, where)
                done = False
        if done or not isinstance(message, JSONRPCResponse | JSONRPCError):
            try:
                await read_stream_writer.send(SessionMessage(message))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return True  # the session is closing: nothing waits for this stream
        if sse.id and resumption_callback:
            await resumption_callback(sse.id)
        return done

    async def _handle_json_response(
        self, response: httpx2.Response, read_stream_writer: StreamWriter, *, request_id: RequestId
    ) -> None:
        """Answer ``request_id`` from a JSON body read within the bound, and only with a reply for it."""
        limit = self.max_message_bytes
        try:
            body = await read_bounded(response, limit)
        except BodyTooLarge as exc:
            await read_stream_writer.send(too_large(request_id, exc.size, limit))
            return
        except httpx2.StreamError as exc:
            await read_stream_writer.send(_error(request_id, PARSE_ERROR, f"could not read the server's reply: {exc}"))
            return
        try:
            message = parse_message(body)
        except ValueError as exc:
            logger.warning("MCP server at %s sent a JSON body that is not JSON-RPC (%d bytes): %.200r",
                           self.url, len(body), body)  # fmt: skip
            text = "the server's reply is not JSON-RPC: " + str(exc).splitlines()[0][:200]
            await read_stream_writer.send(_error(request_id, PARSE_ERROR, text))
            return
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            if message.id is None and isinstance(message, JSONRPCError):
                message.id = request_id
            elif not same_id(message.id, request_id):
                self.drops.drop(message.id, f"request {request_id!r}'s JSON body")
                await read_stream_writer.send(wrong_id(request_id, message.id))
                return
        await read_stream_writer.send(SessionMessage(message))

    async def _resolve_abandoned_request(
        self, read_stream_writer: StreamWriter, request_id: RequestId, message: str, *, code: int = CONNECTION_CLOSED
    ) -> None:
        """As the SDK's, but an SSE event over the bound is told like a stdio message over it."""
        over = _SSE_OVER.search(message)
        if over is None:
            await super()._resolve_abandoned_request(read_stream_writer, request_id, message, code=code)
            return
        try:
            await read_stream_writer.send(too_large(request_id, int(over.group(1)), self.max_message_bytes))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass

    def _consume_modern_cancellation(self, session_message: SessionMessage) -> bool:
        """As the SDK's (at 2026 the cancel is the closed response), and below 2026 the courtesy cancel, still
        sent, also closes the abandoned request's response, so nothing goes on reading it."""
        if super()._consume_modern_cancellation(session_message):
            return True
        message = session_message.message
        if isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
            request_id = cancelled_request_id_from_params(message.params)
            post = self._in_flight_posts.get(request_id) if request_id is not None else None
            if post is not None:
                post.scope.cancel()
        return False


def _error(request_id: RequestId, code: int, text: str) -> SessionMessage:
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=text)))


@asynccontextmanager
async def bounded_http_client(
    url: str,
    http_client: httpx2.AsyncClient,
    *,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    drops: ReplyDrops | None = None,
    terminate_on_close: bool = True,
) -> AsyncGenerator[Any, None]:
    """A streamable-HTTP transport for ``mcp.Client`` (the streams of the SDK's ``streamable_http_client``) over
    ``http_client``, which the caller opens and closes; replies checked and bodies bounded as the module says.

    Args:
        url: The server's MCP endpoint.
        http_client: The HTTP client (its headers, auth and hooks); :func:`bound_bodies` is applied to it.
        max_message_bytes: The bound on one reply (a JSON body, an SSE event) and on any other body.
        drops: Where dropped replies are counted (one per transport if None).
        terminate_on_close: Send the session's DELETE on exit.
    """
    transport = BoundedHTTPTransport(url, max_message_bytes=max_message_bytes, drops=drops)
    bound_bodies(http_client, max_message_bytes)
    read_writer, read_stream = create_context_streams[SessionMessage | Exception](0)
    write_stream, write_reader = create_context_streams[SessionMessage](0)
    async with read_writer, read_stream, write_stream, write_reader, anyio.create_task_group() as tg:

        def start_get_stream() -> None:
            tg.start_soon(transport.handle_get_stream, http_client, read_writer)

        tg.start_soon(transport.post_writer, http_client, write_reader, read_writer, write_stream, start_get_stream, tg)
        try:
            yield read_stream, write_stream
        finally:
            if transport.session_id and terminate_on_close:
                await transport.terminate_session(http_client)
            tg.cancel_scope.cancel()
