"""What a transport tells its connection across restarts. Replies it dropped because they answered no request of ours
(late replies of abandoned calls, forged ids): every transport takes a response only for a request of its own still
waiting (streamable HTTP: the request whose stream or body carries it; stdio: any request in flight), and counts the
rest here. And, for stdio, how long the write in progress has been blocked (:class:`WriteClock`)."""

from __future__ import annotations

import logging
import math
import time

from mcp_types import RequestId

from aworld_gym.mcp.redact import module_logger

LOG_EVERY_S = 60.0
_logger = module_logger(__name__)


class ReplyDrops:
    """Replies dropped because they answered no request of ours waiting for them (late replies of abandoned calls,
    forged ids). ``count`` is their number; the warning is logged at most once a minute.

    Args:
        server: the server's name (or URL), for the warning.
        log: the logger the warning goes to (default: this module's).
    """

    def __init__(self, server: str = "", log: logging.Logger | None = None) -> None:
        self.server = server
        self.log = log or _logger
        self.count = 0
        self._logged_at = -math.inf
        self._unlogged = 0

    def drop(self, got: RequestId | None, where: str) -> None:
        """Count a reply for id ``got`` dropped from ``where``, and log it (rate-limited)."""
        self.count += 1
        now = time.monotonic()
        if now - self._logged_at < LOG_EVERY_S:
            self._unlogged += 1
            return
        more = f" ({self._unlogged} more since the last warning)" if self._unlogged else ""
        self.log.warning("MCP server %r sent a reply for id %r on %s; dropped%s (%d in all)",
                         self.server, got, where, more, self.count)  # fmt: skip
        self._logged_at, self._unlogged = now, 0


def same_id(got: RequestId | None, want: RequestId | None) -> bool:
    """Whether two JSON-RPC ids are the same id (``"1"`` is not ``1``)."""
    return type(got) is type(want) and got == want


class WriteClock:
    """When the write to a stdio server now in progress began (``None`` while none is): a write blocked for seconds
    means the server has stopped reading its input, which no probe needs to confirm."""

    def __init__(self) -> None:
        self.since: float | None = None

    def blocked_for(self) -> float:
        """Seconds the write in progress has been waiting for the server to read (0 when none is)."""
        since = self.since
        return 0.0 if since is None else time.monotonic() - since
