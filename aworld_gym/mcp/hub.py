"""ToolHub: every MCP server of an env behind one tool namespace, with a sync and an async face.

The hub owns the sessions and routes calls; the pieces live next to it: ``namespace`` (which tools the agent
sees, under which names), ``arguments`` (what may be sent), ``calls`` (sending one call and reading how it
ended) and ``results`` (:class:`ToolResult` and its error kinds, re-exported here).
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import functools
import threading
import time
import uuid
import weakref
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from aworld_gym.base.calls import ToolCall
from aworld_gym.base.errors import ServerError
from aworld_gym.mcp.cache import KEY_META, HubCache
from aworld_gym.mcp.config import ServerSpec, parse_mcp_config
from aworld_gym.mcp.loop import HubLoop
from aworld_gym.mcp.options import ToolOptions
from aworld_gym.mcp.redact import module_logger, redact, redact_json
from aworld_gym.mcp.results import (
    REFUSED,
    SERVER_DIED,
    UNKNOWN_TOOL,
    ToolResult,
    cap_images,
    render_content,
)
from aworld_gym.mcp.tools.arguments import check_arguments, json_problem
from aworld_gym.mcp.tools.calls import make_result, send, send_internal
from aworld_gym.mcp.tools.guard import guarded_step, run_calls
from aworld_gym.mcp.tools.namespace import RoutedTool, build_tools, find_tool, openai_tools
from aworld_gym.mcp.transports.connection import Connection
from aworld_gym.mcp.transports.pool import POOL
from aworld_gym.mcp.watchdog import Watchdog

__all__ = ["META_PREFIX", "ToolHub"]

logger = module_logger(__name__)
META_PREFIX = "aworld_gym/"
T = TypeVar("T")


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
        specs: parsed server specs instead of ``mcp_config`` and ``servers``.
        options: every setting of the calls (allow/deny lists, guard, timeout, output and argument limits, images,
            how server requests are answered...), one field each: :class:`~aworld_gym.mcp.options.ToolOptions`.
            ``hub.options`` may be replaced between steps (e.g. ``dataclasses.replace(hub.options, sequential=True)``).
        work_folders: what ``"{work}"`` in ``options.roots`` (and in a server entry's own ``roots``) stands for.
        where: who made the hub, as errors about its roots name it (``MCPEnv``).
    """

    def __init__(
        self,
        mcp_config: Mapping[str, Any] | str | Path | None = None,
        *,
        servers: Mapping[str, Any] | None = None,
        specs: Sequence[ServerSpec] | None = None,
        options: ToolOptions | None = None,
        work_folders: Iterable[str | Path] = (),
        where: str = "ToolHub",
    ) -> None:
        self.options = options if options is not None else ToolOptions()
        self.specs = list(specs) if specs is not None else parse_mcp_config(mcp_config, servers)
        self.capabilities = self.options.capabilities(work_folders, where)
        self._caps = {s.name: self.capabilities.merged(s.capabilities, f"mcpServers[{s.name!r}]") for s in self.specs}
        self.session_id = uuid.uuid4().hex
        self.episode = 0
        self.files: tuple[str, ...] = ()
        self.restarts = 0
        self._conns: list[Connection] = []
        self._tools: dict[str, RoutedTool] = {}
        self._listed: tuple[int, ...] = ()  # each server's tools_version when the table was built
        self.tools_version = 0  # +1 each time a server's re-listed tools change what the agent reads
        self._started = False
        self._closed = False
        # A hub with a pooled server driven synchronously lives on the background loop, so that it shares the pool.
        self._loop = HubLoop(background=any(s.pool for s in self.specs))
        self._watchdog = Watchdog()
        self.cache = HubCache(self.options.cache, self.specs)  # record and replay of the calls (mcp/cache)
        self._step_timeout_s: float | None = None  # the wall bound of one step (the slowest call + restart)

    # ----- sync face -------------------------------------------------------------------------------------
    def start(self) -> ToolHub:
        """Connect to every server (concurrently). Raises :class:`ServerError` naming the failing server."""
        if not self._started:
            self._loop.run(self.astart())
        return self

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The agent's tools as OpenAI tool schemas (``{"type": "function", "function": {...}}``)."""
        return openai_tools(self._tools.values())

    @property
    def tool_names(self) -> list[str]:
        return list(self._tools)

    def call(self, calls: Sequence[ToolCall]) -> list[ToolResult]:
        """Run ``calls`` concurrently and return one result per call, in order. Never raises for a bad call."""
        return self._loop.run(self._acall(list(calls)), timeout=self._step_timeout())

    def run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run an env's own coroutine (that awaits :meth:`acall_internal`) on the hub's loop, from sync code."""
        return self._loop.run(coro, timeout=self._step_timeout())

    def reconnect(self, server: str) -> None:
        """Drop the session with ``server`` (e.g. it was restarted and forgot it): the next call opens a new one."""
        for conn in self._conns:
            if conn.spec.name == server and not conn.shared:
                conn.mark_dead(conn.generation)

    def begin_episode(self, files: Sequence[str] = (), *, task: str | None = None, seed: int | None = None) -> None:
        """Start a new episode: restart dead servers, new episode key for per-session state, reset tools. ``task``
        and ``seed`` name the episode for the tool cache's task and episode scopes."""
        self._loop.run(self.abegin_episode(files, task=task, seed=seed))

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
        the call times out or fails in transport, or the arguments cannot be sent (a lone surrogate, ``NaN``...:
        the session is left alone). A tool-level error comes back as a result with ``is_error``.
        """
        return await self._loop.arun(self._call_internal(tool, dict(arguments or {})))

    async def abegin_episode(
        self, files: Sequence[str] = (), *, task: str | None = None, seed: int | None = None
    ) -> None:
        """Async :meth:`begin_episode`."""
        await self._loop.arun(self._abegin_episode(tuple(files), task, seed))

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
            if self.cache.mode(spec.name) == "replay-strict":  # never the real server: one made from the store
                spec = dataclasses.replace(spec, type="inprocess", server=self.cache.replay_server(spec.name),
                                           pool=None, share_session=False)  # fmt: skip
            if spec.pool or (spec.share_session and spec.type in ("streamable-http", "sse")):
                conn = await POOL.acquire(spec, self._caps[spec.name])
            else:
                conn = Connection(spec, self._caps[spec.name])
                try:
                    await conn.start()
                except BaseException:
                    conn.close_log()
                    raise
            if conn.client is not None:
                self.cache.keep_listing(spec.name, conn.tools, conn.client.server_info)  # for a later strict replay
            return conn

        results = await asyncio.gather(*(open_one(s) for s in self.specs), return_exceptions=True)
        self._conns = [r for r in results if isinstance(r, Connection)]
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self._aclose()
            raise errors[0] if isinstance(errors[0], ServerError) else ServerError(redact(str(errors[0])))
        self._rebuild_tools()
        self._started = True
        with _open_lock:
            _open_hubs.add(self)

    def _meta(self) -> dict[str, Any]:
        return {
            f"{META_PREFIX}session": self.session_id,
            f"{META_PREFIX}episode": self.episode,
            f"{META_PREFIX}files": list(self.files),
        }

    async def _ensure_alive(self, conn: Connection) -> None:
        if conn.alive or not self.options.restart or self._closed:
            return
        if conn.restart_lock is None:
            conn.restart_lock = asyncio.Lock()
        async with conn.restart_lock:  # hubs sharing the session (or pooled process) restart it once
            if conn.alive or self._closed:
                return
            await conn.stop()
            await conn.start()
            self.restarts += 1
        # The server is new: re-map its tools (names do not change for a healthy restart).
        for tool in self._tools.values():
            if tool.conn is conn:
                tool.validator = None

    async def _abegin_episode(self, files: tuple[str, ...], task: str | None = None, seed: int | None = None) -> None:
        if not self._started:
            await self._astart()
        self.episode += 1
        self.files = files
        self.cache.begin_episode(task, seed)
        for conn in self._conns:
            try:
                await self._ensure_alive(conn)
            except ServerError:
                continue  # the episode's calls to it will report the failure
            strict = self.cache.mode(conn.spec.name) == "replay-strict"  # no real server's state to reset
            if conn.spec.reset_tool and conn.alive and not strict:
                try:
                    async with asyncio.timeout(self._timeout(conn)):
                        result = await conn.client.call_tool(conn.spec.reset_tool, {}, meta=self._meta())
                    if result.is_error:
                        logger.warning("reset tool %r of %r failed: %s", conn.spec.reset_tool, conn.spec.name,
                                       render_content(result)[:300])  # fmt: skip
                except Exception as exc:  # noqa: BLE001 - the episode's own calls will report a dead server
                    logger.warning("reset tool %r of %r failed: %r", conn.spec.reset_tool, conn.spec.name, exc)
        await self._refresh_tools()  # a server's tools/list_changed (or a restart): its tools listed again

    async def _acall(self, calls: list[ToolCall]) -> list[ToolResult]:
        if not self._started:
            await self._astart()
        await self._refresh_tools()  # tools/list_changed: the table changes between steps, never during one
        step = run_calls(
            self._call_one, calls, self.options.sequential
        )  # bounded even if a call ignores its cancellation
        results = await guarded_step(step, calls, self._conns, self._step_timeout())
        await self._refresh_tools()
        results = [_hide_secrets(r) for r in results]  # a config's secrets, echoed by a server or an error
        return cap_images(results, self.options.images)  # the step's image limits, in call order

    def _timeout(self, conn: Connection) -> float:
        return conn.spec.timeout or self.options.timeout

    def _rebuild_tools(self) -> None:
        """(Re)build the tool table from the connections' tool lists; a rebuild that changes what the agent reads
        (names, descriptions, schemas) adds 1 to ``tools_version``."""
        before = openai_tools(self._tools.values()) if self._listed else None
        options = self.options
        self._tools = build_tools(self._conns, allow=options.allow, deny=options.deny,
                                  hidden_arguments=options.hidden_arguments)  # fmt: skip
        self._listed = tuple(c.tools_version for c in self._conns)
        if before is not None and openai_tools(self._tools.values()) != before:
            self.tools_version += 1

    async def _refresh_tools(self) -> None:
        """Between steps: re-list the tools of servers that sent ``tools/list_changed``, and rebuild the table when
        any server's list is new (a re-listing, a restart)."""
        for conn in self._conns:  # the servers that said their tools changed re-list them
            await conn.relist(self.options.timeout)
        if self._listed != tuple(c.tools_version for c in self._conns):
            self._rebuild_tools()

    def _step_timeout(self) -> float:
        if self._step_timeout_s is None:
            slowest = max((s.timeout or self.options.timeout for s in self.specs), default=self.options.timeout)
            self._step_timeout_s = slowest + 90.0  # restart + connect time on top of the slowest call
        return self._step_timeout_s

    async def _call_one(self, call: ToolCall) -> ToolResult:
        start = time.perf_counter()
        tool = find_tool(self._tools, call.name)  # a server's own name of a renamed tool reaches it too
        if isinstance(tool, list):
            names = ", ".join(tool or self._tools) or "(none)"
            which = "Call it by one of these names" if tool else "Available tools"
            return ToolResult(call, f"Error: unknown tool {call.name!r}. {which}: {names}.", UNKNOWN_TOOL)
        guard = self.options.guard
        if guard is not None:
            try:
                reason = guard(tool.name, call.arguments)
            except Exception as exc:  # noqa: BLE001 - a failing guard refuses, it does not crash the step
                reason = f"the call could not be checked ({type(exc).__name__}: {exc})"
            if reason is not None:
                return ToolResult(call, f"Error: {reason}", REFUSED, server=tool.conn.spec.name)
        problem = check_arguments(
            tool, call.arguments, max_chars=self.options.max_argument_chars, max_depth=self.options.max_argument_depth
        )
        if problem is not None:
            kind, text = problem
            return ToolResult(call, f"Error: {text}", kind, server=tool.conn.spec.name)
        conn = tool.conn
        meta, through = self._meta(), None
        mode = self.cache.mode(conn.spec.name)
        if mode != "live":  # keyed here, before any await: a step's calls advance the episode's chain in call order
            listed = next((t for t in conn.tools if t.name == tool.name), None)
            key = self.cache.key(conn.spec.name, listed, call.arguments) if listed is not None else None
            if mode == "replay-strict":
                meta[KEY_META] = key
            elif listed is not None:
                version = getattr(getattr(conn.client, "server_info", None), "version", None)
                through = functools.partial(self.cache.through, conn.spec.name, listed, call.arguments, key,
                                            version=version)  # fmt: skip
        if not conn.alive:
            try:
                await self._ensure_alive(conn)
            except ServerError as exc:
                text = f"Error: tool server {conn.spec.name!r} is down: {exc}"
                return make_result(call, tool, text, SERVER_DIED, start, self.options.max_output_chars)
        if not conn.alive or conn.client is None:
            text = f"Error: tool server {conn.spec.name!r} is down."
            return make_result(call, tool, text, SERVER_DIED, start, self.options.max_output_chars)
        sent = send(
            tool,
            call,
            meta=meta,
            timeout=self._timeout(conn),
            watchdog=self._watchdog,
            max_output_chars=self.options.max_output_chars,
            start=start,
            images=self.options.images,
            through=through,
            strict=mode == "replay-strict",
        )
        return await conn.requests.during(sent)  # what the server asks during the call is recorded on it

    async def _call_internal(self, name: str, arguments: dict[str, Any]) -> Any:
        if not self._started:
            await self._astart()
        server, _, raw = name.rpartition("__")
        conn = next((c for c in self._conns if (not server or c.spec.name == server) and
                     any(t.name == raw for t in c.tools)), None)  # fmt: skip
        if conn is None:
            raise ServerError(f"no server has a tool named {name!r}")
        problem = json_problem(arguments, self.options.max_argument_depth)
        if problem is not None:  # sending them would kill the session
            raise ServerError(f"the arguments of {name!r} cannot be sent: {problem}")
        await self._ensure_alive(conn)
        if not conn.alive or conn.client is None:
            raise ServerError(f"tool server {conn.spec.name!r} is down")
        return await send_internal(conn, name, raw, arguments, meta=self._meta(), timeout=self._timeout(conn))

    async def _aclose(self) -> None:
        self._watchdog.close()
        await asyncio.gather(
            *((POOL.release(c) if c.shared else c.stop()) for c in self._conns), return_exceptions=True
        )
        self._started = False


def _hide_secrets(result: ToolResult) -> ToolResult:
    """``result`` with the secrets of the process's configs hidden in its text and structured content."""
    structured = redact_json(result.structured)
    if structured is result.structured:
        return result.with_text(redact(result.text))
    return dataclasses.replace(result, text=redact(result.text), structured=structured)
