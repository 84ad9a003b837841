"""Shared local servers as resources an env declares once.

A resource is a refcounted local server shared by the envs of a process (``aworld_gym.mcp.transports.shared.SharedServer``:
our Python-execution server, the Playwright MCP server, the MiniWoB++ page server). An env declares it either

- as an ``mcpServers`` value, ``LocalServer(server)``: the env acquires it when it is made (the hub connects to its
  URL), checks it at every reset (a dead server is restarted on the same URL and the env's MCP session with it is
  re-opened), and releases it when it closes; or
- with ``self.hold(server)`` (a server that is not an MCP server, e.g. a page server), which returns its URL.

Nothing else is needed: no try/except around ``super().__init__``, no ``prepare_episode``/``release`` overrides.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class Resource(Protocol):
    """What :class:`~aworld_gym.mcp.transports.shared.SharedServer` provides."""

    starts: int

    def acquire(self) -> str: ...

    def ensure_alive(self) -> str: ...

    def release(self) -> None: ...


@dataclass
class LocalServer:
    """An ``mcpServers`` entry for a shared local MCP server reached over streamable HTTP.

    Args:
        server: the shared server (acquired by the env that uses this entry).
        headers: HTTP headers of every request (e.g. the server's bearer token).
        share_session: every env on one event loop shares one MCP session (for servers that tell envs apart by
            the per-call ``_meta``, as ours do).
        allow_tools: the server's tools that are exposed (glob patterns of their names; ``None``: all).
    """

    server: Any
    headers: Mapping[str, str] = field(default_factory=dict)
    share_session: bool = False
    allow_tools: tuple[str, ...] | None = None

    def entry(self, url: str) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "streamable-http", "url": url}
        if self.allow_tools is not None:
            out["allow_tools"] = list(self.allow_tools)
        if self.headers:
            out["headers"] = dict(self.headers)
        if self.share_session:
            out["share_session"] = True
        socket = getattr(self.server, "socket", None)
        if socket:
            out["socket"] = socket
        return out

    def __deepcopy__(self, memo: dict[int, Any]) -> LocalServer:
        return self  # a handle on a process-wide server: gym.make's deep copy of kwargs must keep it

    def __reduce__(self) -> Any:
        raise TypeError(
            "a LocalServer is a handle on a server process of this process and cannot be sent to another one (Ray): "
            "create it inside the env (our envs do, e.g. AWorld/Code-v0 with server='shared')"
        )


NEVER_REACHED = (
    "http://127.0.0.1:9/replay-strict"  # the discard port: what a strictly replayed local server's entry names
)


@dataclass
class Held:
    """A resource an env holds: released once when the env closes."""

    resource: Any
    server_name: str | None = None  # the mcpServers name whose session depends on it
    starts: int = 0


class Holdings:
    """The resources of one env."""

    def __init__(self) -> None:
        self.items: list[Held] = []

    def hold(self, resource: Any, server_name: str | None = None) -> str:
        url = resource.acquire()
        self.items.append(Held(resource, server_name, getattr(resource, "starts", 0)))
        return url

    def resolve(self, config: Mapping[str, Any] | Any, replayed: bool = False) -> Any:
        """``config`` with every :class:`LocalServer` value acquired and replaced by its entry. ``replayed``: the
        servers replay strictly from the tool cache (``replay-strict``), which never reaches them: a local server is
        then neither started nor held (its entry names an address nothing listens on, never connected to)."""
        if not isinstance(config, Mapping):
            return config
        entries = config.get("mcpServers")
        if not isinstance(entries, Mapping) or not any(isinstance(v, LocalServer) for v in entries.values()):
            return config
        out = {}
        for name, value in entries.items():
            if not isinstance(value, LocalServer):
                out[name] = value
            elif replayed:
                out[name] = {**value.entry(NEVER_REACHED), "cache": "replay-strict"}
                out[name].pop("socket", None)
            else:
                out[name] = value.entry(self.hold(value.server, name))
        return {**config, "mcpServers": out}

    def check(self) -> list[str]:
        """Restart dead resources; the names of the MCP servers that were restarted (their sessions are stale)."""
        stale = []
        for held in self.items:
            held.resource.ensure_alive()
            starts = getattr(held.resource, "starts", 0)
            if starts != held.starts:
                held.starts = starts
                if held.server_name is not None:
                    stale.append(held.server_name)
        return stale

    def release(self) -> None:
        items, self.items = self.items, []
        for held in reversed(items):
            held.resource.release()


class HoldsResources:
    """What an env does with the shared local servers it holds (mixed into ``MCPEnv``)."""

    _holdings: Holdings
    hub: Any
    release: Any  # the env's own release hook

    def hold(self, resource: Any) -> str:
        """Hold a shared local server (``SharedServer``) for the env's life (usable before ``super().__init__``)."""
        if getattr(self, "_holdings", None) is None:
            self._holdings = Holdings()
        return self._holdings.hold(resource)

    def local_server(self, name: str) -> Any:
        """The shared local server behind the ``mcpServers`` entry ``name`` (``None`` if it is not one)."""
        return next((h.resource for h in self._holdings.items if h.server_name == name), None)

    def _check_resources(self) -> None:
        for name in self._holdings.check():
            self.hub.reconnect(name)  # the server was restarted and knows nothing of our session

    def _failed_init(self) -> None:
        """Construction failed: release what was held (and what the subclass made before ``super().__init__``)."""
        with contextlib.suppress(Exception):
            self.release()
        self._holdings.release()

    def _crash(self, exc: Exception) -> str:
        if self.strict:
            raise exc
        return f"{type(exc).__name__}: {exc}"
