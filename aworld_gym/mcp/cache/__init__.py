"""Record and replay of tool calls: a run's calls kept in a store, served again instead of reaching the server.

Per server (its ``mcpServers`` entry's ``"cache"``), else the env's default (``ToolOptions.cache``), a mode:

- ``live`` (the default without a cache): every call reaches the server; nothing is kept;
- ``record``: every call reaches the server, and its result is kept;
- ``replay``: a call kept before is served from the store without reaching the server; any other reaches it and is
  kept;
- ``replay-strict``: the server is never reached, not even started: its tools are the ones it listed when recorded,
  and a call never kept fails with kind ``cache_miss``, which ends the episode as ``cache_miss`` (status ``void``:
  never scored as if the tool had answered).

What is kept, and what a call is looked up by (the server's identity, the tool, canonical arguments, the tool's
schema hash and its state scope): :mod:`aworld_gym.mcp.cache.keys`; where: :mod:`aworld_gym.mcp.cache.store`.
A server declares its state scope in its entry (``"cache": {"scope": "stateless"}``) or in its tools' ``_meta``
(``"aworld_gym/cache_scope"``); a server that says nothing is ``episode``-scoped, the safe default for a stateful
one (a sandbox, a browser): its results are served only to the same episode (task and seed) at the same point.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aworld_gym.base.errors import ConfigError
from aworld_gym.mcp.cache.keys import SCOPES, EpisodeScope, call_key, canonical
from aworld_gym.mcp.cache.store import CacheError, Recorded, ToolStore, open_store

__all__ = ["MODES", "SCOPES", "CacheError", "CacheSettings", "HubCache", "ServerCache", "cache_settings",
           "server_cache"]  # fmt: skip

logger = logging.getLogger(__name__)

MODES = ("live", "record", "replay", "replay-strict")
ON_ERROR = ("stop", "live")
SCOPE_META = "aworld_gym/cache_scope"  # a tool's _meta key: the scope its server's state has
KEY_META = "aworld_gym/cache_key"  # in a replay-strict call's _meta: the key the replay server looks up
CACHE_MISS_CODE = -32044  # the replay server's JSON-RPC error for a call it holds no result of


@dataclass(frozen=True)
class ServerCache:
    """An ``mcpServers`` entry's ``"cache"``: its mode (``None``: the env's), its state scope (``None``: what its
    tools declare, else ``episode``) and the identity its calls are kept under (``None``: its name)."""

    mode: str | None = None
    scope: str | None = None
    id: str | None = None


@dataclass(frozen=True)
class CacheSettings:
    """The env's tool cache (``ToolOptions.cache``, flat keyword ``tool_cache``): where, the default mode of its
    servers, and what a store that cannot be used does to the run: ``"stop"`` (a clear error) or ``"live"`` (a
    warning, and the calls go to the servers, unkept)."""

    store: str
    mode: str = "replay"
    on_error: str = "stop"


def server_cache(name: str, value: Any) -> ServerCache | None:
    """An entry's ``"cache"``: a mode (``"record"``), or ``{"mode", "scope", "id"}``."""
    if value is None:
        return None
    where = f"mcpServers[{name!r}]: 'cache'"
    if isinstance(value, str):
        value = {"mode": value}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be a mode ({', '.join(MODES)}) or an object with mode, scope, id")
    unknown = set(value) - {"mode", "scope", "id"}
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; known: id, mode, scope")
    mode, scope, ident = value.get("mode"), value.get("scope"), value.get("id")
    if mode is not None and mode not in MODES:
        raise ConfigError(f"{where}: mode {mode!r} is not one of {', '.join(MODES)}")
    if scope is not None and scope not in SCOPES:
        raise ConfigError(f"{where}: scope {scope!r} is not one of {', '.join(SCOPES)}")
    if ident is not None and (not isinstance(ident, str) or not ident):
        raise ConfigError(f"{where}: id must be a non-empty string")
    return ServerCache(mode, scope, ident)


def cache_settings(value: Any, where: str = "tool_cache") -> CacheSettings | None:
    """``ToolOptions.cache``: ``None``, a store (an SQLite file path or ``redis://host:port/db``; mode ``replay``),
    or ``{"store", "mode", "on_error"}``."""
    if value is None or isinstance(value, CacheSettings):
        return value
    if isinstance(value, str | Path):
        value = {"store": str(value)}
    if not isinstance(value, Mapping) or not isinstance(value.get("store"), str | Path) or not str(value["store"]):
        raise ConfigError(f"{where} must be a store (an SQLite file path or redis://host:port/db) or {{'store': ..., 'mode': ..., "
                          "'on_error': ...}")  # fmt: skip
    unknown = set(value) - {"store", "mode", "on_error"}
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; known: mode, on_error, store")
    mode, on_error = value.get("mode", "replay"), value.get("on_error", "stop")
    if mode not in MODES:
        raise ConfigError(f"{where}: mode {mode!r} is not one of {', '.join(MODES)}")
    if on_error not in ON_ERROR:
        raise ConfigError(f"{where}: on_error {on_error!r} is not one of {', '.join(ON_ERROR)}")
    return CacheSettings(str(value["store"]), mode, on_error)


_stores: dict[tuple[str, bool], ToolStore] = {}
# replay: the calls of this process on their way to a server, by (event loop, store, key): the same call made at once
# by several episodes (the samples of a GRPO group) reaches the server once; the others wait for its result
_in_flight: dict[tuple[int, str, str], Any] = {}
_stores_lock = threading.Lock()


def shared_store(where: str, read_only: bool) -> ToolStore:
    """This process's store at ``where`` (one connection, shared by every hub that uses it)."""
    key = (str(Path(where).expanduser().resolve()) if "://" not in where else where, read_only)
    with _stores_lock:
        store = _stores.get(key)
        if store is None:
            store = _stores[key] = open_store(where, read_only=read_only)
        return store


class HubCache:
    """One hub's side of the cache: each server's mode, scope and identity, the episode's scope, the store.

    ``counts``: calls served from the store (``hits``), that reached a live server (``live``), kept (``recorded``),
    that found nothing in a strict replay (``misses``), and store failures (``errors``).
    """

    def __init__(self, settings: CacheSettings | None, specs: Sequence[Any]) -> None:
        self.settings = settings
        self.modes: dict[str, str] = {}
        self.scopes: dict[str, str | None] = {}
        self.ids: dict[str, str] = {}
        for spec in specs:
            own: ServerCache = spec.cache or ServerCache()
            mode = own.mode or (settings.mode if settings is not None else "live")
            if mode != "live" and settings is None:
                raise ConfigError(f"mcpServers[{spec.name!r}]: cache mode {mode!r} needs a store: pass "
                                  "tool_cache='path/to/tools.sqlite' (or ToolOptions(cache=...))")  # fmt: skip
            self.modes[spec.name], self.scopes[spec.name], self.ids[spec.name] = mode, own.scope, own.id or spec.name
        self.episode = EpisodeScope()
        self.counts: Counter[str] = Counter()
        self._store: ToolStore | None = None
        self._store_failed = False
        # per episode-scoped server, the calls of this episode served from the store in `replay` mode, which the live
        # server has not seen: sent to it before the episode's first call that must reach it (its state rebuilt)
        self._served: dict[str, list[tuple[str, Any]]] = {}

    @property
    def used(self) -> bool:
        return any(mode != "live" for mode in self.modes.values())

    def mode(self, server: str) -> str:
        return "live" if self._store_failed else self.modes.get(server, "live")

    def store(self) -> ToolStore | None:
        """The store (opened on first use; read-only when every server replays strictly). A store that cannot be
        opened stops the run (``on_error="stop"``: :class:`CacheError`) or is left out with a warning."""
        if self._store is None and self.used and not self._store_failed and self.settings is not None:
            strict = all(m in ("live", "replay-strict") for m in self.modes.values())
            try:
                self._store = shared_store(self.settings.store, read_only=strict)
            except CacheError as exc:
                self._failed(exc)
        return self._store

    def _failed(self, exc: CacheError) -> None:
        if self.settings is None or self.settings.on_error == "stop":
            raise exc
        if not self._store_failed:
            logger.warning("%s; the calls go to the servers, unkept (on_error='live')", exc)
        self._store_failed = True
        self.counts["errors"] += 1

    def begin_episode(self, task: str | None, seed: int | None) -> None:
        self.episode = EpisodeScope(task, seed)
        self._served = {}

    def scope(self, server: str, tool: Any) -> str:
        """``server``'s state scope: its entry's, else its tool's ``_meta`` declaration, else ``episode``."""
        declared = self.scopes.get(server)
        if declared is None:
            meta = getattr(tool, "meta", None) or {}
            declared = meta.get(SCOPE_META) if isinstance(meta, Mapping) else None
        return declared if declared in SCOPES else "episode"

    def key(self, server: str, tool: Any, arguments: Any) -> str | None:
        """The key of a call to ``tool`` (the MCP ``Tool`` its server listed) of ``server`` in this episode,
        advancing the server's chain; ``None`` when the call cannot be kept (an episode-scoped call of an episode
        without a seed, arguments that are not JSON)."""
        ident = self.ids.get(server, server)
        value = self.episode.value(self.scope(server, tool), ident)
        try:
            key = None if value is None else call_key(ident, tool.name, arguments, tool.input_schema, value)
        except (TypeError, ValueError):
            key = None
        self.episode.advance(ident, key or repr([tool.name, arguments]))
        return key

    async def through(self, server: str, tool: Any, arguments: Any, key: str | None,
                      send: Callable[[str, Any], Awaitable[Any]], version: str | None) -> Any:  # fmt: skip
        """The result of a call of ``tool`` (the MCP ``Tool``) in ``record`` or ``replay`` mode: from the store
        (replay, kept before), else from the server (``send(name, arguments)``), kept when the server answered with
        a result (an error result included).

        An episode-scoped server whose earlier calls of this episode were served from the store gets them first,
        in order, so that its state is the one the kept results came from (their results are not used)."""
        import asyncio

        import mcp_types as types

        mode, store = self.mode(server), self.store()
        if store is None or key is None or mode not in ("record", "replay"):
            await self._catch_up(server, send)
            self.counts["live"] += 1
            return await send(tool.name, arguments)
        flight: tuple[int, str, str] | None = None
        if mode == "replay":
            try:
                found = await asyncio.to_thread(store.get, key)
            except CacheError as exc:
                self._failed(exc)
                found = None
            kept = found.result if found is not None else None
            flight = (id(asyncio.get_running_loop()), store.where, key)
            if kept is None and flight in _in_flight:  # the same call is on its way to the server: wait for it
                kept = await asyncio.shield(_in_flight[flight])  # None: it failed, so this one goes itself
            if kept is not None:
                self.counts["hits"] += 1
                if self.scope(server, tool) == "episode":
                    self._served.setdefault(server, []).append((tool.name, arguments))
                return types.CallToolResult.model_validate(kept)
            _in_flight[flight] = asyncio.get_running_loop().create_future()
        try:
            await self._catch_up(server, send)
            start = time.perf_counter()
            self.counts["live"] += 1
            result = await send(tool.name, arguments)
            dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
            record = Recorded(key, self.ids.get(server, server), tool.name, canonical(arguments), dumped,
                              bool(result.is_error), time.time(), time.perf_counter() - start, version)  # fmt: skip
            try:
                if await asyncio.to_thread(store.put, record):
                    self.counts["recorded"] += 1
            except CacheError as exc:
                self._failed(exc)
            if flight is not None:
                _in_flight[flight].set_result(dumped)
            return result
        finally:
            if flight is not None:
                waiting = _in_flight.pop(flight)
                if not waiting.done():
                    waiting.set_result(None)

    async def _catch_up(self, server: str, send: Callable[[str, Any], Awaitable[Any]]) -> None:
        """Send ``server`` the calls of this episode it was spared (served from the store), in order."""
        for name, arguments in self._served.pop(server, []):
            self.counts["catch_up"] += 1
            try:
                await send(name, arguments)
            except Exception as exc:  # noqa: BLE001 - the call that needed it goes on; its result says what it says
                logger.warning("the tool cache could not bring %r up to this episode's state (%s: %s)", server,
                               type(exc).__name__, exc)  # fmt: skip

    def keep_listing(self, server: str, tools: list[Any], server_info: Any) -> None:
        """Keep the tools ``server`` listed, for a later ``replay-strict`` (in ``record`` and ``replay`` modes)."""
        if self.mode(server) not in ("record", "replay"):
            return
        store = self.store()
        if store is None:
            return
        info = server_info.model_dump(mode="json", exclude_none=True) if server_info is not None else None
        try:
            store.put_listing(self.ids.get(server, server),
                              [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools], info)  # fmt: skip
        except CacheError as exc:
            self._failed(exc)

    def replay_server(self, server: str) -> Any:
        """The in-process MCP server that stands for ``server`` in ``replay-strict``: the tools it listed when
        recorded, and each call's kept result (looked up by the key in the call's ``_meta``), or a ``cache_miss``
        error."""
        from aworld_gym.mcp.cache.replay import replay_server

        store, ident = self.store(), self.ids.get(server, server)
        if store is None:
            raise CacheError(f"mcpServers[{server!r}] replays strictly, but the tool cache cannot be used")
        return replay_server(store, ident, self.counts)
