"""Which protocol era a server speaks, remembered per server for the life of the process.

``mcp.Client``'s default ``mode="auto"`` sends a ``server/discover`` probe before every connect (and falls back to
``initialize`` when the server does not know it: some older servers answer 400, a silent stdio one costs 10 s).
Once a server has answered, later connects to it (other envs, restarts) use the verdict: ``mode="legacy"`` (the
``initialize`` handshake only) or the modern version with the server's ``DiscoverResult`` as ``prior_discover``
while its ``ttlMs`` lasts (afterwards the SDK stands in an empty one: aworld-gym reads no server capabilities),
so nothing is probed. A connect that fails with a remembered verdict forgets it and probes once more
(:meth:`Connection._run <aworld_gym.mcp.transports.connection.Connection>`).

A server is known by what reaches it: its transport, URL (or command, arguments, folder and environment), headers
and ``auth`` (only as digests); in-process servers are not remembered (their probe is a function call).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from aworld_gym.mcp.config import ServerSpec


@dataclass(frozen=True)
class Verdict:
    """A server's era: ``mode`` for ``mcp.Client`` (``"legacy"`` or a version) and its discover result."""

    mode: str
    result: Any = None  # the DiscoverResult of a modern server
    expires: float = 0.0  # time.monotonic() until which ``result`` may be reused (its ttlMs)


_verdicts: dict[str, Verdict] = {}
_lock = threading.Lock()  # hubs on several event loops (threads) connect at once


def server_key(spec: ServerSpec) -> str | None:
    """What identifies the server behind ``spec`` (a digest), or ``None`` for an in-process server."""
    if spec.type == "inprocess":
        return None
    reach: Any = (
        [spec.command, list(spec.args), spec.cwd, sorted(spec.env.items())] if spec.type == "stdio"
        else [spec.url, spec.socket, sorted(spec.headers.items())]
    )  # fmt: skip
    text = json.dumps([spec.type, reach, repr(getattr(spec, "auth", None))], default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def connect_mode(spec: ServerSpec) -> tuple[str, Any]:
    """``(mode, prior_discover)`` for the next connect to ``spec``'s server: ``("auto", None)`` when unknown."""
    key = server_key(spec)
    with _lock:
        verdict = _verdicts.get(key) if key is not None else None
    if verdict is None:
        return "auto", None
    fresh = verdict.result if verdict.result is not None and time.monotonic() < verdict.expires else None
    return verdict.mode, fresh


def remember(spec: ServerSpec, client: Any) -> None:
    """Keep the era a probing (``mode="auto"``) connect found."""
    key = server_key(spec)
    if key is None:
        return
    session = client.session
    result = getattr(session, "discover_result", None)
    if result is not None:
        ttl = max(0, int(getattr(result, "ttl_ms", 0) or 0))
        verdict = Verdict(str(client.protocol_version), result, time.monotonic() + ttl / 1000)
    else:
        verdict = Verdict("legacy")
    with _lock:
        _verdicts[key] = verdict


def forget(spec: ServerSpec | None = None) -> None:
    """Forget ``spec``'s server's era (every server's with no argument): its next connect probes."""
    with _lock:
        if spec is None:
            _verdicts.clear()
        elif (key := server_key(spec)) is not None:
            _verdicts.pop(key, None)
