"""One live MCP session to one server, owned by a task on the background loop."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from aworld_gym.base.errors import ServerError
from aworld_gym.mcp.capabilities import DEFAULT as DEFAULT_CAPABILITIES
from aworld_gym.mcp.capabilities import Capabilities, client_info
from aworld_gym.mcp.client_requests import ClientRequests
from aworld_gym.mcp.config import ServerSpec
from aworld_gym.mcp.redact import module_logger, redact
from aworld_gym.mcp.tools.listing import LIST_CHANGED, RELIST_TIMEOUT_S, list_tools, why_refused
from aworld_gym.mcp.transports import discover
from aworld_gym.mcp.transports.errlog import CappedLog
from aworld_gym.mcp.transports.replies import ReplyDrops, WriteClock

logger = module_logger(__name__)

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0


class Connection:
    """Opens a ``mcp.Client`` for a :class:`ServerSpec` and keeps it open until :meth:`stop`.

    The client's async context is entered and exited by one long-lived task (anyio requires that), so calls
    made from other tasks on the same loop share the one session.
    """

    def __init__(self, spec: ServerSpec, capabilities: Capabilities | None = None) -> None:
        self.spec = spec
        self.requests = ClientRequests(capabilities or DEFAULT_CAPABILITIES, spec.name)  # what the server may ask
        self.client: Any = None
        self.tools: list[Any] = []
        self.tools_changed = False  # the server sent tools/list_changed: re-listed before the next step
        self.tools_version = 0  # +1 at each listing (a start, a restart, a re-listing)
        self.alive = False
        self.generation = 0
        self.shared = False
        self.restart_lock: asyncio.Lock | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._stderr = CappedLog()  # a (stdio) server's stderr, bounded on disk
        self.reply_drops = ReplyDrops(spec.name)  # late and forged replies dropped by the transport, across restarts
        self.writes = WriteClock()  # (stdio) since when the write in progress has waited for the server to read

    def stderr_tail(self, limit: int = 2000) -> str:
        """The last characters the (stdio) server wrote to stderr."""
        return self._stderr.tail(limit)

    def _transport(self) -> tuple[Any, list[Any]]:
        """Return (what Client() takes, extra async contexts to close after the client)."""
        spec = self.spec
        if spec.type == "inprocess":
            return spec.server, []
        if spec.type == "stdio":
            from mcp import StdioServerParameters

            from aworld_gym.mcp.transports.stdio import WRITE_TIMEOUT_S, bounded_stdio_client

            params = StdioServerParameters(
                command=spec.command or "", args=list(spec.args), env=dict(spec.env) or None, cwd=spec.cwd
            )
            # a write the server has not taken within the call timeout (at least 5 s) ends the session
            write_timeout = max(WRITE_TIMEOUT_S, spec.timeout or 0.0)
            return bounded_stdio_client(params, errlog=self._stderr.file, drops=self.reply_drops,
                                        write_timeout=write_timeout, writes=self.writes), []  # fmt: skip
        import httpx2
        from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

        from aworld_gym.mcp.auth.connect import connection_auth

        self._refusal, self._auth_failed = None, False

        def auth_failed(error: Exception) -> None:  # its own error names the step; an earlier 401 would only confuse
            self._refusal, self._auth_failed = None, True

        auth = connection_auth(spec, auth_failed)  # OAuth (None without "auth"): one provider per loop and identity

        # the connections the client may open, and keep alive when idle: httpx's default (100) would cap a shared
        # session's calls in flight silently; by default none (a connection per call in flight), else the entry's
        limits = httpx2.Limits(max_connections=spec.max_connections, max_keepalive_connections=spec.max_connections)

        def http_client(headers: Any = None, timeout: Any = None, auth: Any = None) -> Any:
            # the SDK's create_mcp_http_client (its timeouts, no redirects followed) with our limits
            timeout = timeout or httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
            http = httpx2.AsyncClient(headers=headers, timeout=timeout, auth=auth, limits=limits)
            http.event_hooks.setdefault("response", []).append(self._note_refusal)
            return http

        if spec.type == "sse":
            from mcp.client.sse import sse_client

            return sse_client(
                spec.url or "",
                headers=dict(spec.headers) or None,
                timeout=spec.timeout or 30.0,
                sse_read_timeout=spec.sse_read_timeout or 300.0,
                httpx_client_factory=http_client,
                auth=auth,
            ), []
        from aworld_gym.mcp.transports.http import bounded_http_client

        timeout = httpx2.Timeout(spec.timeout or 30.0, read=spec.sse_read_timeout or 300.0)
        if spec.socket:  # a local server on a Unix socket (its file permissions are the authentication)
            from aworld_gym.mcp.transports.http import quiet_cancelled_reads

            quiet_cancelled_reads(asyncio.get_running_loop())  # anyio's benign race on a cancelled read: no traceback
            http = httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(uds=spec.socket, limits=limits),
                                      headers=dict(spec.headers) or None, timeout=timeout)  # fmt: skip
            http.event_hooks.setdefault("response", []).append(self._note_refusal)
        else:
            http = http_client(headers=dict(spec.headers) or None, timeout=timeout, auth=auth)
        # Replies checked against their request id (late and forged ones dropped and counted, across reconnects) and
        # bodies bounded like stdio messages: aworld_gym.mcp.transports.http.
        return bounded_http_client(spec.url or "", http, drops=self.reply_drops), [http]

    async def _note_refusal(self, response: Any) -> None:
        """Keep the last 4xx/5xx status and body start of the server's answers: the SDK reports them as "Server
        returned an error response", which would hide a 401 (a wrong token) from the user. A later 2xx clears it
        (it was recovered from, e.g. the 401 before OAuth); a failed authorization's own error wins over both. A 401
        that asks for a Bearer token of a server without "auth" says how to configure it."""
        if getattr(self, "_auth_failed", False):
            return
        status = response.status_code
        if status < 400:
            if status < 300:
                self._refusal = None
            return
        try:
            body = (await response.aread()).decode("utf-8", "replace")[:200].strip()
        except Exception:  # noqa: BLE001 - a body we cannot read: the status says enough
            body = ""
        note = f"HTTP {status}" + (f": {body}" if body else "")
        challenge = response.headers.get("www-authenticate", "").lower()
        if status == 401 and self.spec.auth is None and challenge.startswith("bearer"):
            note += '; the server asks for OAuth: add an "auth" object to its mcp_config entry (docs/env-mcp.md)'
        self._refusal = note

    async def start(self, timeout: float = START_TIMEOUT_S) -> None:
        """Connect and list the server's tools; raise :class:`ServerError` with the reason on failure."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._run(ready, self._stop), name=f"mcp-{self.spec.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), timeout)
        except TimeoutError:
            await self.stop()
            raise ServerError(self._describe(f"did not finish connecting within {timeout:.0f} s")) from None
        except ServerError:
            await self.stop()
            raise
        self.generation += 1

    async def _run(self, ready: asyncio.Future[None], stop: asyncio.Event) -> None:
        # A server whose era is known is not probed (server/discover) again: see aworld_gym.mcp.transports.discover. If the
        # remembered era fails to connect, it is forgotten and the connect probes once more.
        mode, prior = discover.connect_mode(self.spec)
        try:
            while True:
                try:
                    await self._session(ready, stop, mode, prior)
                    return
                except Exception as exc:
                    if ready.done() or mode == "auto":
                        raise
                    logger.info("MCP server %r did not connect as %s (%r); probing its protocol again",
                                self.spec.name, mode, _first_leaf(exc))  # fmt: skip
                    discover.forget(self.spec)
                    mode, prior = "auto", None
        except asyncio.CancelledError:
            if not ready.done():
                if mode != "auto":  # e.g. start()'s timeout: the next start probes rather than wait on this era again
                    discover.forget(self.spec)
                ready.set_exception(ServerError(self._describe("connection was cancelled")))
        except BaseException as exc:  # noqa: BLE001 - failures here become data, not crashes
            if not ready.done():
                leaf = _first_leaf(exc)
                refusal = getattr(self, "_refusal", None)
                why = f"failed to start: {type(leaf).__name__}: {leaf}" + (f" ({refusal})" if refusal else "")
                ready.set_exception(ServerError(self._describe(why)))
            else:
                logger.warning("MCP server %r connection ended: %r", self.spec.name, exc)
        finally:
            self.alive = False
            self.client = None

    async def relist(self, timeout: float = RELIST_TIMEOUT_S) -> None:
        """Re-list the tools when the server said they changed (``tools_version`` counts the listings); a listing
        that fails keeps the old list, with a warning."""
        if not self.tools_changed or not self.alive or self.client is None:
            return
        self.tools_changed = False
        try:
            async with asyncio.timeout(self.spec.timeout or timeout):
                tools = await list_tools(self.client, self.spec.name)
        except Exception as exc:  # noqa: BLE001 - the old list stays; the calls will tell whether the server is alive
            logger.warning("MCP server %r said its tools changed, but listing them failed (%s): the old list stays",
                           self.spec.name, why_refused(exc))  # fmt: skip
            return
        self.tools = tools
        self.tools_version += 1

    async def _on_message(self, message: Any) -> None:
        """The SDK client's ``message_handler``: ``notifications/tools/list_changed`` marks the tools for re-listing
        before the next step."""
        if getattr(message, "method", None) == LIST_CHANGED:
            self.tools_changed = True

    async def _session(self, ready: asyncio.Future[None], stop: asyncio.Event, mode: str, prior: Any) -> None:
        """Open the session (``mode``: ``"auto"``, ``"legacy"`` or a version), list its tools, hold it till ``stop``."""
        from mcp import Client

        transport, extras = self._transport()
        async with contextlib.AsyncExitStack() as stack:
            for extra in extras:
                await stack.enter_async_context(extra)
            client = Client(transport, mode=mode, prior_discover=prior, client_info=client_info(),
                            message_handler=self._on_message, **self.requests.sdk_callbacks())  # fmt: skip
            client = await stack.enter_async_context(client)
            self.tools, self.tools_changed = await list_tools(client, self.spec.name), False
            self.tools_version += 1
            if mode == "auto":
                discover.remember(self.spec, client)
            self.client = client
            self.alive = True
            ready.set_result(None)
            await stop.wait()

    def _describe(self, what: str) -> str:
        spec = self.spec
        msg = f"MCP server {spec.name!r} ({spec.type}, {spec.where()}) {what}"
        tail = self.stderr_tail()
        if tail:
            msg += f"\n--- server stderr (tail) ---\n{tail}"
        return redact(msg)  # the URL's credentials, a header echoed back, a token the server printed

    def mark_dead(self, generation: int | None = None) -> None:
        """Mark the session dead (only if it is still the ``generation`` the failing call used)."""
        if generation is None or generation == self.generation:
            self.alive = False

    def transport_done(self) -> bool:
        """Whether the task that owns the session has ended (the transport is gone)."""
        return self._task is None or self._task.done()

    async def stop(self) -> None:
        """Close the session (for stdio: stop the process and its process group). Safe to call twice."""
        task, self._task = self._task, None
        self.alive = False
        if self._stop is not None:
            self._stop.set()
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), STOP_TIMEOUT_S)
            except (TimeoutError, Exception):  # noqa: BLE001 - failures here become data, not crashes
                task.cancel()
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(task, 5.0)

    def close_log(self) -> None:
        with contextlib.suppress(Exception):
            self._stderr.close()


def _first_leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
