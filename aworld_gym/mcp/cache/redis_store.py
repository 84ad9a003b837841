"""The tool cache of a cluster: recorded calls in a Redis server every node reaches.

``tool_cache="redis://host:6379/0"`` (``rediss://`` for TLS, ``unix:///path/redis.sock`` for a socket; a password as
``redis://:secret@host:6379/0``; ``?prefix=NAME`` keeps this cache's keys apart from other users of the server). Every
process of every node that opens the same URL shares one cache: a Ray actor on another node replays what an actor here
recorded.

Layout under the prefix (``aworld_gym:tools:`` by default):

- ``call:<key>``: the recorded call as JSON (the fields of :class:`~aworld_gym.mcp.cache.store.Recorded`);
- ``calls`` and ``server:<identity>``: sorted sets of the keys by the time they were recorded (listing, pruning);
- ``listings``: a hash, per server identity, of the tools it listed and what it said it was.

A call is kept by one server-side script (``SET NX`` and both index entries at once), so recorders racing on a key
keep the first entry and no index misses a call.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from aworld_gym.mcp.cache.store import CacheError, Recorded, ToolStore, check_prune

_PUT = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
  return 1
end
return 0
"""
_BATCH = 500


def _public(url: str) -> str:
    """``url`` without its password (for messages and stats)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class RedisStore(ToolStore):
    """The recorded calls in a Redis server (``url``: ``redis://[:password@]host:port/db[?prefix=NAME]``).

    Args:
        url: the server; the ``prefix`` query argument names this cache's keys (default ``aworld_gym:tools:``).
        read_only: refuse every write (``replay-strict``); the server must still answer.
        timeout_s: how long connecting to the server and each command may take before the call fails.

    Raises:
        CacheError: the ``redis`` client is not installed, the server does not answer, refuses the password, or the
            URL is malformed.
    """

    def __init__(self, url: str, *, read_only: bool = False, timeout_s: float = 10.0) -> None:
        try:
            import redis
        except ImportError as exc:
            raise CacheError("a redis:// tool cache needs the redis client: pip install 'aworld-gym[cache]'") from exc
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        self.prefix = query.pop("prefix", "aworld_gym:tools:")
        self.where = _public(url)
        self.read_only = read_only
        plain = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), parts.fragment))
        self._errors: tuple[type[BaseException], ...] = (redis.exceptions.RedisError, OSError)
        try:
            self._db = redis.Redis.from_url(plain, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                            decode_responses=True)  # fmt: skip
            self._db.ping()
            self._put = self._db.register_script(_PUT)
        except (*self._errors, ValueError, TypeError) as exc:
            raise CacheError(f"the tool cache at {self.where} cannot be used: {type(exc).__name__}: {exc}") from exc

    def __repr__(self) -> str:
        return f"RedisStore({self.where!r}{', read_only=True' if self.read_only else ''})"

    def _call(self, what: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return what(*args, **kwargs)
        except self._errors as exc:
            raise CacheError(f"the tool cache at {self.where} failed: {type(exc).__name__}: {exc}") from exc

    def _writable(self) -> None:
        if self.read_only:
            raise CacheError(f"the tool cache at {self.where} was opened read-only (replay-strict)")

    # ----- calls -----------------------------------------------------------------------------------------
    def get(self, key: str) -> Recorded | None:
        text = self._call(self._db.get, self.prefix + "call:" + key)
        return Recorded(**json.loads(text)) if text else None

    def put(self, record: Recorded) -> bool:
        self._writable()
        value = json.dumps(dataclasses.asdict(record), ensure_ascii=False)
        keys = [self.prefix + "call:" + record.key, self.prefix + "calls", self.prefix + "server:" + record.server]
        return bool(self._call(self._put, keys=keys, args=[value, record.key, record.created]))

    def _keys(self, server: str | None, before: float | None = None) -> list[str]:
        index = self.prefix + ("server:" + server if server else "calls")
        if before is None:
            return self._call(self._db.zrange, index, 0, -1)
        return self._call(self._db.zrangebyscore, index, "-inf", f"({before!r}")

    def records(self, server: str | None = None) -> Iterator[Recorded]:
        keys = self._keys(server)
        for i in range(0, len(keys), _BATCH):
            batch = keys[i : i + _BATCH]
            for text in self._call(self._db.mget, [self.prefix + "call:" + k for k in batch]):
                if text:  # pruned since the index was read
                    yield Recorded(**json.loads(text))

    # ----- listings --------------------------------------------------------------------------------------
    def put_listing(self, server: str, tools: list[dict[str, Any]], server_info: dict[str, Any] | None) -> None:
        self._writable()
        value = json.dumps({"tools": tools, "server_info": server_info, "created": time.time()}, ensure_ascii=False)
        self._call(self._db.hset, self.prefix + "listings", server, value)

    def listing(self, server: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None] | None:
        text = self._call(self._db.hget, self.prefix + "listings", server)
        if not text:
            return None
        value = json.loads(text)
        return value["tools"], value["server_info"]

    def listings(self) -> dict[str, tuple[list[dict[str, Any]], dict[str, Any] | None]]:
        rows = self._call(self._db.hgetall, self.prefix + "listings")
        return {server: (v["tools"], v["server_info"]) for server, v in ((s, json.loads(t)) for s, t in rows.items())}

    # ----- upkeep ----------------------------------------------------------------------------------------
    def prune(self, *, before: float | None = None, server: str | None = None) -> int:
        check_prune(before, server)
        self._writable()
        gone = 0
        keys = self._keys(server, before)
        for i in range(0, len(keys), _BATCH):
            batch = keys[i : i + _BATCH]
            texts = self._call(self._db.mget, [self.prefix + "call:" + k for k in batch])
            owners: dict[str, list[str]] = {}
            for key, text in zip(batch, texts, strict=True):
                owner = server or (json.loads(text)["server"] if text else None)
                if owner is not None:
                    owners.setdefault(owner, []).append(key)
            pipe = self._db.pipeline(transaction=True)
            pipe.delete(*(self.prefix + "call:" + k for k in batch))  # its reply: how many calls went
            pipe.zrem(self.prefix + "calls", *batch)
            for owner, keys_of in owners.items():
                pipe.zrem(self.prefix + "server:" + owner, *keys_of)
            gone += self._call(pipe.execute)[0]
        return gone

    def close(self) -> None:
        self._db.close()
