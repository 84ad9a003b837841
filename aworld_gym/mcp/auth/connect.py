"""Each connection's ``httpx2.Auth``: one provider per (event loop, server URL, identity), shared by every
connection of that server and identity on the loop, so concurrent 401s cause one authorization."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import weakref
from collections.abc import Callable
from typing import Any

from aworld_gym.mcp.auth import (
    REQUEST_TIMEOUT_S,
    AuthConfig,
    AuthorizationError,
    is_httpx_auth,
    token_endpoint_auth_method,
)
from aworld_gym.mcp.auth.providers import build_provider
from aworld_gym.mcp.auth.transport import ConnectionAuth

# By id(loop), with a weak reference to tell a reused id; entries of closed loops are dropped (a provider may hold
# its loop through its lock, so a WeakKeyDictionary would keep every private loop alive).
_providers: dict[int, tuple[weakref.ref[asyncio.AbstractEventLoop], dict[str, Any]]] = {}
_providers_lock = threading.Lock()


def identity(url: str, cfg: AuthConfig) -> str:
    """The key of a server URL and a client identity: same key, same tokens (and one login). It hashes the
    secrets' values, so a rotated secret is a new identity; the key itself reveals nothing."""
    secrets = [s.reveal(f"auth.{n}") if s is not None else None
               for n, s in (("client_secret", cfg.client_secret), ("private_key", cfg.private_key))]  # fmt: skip
    if cfg.idp is not None:
        secrets.append(cfg.idp.id_token.reveal("auth.idp.id_token"))
    parts = [url.split("#")[0], cfg.grant, cfg.client_id, token_endpoint_auth_method(cfg), cfg.issuer, cfg.scope,
             cfg.client_metadata_url, cfg.redirect_uri, cfg.idp and (cfg.idp.token_endpoint, cfg.idp.client_id),
             [hashlib.sha256(s.encode()).hexdigest() if s else None for s in secrets]]  # fmt: skip
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:40]


def _shared(key: str, make: Callable[[], Any]) -> Any:
    loop = asyncio.get_running_loop()
    with _providers_lock:
        for lid, (ref, _) in list(_providers.items()):
            other = ref()
            if other is None or other.is_closed():
                del _providers[lid]
        entry = _providers.get(id(loop))
        if entry is None or entry[0]() is not loop:
            entry = _providers[id(loop)] = (weakref.ref(loop), {})
        per_loop = entry[1]
        if key not in per_loop:
            per_loop[key] = make()
        return per_loop[key]


def connection_auth(spec: Any, on_failure: Callable[[AuthorizationError], None]) -> Any:
    """The ``httpx2.Auth`` for one connection of ``spec`` (``None`` without ``auth``). Call it on the event loop the
    connection runs on: every connection of a server and identity on that loop shares one provider, so concurrent
    401s cause one authorization. ``on_failure`` hears of a failed authorization before it is raised."""
    auth = spec.auth
    if auth is None:
        return None
    if is_httpx_auth(auth):
        return auth
    timeout = min(REQUEST_TIMEOUT_S, spec.timeout or REQUEST_TIMEOUT_S)
    if not isinstance(auth, AuthConfig):  # a factory of httpx2.Auth objects (Python callers with their own flow)
        return _shared(f"factory:{id(auth)}:{spec.url}", auth)
    url = spec.url or ""
    key = identity(url, auth)
    provider = _shared(key, lambda: build_provider(url, auth, key, timeout))
    return ConnectionAuth(provider, timeout, on_failure)
