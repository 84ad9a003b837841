"""Connections shared by the hubs of one event loop: HTTP sessions (``share_session``) and stdio server processes
(``pool``).

An MCP session is bound to the event loop it was opened on, so the pool is keyed by loop: hubs on one loop share,
hubs on different loops never do (a hub with a pooled server that is driven synchronously uses the process-wide
background loop, so that those hubs share too; see :class:`~aworld_gym.mcp.loop.HubLoop`). Everything here runs on
that loop and decides without awaiting in between, so no lock is needed: a hub joins a member at once and then
waits for it to finish starting, and ``K`` servers start concurrently rather than one after another.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from aworld_gym.base.capacity import warn_capacity
from aworld_gym.mcp.capabilities import DEFAULT as DEFAULT_CAPABILITIES
from aworld_gym.mcp.capabilities import Capabilities
from aworld_gym.mcp.config import ServerSpec
from aworld_gym.mcp.transports.connection import Connection


class _Member:
    """One pooled connection (one server process for stdio), the hubs using it, and the task that starts it."""

    __slots__ = ("conn", "refs", "starting")

    def __init__(self, conn: Connection, starting: asyncio.Task[None]) -> None:
        self.conn = conn
        self.refs = 0
        self.starting = starting

    def failed(self) -> bool:
        """Whether the connection never started (nobody may be given it)."""
        task = self.starting
        return task.done() and (task.cancelled() or task.exception() is not None)


class ConnectionPool:
    """Connections shared by every hub of one event loop that uses the same server.

    - ``share_session`` (HTTP servers): one MCP session for every hub (a pool of one).
    - ``pool: K`` (stdio servers): at most ``K`` server processes, each serving many hubs over one MCP session; a
      new hub joins an idle process, else starts a new one while fewer than ``K`` run, else joins the least-loaded.

    Only for servers that keep no per-client state, or tell envs apart by the per-call ``_meta`` (ours do).
    A session answers its server's elicitation, sampling and roots requests one way, so only hubs whose
    :class:`~aworld_gym.mcp.capabilities.Capabilities` are equal share a connection (the same callable object, equal
    settings otherwise); a hub with its own settings gets its own connection (``pool: K`` counts per setting).
    Reference-counted over the whole pool: the processes stay up while any hub holds one of them (so a replaced env
    finds its process running), and the last hub to let go stops them all. A dead member is restarted once for all
    its hubs by :meth:`ToolHub._ensure_alive <aworld_gym.mcp.hub.ToolHub>` (``restart_lock``, generation checks).
    """

    def __init__(self) -> None:
        # loop -> spec key -> members; keyed by the loop object (ids are reused after a loop closes)
        self._pools: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], list[_Member]]] = weakref.WeakKeyDictionary()
        self._stopping: set[asyncio.Task[None]] = set()

    @staticmethod
    def key(spec: ServerSpec, caps: Capabilities | None = None) -> tuple[Any, ...]:
        """Hubs share a connection only if everything that reaches or describes the server is the same, and they
        answer its requests alike."""
        return (spec.name, spec.type, spec.url, tuple(sorted(spec.headers.items())), spec.command, spec.args,
                tuple(sorted(spec.env.items())), spec.cwd, spec.timeout, spec.sse_read_timeout, spec.reset_tool,
                spec.pool, spec.max_connections, (caps or DEFAULT_CAPABILITIES).key())  # fmt: skip

    def members(
        self, spec: ServerSpec, loop: asyncio.AbstractEventLoop | None = None, caps: Capabilities | None = None
    ) -> list[tuple[Connection, int]]:
        """The pooled connections of ``spec`` on ``loop`` (default: the running one), each with its number of hubs."""
        loop = loop or asyncio.get_running_loop()
        return [(m.conn, m.refs) for m in self._pools.get(loop, {}).get(self.key(spec, caps), [])]

    async def acquire(self, spec: ServerSpec, caps: Capabilities | None = None) -> Connection:
        """Join (or start) a pooled connection of ``spec`` answering as ``caps`` say; raises :class:`ServerError` if
        it cannot start."""
        loop = asyncio.get_running_loop()
        key = self.key(spec, caps)
        members = self._pools.setdefault(loop, {}).setdefault(key, [])
        member = _pick(members, spec.pool or 1)
        if member is None:
            conn = Connection(spec, caps)
            conn.shared = True
            member = _Member(conn, loop.create_task(conn.start(), name=f"mcp-start-{spec.name}"))
            members.append(member)
        member.refs += 1
        if spec.max_connections is not None and member.refs == spec.max_connections + 1:
            warn_capacity(f"more envs share one session of the MCP server {spec.name!r} than its max_connections="
                          f"{spec.max_connections}: at most {spec.max_connections} of their tool calls are in flight "
                          f"at once (raise max_connections in its mcpServers entry, or remove it: no cap)")  # fmt: skip
        try:
            await asyncio.shield(member.starting)
        except BaseException:
            member.refs -= 1
            if member.failed():  # every hub waiting on it gets the error; the next hub starts a fresh one
                if member in members:
                    members.remove(member)
                if member.refs == 0:
                    member.conn.close_log()
                if not members:
                    self._forget(loop, key, members)
            elif not any(m.refs for m in members):  # this (cancelled) hub was the last user
                self._forget(loop, key, members)
                task = loop.create_task(_stop_all(members))
                self._stopping.add(task)
                task.add_done_callback(self._stopping.discard)
            raise
        return member.conn

    async def release(self, conn: Connection) -> None:
        """Let go of ``conn``; the last hub of its pool stops every member."""
        loop = asyncio.get_running_loop()
        key = self.key(conn.spec, conn.requests.caps)
        members = self._pools.get(loop, {}).get(key, [])
        member = next((m for m in members if m.conn is conn), None)
        if member is None:  # not pooled on this loop (any more): nobody else can be using it
            await conn.stop()
            conn.close_log()
            return
        member.refs = max(0, member.refs - 1)
        if any(m.refs for m in members):
            return
        self._forget(loop, key, members)
        await _stop_all(members)

    def _forget(self, loop: Any, key: tuple[Any, ...], members: list[_Member]) -> None:
        pools = self._pools.get(loop)
        if pools is not None and pools.get(key) is members:
            del pools[key]


def _pick(members: list[_Member], size: int) -> _Member | None:
    """The member a new hub joins, or ``None`` to start another: idle ones first, new ones lazily up to ``size``."""
    if not members or (len(members) < size and all(m.refs for m in members)):
        return None
    return min(members, key=lambda m: m.refs)


async def _stop_all(members: list[_Member]) -> None:
    """Stop every member (one still starting first finishes starting, so that no process is left behind)."""

    async def stop(member: _Member) -> None:
        await asyncio.wait([member.starting])
        await member.conn.stop()
        member.conn.close_log()

    await asyncio.gather(*(stop(m) for m in members), return_exceptions=True)


POOL = ConnectionPool()
