"""ToolHub: every MCP server of an env behind one tool namespace, with a sync and an async face."""

from __future__ import annotations

import asyncio
import atexit
import fnmatch
import json
import logging
import re
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from mcp import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from aworld_gym.core.actions import ToolCall
from aworld_gym.core.errors import ConfigError, ServerError
from aworld_gym.mcp.config import ServerSpec, parse_mcp_config
from aworld_gym.mcp.connection import POOL, Connection
from aworld_gym.mcp.loop import HubLoop
from aworld_gym.mcp.validate import make_validator
from aworld_gym.mcp.watchdog import Watchdog

logger = logging.getLogger(__name__)
META_PREFIX = "aworld_gym/"
DEFAULT_CALL_TIMEOUT_S = 60.0
_NAME_RE = re.compile(r"[^a-zA-Z0-9_-]")

# Error kinds of a ToolResult (``None`` when the call succeeded).
UNKNOWN_TOOL = "unknown_tool"
BAD_ARGUMENTS = "bad_arguments"
TOO_LARGE = "too_large"
TOOL_ERROR = "tool_error"
TIMEOUT = "timeout"
SERVER_DIED = "server_died"
REFUSED = "refused"  # the env's guard refused the call (e.g. a navigation off the task's site)

# guard(tool_name, arguments) -> None to let the call through, or the reason it is refused.
Guard = Callable[[str, Mapping[str, Any]], "str | None"]
T = TypeVar("T")


@dataclass
class ToolResult:
    """The outcome of one tool call, as the env shows it to the model."""

    call: ToolCall
    text: str
    error: str | None = None
    server: str | None = None
    latency_s: float = 0.0
    truncated: bool = False
    structured: Any = None

    @property
    def is_error(self) -> bool:
        return self.error is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.call.id,
            "name": self.call.name,
            "server": self.server,
            "text": self.text,
            "error": self.error,
            "latency_s": round(self.latency_s, 6),
            "truncated": self.truncated,
        }


@dataclass
class _Tool:
    exposed: str
    name: str
    conn: Connection
    schema: dict[str, Any]
    description: str
    validator: Any = field(default=None, repr=False)


_open_hubs: weakref.WeakSet[ToolHub] = weakref.WeakSet()
_open_lock = threading.Lock()


@atexit.register
def _close_open_hubs() -> None:
    with _open_lock:
        hubs = list(_open_hubs)
    for hub in hubs:
        try:
            hub.close()
        except Exception:  # noqa: BLE001 - failures here become data, not crashes
            pass


class ToolHub:
    """Connects to MCP servers once and routes tool calls to them.

    Args:
        mcp_config: AWorld-style ``{"mcpServers": {...}}`` (dict, JSON text or path).
        servers: in-process MCP server objects by name.
        allow: glob patterns of tools the agent may use (matched against the tool name, the exposed name and
            ``server__tool``); ``None`` allows all.
        deny: glob patterns of tools hidden from the agent (applied after ``allow``).
        call_timeout: default per-call timeout in seconds (a server's own ``timeout`` takes precedence).
        max_argument_chars: a call whose JSON arguments are longer is refused.
        max_output_chars: tool output beyond this is cut, with a note saying so.
        restart: restart a server whose connection died (at the next call or reset).
        guard: ``guard(tool_name, arguments)`` sees every agent call before it is sent and returns ``None`` or
            the reason to refuse it (the agent gets ``Error: <reason>``, kind ``refused``).
        hidden_arguments: ``{tool name: [argument, ...]}`` removed from the agent's schemas, so that a call
            using them is refused as an unknown argument (e.g. a ``filename`` that would write a file).
    """

    def __init__(
        self,
        mcp_config: Mapping[str, Any] | str | Path | None = None,
        *,
        servers: Mapping[str, Any] | None = None,
        specs: Sequence[ServerSpec] | None = None,
        allow: Iterable[str] | None = None,
        deny: Iterable[str] | None = None,
        call_timeout: float = DEFAULT_CALL_TIMEOUT_S,
        max_argument_chars: int = 200_000,
        max_output_chars: int = 20_000,
        restart: bool = True,
        guard: Guard | None = None,
        hidden_arguments: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        if call_timeout <= 0:
            raise ConfigError("call_timeout must be a positive number of seconds")
        self.specs = list(specs) if specs is not None else parse_mcp_config(mcp_config, servers)
        self.allow = list(allow) if allow is not None else None
        self.deny = list(deny or [])
        self.call_timeout = float(call_timeout)
        self.max_argument_chars = max_argument_chars
        self.max_output_chars = max_output_chars
        self.restart = restart
        self.guard = guard
        self.sequential = False  # run a turn's calls one after another (a single stateful page)
        self.hidden_arguments = {k: frozenset(v) for k, v in (hidden_arguments or {}).items()}
        self.session_id = uuid.uuid4().hex
        self.episode = 0
        self.files: tuple[str, ...] = ()
        self.restarts = 0
        self._conns: list[Connection] = []
        self._tools: dict[str, _Tool] = {}
        self._started = False
        self._closed = False
        self._loop = HubLoop()
        self._watchdog = Watchdog()
        self._guard: float | None = None

    # ----- sync face -------------------------------------------------------------------------------------
    def start(self) -> ToolHub:
        """Connect to every server (concurrently). Raises :class:`ServerError` naming the failing server."""
        if not self._started:
            self._loop.run(self.astart())
        return self

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The agent's tools as OpenAI tool schemas (``{"type": "function", "function": {...}}``)."""
        return [
            {"type": "function", "function": {"name": t.exposed, "description": t.description, "parameters": t.schema}}
            for t in self._tools.values()
        ]

    @property
    def tool_names(self) -> list[str]:
        return list(self._tools)

    def call(self, calls: Sequence[ToolCall]) -> list[ToolResult]:
        """Run ``calls`` concurrently and return one result per call, in order. Never raises for a bad call."""
        return self._loop.run(self._acall(list(calls)), timeout=self._guard_timeout())

    def run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run an env's own coroutine (that awaits :meth:`acall_internal`) on the hub's loop, from sync code."""
        return self._loop.run(coro, timeout=self._guard_timeout())

    def reconnect(self, server: str) -> None:
        """Drop the session with ``server`` (e.g. it was restarted and forgot it): the next call opens a new one."""
        for conn in self._conns:
            if conn.spec.name == server and not conn.shared:
                conn.mark_dead(conn.generation)

    def begin_episode(self, files: Sequence[str] = ()) -> None:
        """Start a new episode: restart dead servers, new episode key for per-session state, reset tools."""
        self._loop.run(self.abegin_episode(files))

    def close(self) -> None:
        """Close every session and stop every server process. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        with _open_lock:
            _open_hubs.discard(self)
        try:
            self._loop.run(self._aclose(), timeout=60)
        finally:
            self._loop.close()
            for conn in self._conns:
                if not conn.shared:
                    conn.close_log()

    def __enter__(self) -> ToolHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- async face (awaitable from any event loop) ---------------------------------------------------
    async def astart(self) -> ToolHub:
        """Async :meth:`start`."""
        if self._closed:
            raise ServerError("this ToolHub is closed; create a new one")
        if not self._started:
            await self._loop.arun(self._astart())
        return self

    async def acall(self, calls: Sequence[ToolCall]) -> list[ToolResult]:
        """Async :meth:`call`."""
        return await self._loop.arun(self._acall(list(calls)))

    async def acall_internal(self, tool: str, arguments: Mapping[str, Any] | None = None) -> Any:
        """Call any tool of the servers for the env's own use (no allow-list, no guard, not shown to the agent).

        Returns the raw ``CallToolResult`` (images included); raises :class:`ServerError` when the server is down,
        the call times out or fails in transport. A tool-level error comes back as a result with ``is_error``.
        """
        return await self._loop.arun(self._call_internal(tool, dict(arguments or {})))

    async def abegin_episode(self, files: Sequence[str] = ()) -> None:
        """Async :meth:`begin_episode`."""
        await self._loop.arun(self._abegin_episode(tuple(files)))

    async def aclose(self) -> None:
        """Async :meth:`close`."""
        if self._closed:
            return
        self._closed = True
        with _open_lock:
            _open_hubs.discard(self)
        await self._loop.arun(self._aclose())
        for conn in self._conns:
            if not conn.shared:
                conn.close_log()

    # ----- internals (run on the background loop) -------------------------------------------------------
    async def _astart(self) -> None:
        async def open_one(spec: ServerSpec) -> Connection:
            if spec.share_session and spec.type in ("streamable-http", "sse"):
                return await POOL.acquire(spec)
            conn = Connection(spec)
            try:
                await conn.start()
            except BaseException:
                conn.close_log()
                raise
            return conn

        results = await asyncio.gather(*(open_one(s) for s in self.specs), return_exceptions=True)
        self._conns = [r for r in results if isinstance(r, Connection)]
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self._aclose()
            raise errors[0] if isinstance(errors[0], ServerError) else ServerError(str(errors[0]))
        self._build_tools()
        self._started = True
        with _open_lock:
            _open_hubs.add(self)

    def _build_tools(self) -> None:
        counts: dict[str, int] = {}
        for conn in self._conns:
            for tool in conn.tools:
                counts[tool.name] = counts.get(tool.name, 0) + 1
        hidden = {c.spec.reset_tool for c in self._conns if c.spec.reset_tool}
        tools: dict[str, _Tool] = {}
        for conn in self._conns:
            for tool in conn.tools:
                qualified = _NAME_RE.sub("_", f"{conn.spec.name}__{tool.name}")[:64]
                exposed = qualified if counts[tool.name] > 1 else tool.name
                if tool.name in hidden or not self._allowed(tool.name, exposed, qualified):
                    continue
                schema = dict(tool.input_schema or {"type": "object", "properties": {}})
                drop = self.hidden_arguments.get(tool.name)
                if drop:
                    props = schema.get("properties") or {}
                    schema["properties"] = {k: v for k, v in props.items() if k not in drop}
                    if "required" in schema:
                        schema["required"] = [k for k in schema["required"] if k not in drop]
                tools[exposed] = _Tool(exposed, tool.name, conn, schema, (tool.description or "").strip())
        self._tools = tools

    def _allowed(self, *names: str) -> bool:
        def match(patterns: Iterable[str]) -> bool:
            return any(fnmatch.fnmatchcase(n, p) for n in names for p in patterns)

        if self.allow is not None and not match(self.allow):
            return False
        return not match(self.deny)

    def _meta(self) -> dict[str, Any]:
        return {
            f"{META_PREFIX}session": self.session_id,
            f"{META_PREFIX}episode": self.episode,
            f"{META_PREFIX}files": list(self.files),
        }

    async def _ensure_alive(self, conn: Connection) -> None:
        if conn.alive or not self.restart or self._closed:
            return
        if conn.restart_lock is None:
            conn.restart_lock = asyncio.Lock()
        async with conn.restart_lock:  # hubs sharing the session restart it once
            if conn.alive:
                return
            await conn.stop()
            await conn.start()
            self.restarts += 1
        # The server is new: re-map its tools (names do not change for a healthy restart).
        for tool in self._tools.values():
            if tool.conn is conn:
                tool.validator = None

    async def _abegin_episode(self, files: tuple[str, ...]) -> None:
        if not self._started:
            await self._astart()
        self.episode += 1
        self.files = files
        for conn in self._conns:
            try:
                await self._ensure_alive(conn)
            except ServerError:
                continue  # the episode's calls to it will report the failure
            if conn.spec.reset_tool and conn.alive:
                try:
                    async with asyncio.timeout(self._timeout(conn)):
                        result = await conn.client.call_tool(conn.spec.reset_tool, {}, meta=self._meta())
                    if result.is_error:
                        logger.warning("reset tool %r of %r failed: %s", conn.spec.reset_tool, conn.spec.name,
                                       render_content(result)[:300])  # fmt: skip
                except Exception as exc:  # noqa: BLE001 - the episode's own calls will report a dead server
                    logger.warning("reset tool %r of %r failed: %r", conn.spec.reset_tool, conn.spec.name, exc)

    async def _acall(self, calls: list[ToolCall]) -> list[ToolResult]:
        if not self._started:
            await self._astart()
        if len(calls) == 1 or self.sequential:
            return [await self._call_one(c) for c in calls]  # no extra task for the common case
        return list(await asyncio.gather(*(self._call_one(c) for c in calls)))

    def _timeout(self, conn: Connection) -> float:
        return conn.spec.timeout or self.call_timeout

    def _guard_timeout(self) -> float:
        if self._guard is None:
            slowest = max((s.timeout or self.call_timeout for s in self.specs), default=self.call_timeout)
            self._guard = slowest + 90.0  # restart + connect time on top of the slowest call
        return self._guard

    async def _call_one(self, call: ToolCall) -> ToolResult:
        start = time.perf_counter()
        tool = self._tools.get(call.name)
        if tool is None:
            names = ", ".join(self._tools) or "(none)"
            return ToolResult(call, f"Error: unknown tool {call.name!r}. Available tools: {names}.", UNKNOWN_TOOL)
        if self.guard is not None:
            try:
                reason = self.guard(tool.name, call.arguments)
            except Exception as exc:  # noqa: BLE001 - a failing guard refuses, it does not crash the step
                reason = f"the call could not be checked ({type(exc).__name__}: {exc})"
            if reason is not None:
                return ToolResult(call, f"Error: {reason}", REFUSED, server=tool.conn.spec.name)
        problem = self._check_arguments(tool, call.arguments)
        if problem is not None:
            kind, text = problem
            return ToolResult(call, f"Error: {text}", kind, server=tool.conn.spec.name)
        conn = tool.conn
        timeout = self._timeout(conn)
        if not conn.alive:
            try:
                await self._ensure_alive(conn)
            except ServerError as exc:
                text = f"Error: tool server {conn.spec.name!r} is down: {exc}"
                return self._result(call, tool, text, SERVER_DIED, start)
        if not conn.alive or conn.client is None:
            return self._result(call, tool, f"Error: tool server {conn.spec.name!r} is down.", SERVER_DIED, start)
        generation = conn.generation  # a late error of an old session must not kill its replacement
        # The watchdog (one timer for all calls, no extra task) bounds every transport, in-process included;
        # cancelling the request also tells the session to drop it.
        key, deadline = self._watchdog.add(timeout)
        try:
            result = await conn.client.call_tool(tool.name, call.arguments, meta=self._meta())
        except asyncio.CancelledError:
            if deadline.expired():
                return self._timeout_result(call, tool, timeout, start)
            raise
        except MCPError as exc:
            if deadline.expired():
                return self._timeout_result(call, tool, timeout, start)
            if exc.code == REQUEST_TIMEOUT:
                return self._timeout_result(call, tool, timeout, start)
            if exc.code == CONNECTION_CLOSED or _session_gone(exc):
                conn.mark_dead(generation)
                text = f"Error: tool server {conn.spec.name!r} died during the call ({exc.message})."
                return self._result(call, tool, text, SERVER_DIED, start)
            return self._result(call, tool, f"Error: {exc.message}", TOOL_ERROR, start)
        except Exception as exc:  # noqa: BLE001 - failures here become data, not crashes
            if deadline.expired():
                return self._timeout_result(call, tool, timeout, start)
            if conn.transport_done():  # the session is really gone (pipe closed, HTTP stream ended)
                conn.mark_dead(generation)
                text = f"Error: lost the connection to tool server {conn.spec.name!r}: {type(exc).__name__}: {exc}"
                return self._result(call, tool, text, SERVER_DIED, start)
            # One failed request (a bad result, an HTTP hiccup) on a live session: this call fails, the session
            # (perhaps shared by many envs) stays.
            return self._result(call, tool, f"Error: the call failed: {type(exc).__name__}: {exc}", TOOL_ERROR, start)
        finally:
            self._watchdog.remove(key)
            deadline.expired()  # a cancellation that fired as the call ended must not linger on the task
        text = render_content(result)
        return self._result(
            call,
            tool,
            text,
            TOOL_ERROR if result.is_error else None,
            start,
            structured=getattr(result, "structured_content", None),
        )

    async def _call_internal(self, name: str, arguments: dict[str, Any]) -> Any:
        if not self._started:
            await self._astart()
        server, _, raw = name.rpartition("__")
        conn = next((c for c in self._conns if (not server or c.spec.name == server) and
                     any(t.name == raw for t in c.tools)), None)  # fmt: skip
        if conn is None:
            raise ServerError(f"no server has a tool named {name!r}")
        await self._ensure_alive(conn)
        if not conn.alive or conn.client is None:
            raise ServerError(f"tool server {conn.spec.name!r} is down")
        generation = conn.generation
        timeout = self._timeout(conn)
        try:
            async with asyncio.timeout(timeout):
                return await conn.client.call_tool(raw, arguments, meta=self._meta())
        except TimeoutError:
            raise ServerError(f"{name!r} did not answer within {timeout:g} s") from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED or _session_gone(exc):
                conn.mark_dead(generation)
            raise ServerError(f"{name!r} failed: {exc.message}") from None
        except Exception as exc:  # noqa: BLE001 - reported to the env as a ServerError
            if conn.transport_done():
                conn.mark_dead(generation)
            raise ServerError(f"{name!r} failed: {type(exc).__name__}: {exc}") from None

    def _timeout_result(self, call: ToolCall, tool: _Tool, timeout: float, start: float) -> ToolResult:
        text = f"Error: tool {call.name!r} did not answer within {timeout:g} s and was abandoned."
        return self._result(call, tool, text, TIMEOUT, start)

    def _result(
        self, call: ToolCall, tool: _Tool, text: str, error: str | None, start: float, structured: Any = None
    ) -> ToolResult:
        text, cut = truncate(text, self.max_output_chars)
        return ToolResult(
            call,
            text,
            error,
            server=tool.conn.spec.name,
            latency_s=time.perf_counter() - start,
            truncated=cut,
            structured=structured,
        )

    def _check_arguments(self, tool: _Tool, args: dict[str, Any]) -> tuple[str, str] | None:
        try:
            size = len(json.dumps(args, ensure_ascii=False))
        except (TypeError, ValueError):
            return BAD_ARGUMENTS, f"the arguments of {tool.exposed!r} are not JSON-serialisable"
        if size > self.max_argument_chars:
            return TOO_LARGE, (
                f"the arguments of {tool.exposed!r} are {size} characters long; the limit is "
                f"{self.max_argument_chars}. Send less data per call."
            )
        props = tool.schema.get("properties")
        if isinstance(props, Mapping) and tool.schema.get("additionalProperties") is not True:
            unknown = [k for k in args if k not in props]
            if unknown:
                expected = ", ".join(props) or "no arguments"
                return BAD_ARGUMENTS, (
                    f"{tool.exposed!r} got unknown argument(s) {', '.join(map(repr, unknown))}; expected: {expected}."
                )
        if tool.validator is None:
            tool.validator = make_validator(tool.schema) or False
        if tool.validator is False:
            return None
        errors = tool.validator(args)
        if errors:
            return BAD_ARGUMENTS, f"invalid arguments for {tool.exposed!r}: " + "; ".join(errors[:5])
        return None

    async def _aclose(self) -> None:
        self._watchdog.close()
        await asyncio.gather(
            *((POOL.release(c) if c.shared else c.stop()) for c in self._conns), return_exceptions=True
        )
        self._started = False


def _session_gone(exc: MCPError) -> bool:
    """An HTTP server that restarted answers an old session id with 404, which the client reports like this."""
    return "session terminated" in str(exc.message).lower()


def truncate(text: str, limit: int) -> tuple[str, bool]:
    """Cut ``text`` to ``limit`` characters and say so; returns (text, was_cut)."""
    if len(text) <= limit:
        return text, False
    note = f"\n[... output truncated: showing the first {limit} of {len(text)} characters]"
    return text[:limit] + note, True


def render_content(result: Any) -> str:
    """Render an MCP ``CallToolResult`` as text for the model."""
    parts: list[str] = []
    for block in result.content or []:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            size = len(getattr(block, "data", "") or "") * 3 // 4
            parts.append(f"[{kind}: {getattr(block, 'mime_type', None) or 'unknown type'}, about {size} bytes]")
        elif kind == "resource":
            res = block.resource
            parts.append(getattr(res, "text", None) or f"[resource {res.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource link {block.uri}]")
        else:
            parts.append(str(block))
    if not parts and getattr(result, "structured_content", None) is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)
