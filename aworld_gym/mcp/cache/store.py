"""Where recorded tool calls live: one interface (:class:`ToolStore`), a store for each scale.

- :class:`SqliteStore` is the store of one machine: an SQLite database in WAL mode, which many processes read and
  write at once (a writer waits for another's transaction up to ``busy_timeout_s``; ``INSERT OR IGNORE`` keeps the
  first entry of a key, so processes recording the same call at once keep one and lose none).
- :class:`~aworld_gym.mcp.cache.redis_store.RedisStore` is the store of a cluster: a Redis server every node reaches
  (``redis://host:port/db``), where a key is kept by ``SET NX`` in one script with its indexes, with the same
  first-entry-wins rule.

A store holds two kinds of things: calls (one per key: the MCP result as the server returned it, as JSON, with the
server, tool, arguments, when and how long it took) and listings (per server identity, the tools it listed and what
it said it was, so that ``replay-strict`` can offer the tools without reaching the server).
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aworld_gym.base.errors import ConfigError, ServerError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,
    server TEXT NOT NULL,
    tool TEXT NOT NULL,
    arguments TEXT NOT NULL,
    result TEXT NOT NULL,
    is_error INTEGER NOT NULL,
    created REAL NOT NULL,
    latency_s REAL NOT NULL,
    server_version TEXT
);
CREATE INDEX IF NOT EXISTS calls_server ON calls (server, created);
CREATE TABLE IF NOT EXISTS listings (
    server TEXT PRIMARY KEY,
    tools TEXT NOT NULL,
    server_info TEXT,
    created REAL NOT NULL
);
"""


class CacheError(ServerError):
    """The store cannot be used (corrupt, locked past its timeout, read-only where it must write, missing)."""


@dataclass(frozen=True)
class Recorded:
    """One recorded call: the MCP ``CallToolResult`` as returned (JSON), and what is known of it."""

    key: str
    server: str
    tool: str
    arguments: str  # canonical JSON
    result: dict[str, Any]
    is_error: bool
    created: float
    latency_s: float
    server_version: str | None = None

    def row(self) -> tuple[Any, ...]:
        return (self.key, self.server, self.tool, self.arguments, json.dumps(self.result, ensure_ascii=False),
                int(self.is_error), self.created, self.latency_s, self.server_version)  # fmt: skip


_COLUMNS = "key, server, tool, arguments, result, is_error, created, latency_s, server_version"


def _recorded(row: tuple[Any, ...]) -> Recorded:
    key, server, tool, arguments, result, is_error, created, latency_s, version = row
    return Recorded(key, server, tool, arguments, json.loads(result), bool(is_error), created, latency_s, version)


class ToolStore:
    """What every store offers: calls by key (the first entry of a key stays), listings by server, and upkeep.

    A store implements ``get``, ``put``, ``records``, ``put_listing``, ``listing``, ``listings``, ``prune`` and
    ``close``; ``stats``, ``merge`` and ``export`` work on any store (``merge`` between two kinds too).
    ``where`` names it in messages (a path or a URL without its password).
    """

    where: str = ""
    read_only: bool = False

    def get(self, key: str) -> Recorded | None:
        raise NotImplementedError

    def put(self, record: Recorded) -> bool:
        """Keep ``record`` unless its key is there already (the first one stays); True when it was added."""
        raise NotImplementedError

    def records(self, server: str | None = None) -> Iterator[Recorded]:
        """Every recorded call (of ``server``), oldest first."""
        raise NotImplementedError

    def put_listing(self, server: str, tools: list[dict[str, Any]], server_info: dict[str, Any] | None) -> None:
        """The tools ``server`` listed (the latest listing wins)."""
        raise NotImplementedError

    def listing(self, server: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None] | None:
        raise NotImplementedError

    def listings(self) -> dict[str, tuple[list[dict[str, Any]], dict[str, Any] | None]]:
        raise NotImplementedError

    def prune(self, *, before: float | None = None, server: str | None = None) -> int:
        """Delete the calls recorded before ``before`` (a time) and/or of ``server``; returns how many went."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def stats(self) -> dict[str, Any]:
        """Calls per server (with errors, first and last recorded, tool time) and the servers listed."""
        servers: dict[str, dict[str, Any]] = {}
        for r in self.records():
            row = servers.setdefault(r.server, {"calls": 0, "errors": 0, "first": r.created, "last": r.created,
                                                "latency_s": 0.0})  # fmt: skip
            row["calls"] += 1
            row["errors"] += int(r.is_error)
            row["first"], row["last"] = min(row["first"], r.created), max(row["last"], r.created)
            row["latency_s"] += r.latency_s
        return {"path": self.where, "calls": sum(v["calls"] for v in servers.values()),
                "servers": dict(sorted(servers.items())), "listed": sorted(self.listings())}  # fmt: skip

    def merge(self, other: ToolStore) -> int:
        """Add ``other``'s calls and listings that this store lacks (a key here stays as it is); returns the calls
        added."""
        added = sum(self.put(record) for record in other.records())
        mine = self.listings()
        for server, (tools, info) in other.listings().items():
            if server not in mine:
                self.put_listing(server, tools, info)
        return added

    def export(self, out: str | Path) -> int:
        """Every call and listing as JSON lines (``{"call": {...}}``, ``{"listing": {...}}``); returns the calls."""
        n = 0
        with open(out, "w", encoding="utf-8") as f:
            for server, (tools, info) in sorted(self.listings().items()):
                f.write(json.dumps({"listing": {"server": server, "tools": tools, "server_info": info}}) + "\n")
            for record in self.records():
                f.write(json.dumps({"call": dataclasses.asdict(record)}, ensure_ascii=False) + "\n")
                n += 1
        return n


def check_prune(before: float | None, server: str | None) -> None:
    if before is None and server is None:
        raise ValueError("prune needs an age (before) or a server")


class SqliteStore(ToolStore):
    """The recorded calls in one SQLite file (WAL mode), shared by every process on this machine that opens it.

    Args:
        path: the database file (made, with its folder, when missing unless ``read_only``).
        read_only: open for replay only (``replay-strict`` never writes); a missing file is then an error.
        busy_timeout_s: how long a write waits for another process's transaction before it fails.

    Raises:
        CacheError: the file is not an SQLite database (or is corrupt), cannot be made, or is locked past the timeout.
    """

    def __init__(self, path: str | Path, *, read_only: bool = False, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path).expanduser()
        self.where = str(self.path)
        self.read_only = read_only
        self._lock = threading.Lock()
        try:
            if read_only:
                if not self.path.is_file():
                    raise CacheError(f"no tool cache at {self.path} (replay needs one recorded before)")
                uri = f"file:{self.path}?mode=ro"
                self._db = sqlite3.connect(uri, uri=True, timeout=busy_timeout_s, check_same_thread=False,
                                           isolation_level=None)  # fmt: skip
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(self.path, timeout=busy_timeout_s, check_same_thread=False,
                                           isolation_level=None)  # fmt: skip
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.executescript(_SCHEMA)
            self._db.execute("SELECT count(*) FROM calls").fetchone()  # a file that is not ours fails here
        except CacheError:
            raise
        except (sqlite3.Error, OSError) as exc:
            raise CacheError(f"the tool cache at {self.path} cannot be used: {type(exc).__name__}: {exc}") from exc

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r}{', read_only=True' if self.read_only else ''})"

    def _run(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._lock:
                return self._db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise CacheError(f"the tool cache at {self.path} failed: {type(exc).__name__}: {exc}") from exc

    # ----- calls -----------------------------------------------------------------------------------------
    def get(self, key: str) -> Recorded | None:
        rows = self._run(f"SELECT {_COLUMNS} FROM calls WHERE key = ?", (key,))
        return _recorded(rows[0]) if rows else None

    def put(self, record: Recorded) -> bool:
        with self._lock:
            try:
                cursor = self._db.execute(f"INSERT OR IGNORE INTO calls ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
                                          record.row())  # fmt: skip
            except sqlite3.Error as exc:
                raise CacheError(f"the tool cache at {self.path} failed: {type(exc).__name__}: {exc}") from exc
            return cursor.rowcount == 1

    def records(self, server: str | None = None) -> Iterator[Recorded]:
        where, args = ("WHERE server = ?", (server,)) if server else ("", ())
        for row in self._run(f"SELECT {_COLUMNS} FROM calls {where} ORDER BY created", args):
            yield _recorded(row)

    # ----- listings --------------------------------------------------------------------------------------
    def put_listing(self, server: str, tools: list[dict[str, Any]], server_info: dict[str, Any] | None) -> None:
        self._run("INSERT OR REPLACE INTO listings (server, tools, server_info, created) VALUES (?,?,?,?)",
                  (server, json.dumps(tools, ensure_ascii=False), json.dumps(server_info), time.time()))  # fmt: skip

    def listing(self, server: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None] | None:
        rows = self._run("SELECT tools, server_info FROM listings WHERE server = ?", (server,))
        return (json.loads(rows[0][0]), json.loads(rows[0][1])) if rows else None

    def listings(self) -> dict[str, tuple[list[dict[str, Any]], dict[str, Any] | None]]:
        rows = self._run("SELECT server, tools, server_info FROM listings")
        return {server: (json.loads(tools), json.loads(info)) for server, tools, info in rows}

    # ----- upkeep ----------------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        rows = self._run("SELECT server, count(*), sum(is_error), min(created), max(created), sum(latency_s) "
                         "FROM calls GROUP BY server ORDER BY server")  # fmt: skip
        servers = {s: {"calls": n, "errors": e or 0, "first": lo, "last": hi, "latency_s": lat or 0.0}
                   for s, n, e, lo, hi, lat in rows}  # fmt: skip
        return {"path": str(self.path), "calls": sum(v["calls"] for v in servers.values()), "servers": servers,
                "listed": sorted(self.listings())}  # fmt: skip

    def prune(self, *, before: float | None = None, server: str | None = None) -> int:
        check_prune(before, server)
        clauses, args = [], []
        if before is not None:
            clauses.append("created < ?")
            args.append(before)
        if server is not None:
            clauses.append("server = ?")
            args.append(server)
        with self._lock:
            try:
                cursor = self._db.execute(f"DELETE FROM calls WHERE {' AND '.join(clauses)}", tuple(args))
            except sqlite3.Error as exc:
                raise CacheError(f"the tool cache at {self.path} failed: {type(exc).__name__}: {exc}") from exc
            return cursor.rowcount

    def close(self) -> None:
        with self._lock:
            self._db.close()


def open_store(where: str | Path, *, read_only: bool = False) -> ToolStore:
    """The store at ``where``: an SQLite file path (``sqlite:///path`` too), or a Redis server
    (``redis://[:password@]host:port/db``, ``rediss://`` for TLS; ``?prefix=NAME`` keeps this cache's keys apart from
    others' on the same server)."""
    text = str(where)
    if text.startswith(("redis://", "rediss://", "unix://")):
        from aworld_gym.mcp.cache.redis_store import RedisStore

        return RedisStore(text, read_only=read_only)
    if "://" in text and not text.startswith("sqlite:///"):
        scheme = text.split("://", 1)[0]
        raise ConfigError(f"tool cache {text!r}: no {scheme!r} store; give an SQLite file path (one machine) or "
                          "redis://host:port/db (a cluster)")  # fmt: skip
    return SqliteStore(text.removeprefix("sqlite:///") if text.startswith("sqlite:///") else text, read_only=read_only)
