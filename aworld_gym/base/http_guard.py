"""Who may talk to what we serve over HTTP (``aworld-gym serve-env``, ``aworld-gym serve-model``), and how much they
may send.

A served env runs tools (a sandbox, a browser, file readers) on the operator's machine, so its door is guarded on
every route, WebSocket included:

- **Origin**: trainers and OpenEnv's clients send no ``Origin``; a browser always does. A request with an ``Origin``
  not in ``allowed_origins`` (empty by default) is refused, so a web page the user visits cannot drive the env
  (cross-site WebSocket, the class of the 2025 MCP Inspector advisory).
- **Host**: without a token, the ``Host`` header must name loopback (``localhost``, ``127.0.0.1``, ``[::1]``), the
  bound host or one of ``allowed_hosts``: a DNS-rebinding page (``Host: attacker.example``) is refused. With a token
  the token is the guard (a rebinding page does not know it), so any ``Host`` is accepted.
- **Token**: ``Authorization: Bearer <token>``, or HTTP Basic with the token as the password (what OpenEnv's client
  sends for ``http://user:<token>@host:port``). :func:`server_token` generates one for any bind that is not loopback.
- **Size**: a request body is read in chunks and refused past ``limit`` bytes (413) before it is held whole.
"""

from __future__ import annotations

import base64
import hmac
import ipaddress
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

CUT = 120  # characters of a client's value an error message repeats at most


def cut(value: Any, limit: int = CUT) -> str:
    """A client's value for an error message: a string's ``repr`` cut to ``limit`` characters, else its type."""
    if not isinstance(value, str):
        return f"<{type(value).__name__}>"
    return repr(value[:limit]) + ("..." if len(value) > limit else "")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an IP, brackets allowed) is this machine's loopback."""
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def server_token(host: str, token: str | None, generate: bool = False) -> tuple[str | None, bool]:
    """``(token, generated)``: the given token, else a new one when ``generate`` or when ``host`` is not loopback."""
    if token:
        return token, False
    if generate or not is_loopback(host):
        return secrets.token_urlsafe(32), True
    return None, False


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:8000`` -> ``::1``), lower case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    name, sep, port = header.rpartition(":")
    return name.rstrip(".") if sep and port.isdigit() and ":" not in name else header.rstrip(".")


class Refused(Exception):
    """A request the guard turns away: ``status`` is the HTTP status (the WebSocket handshake gets it too)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Guard:
    """The checks every route passes (see the module's docstring).

    Args:
        token: required on every route but ``/health`` when set.
        bound_host: the address the server listens on (its name is an accepted ``Host``).
        allowed_origins: ``Origin`` values accepted (``scheme://host[:port]``); none by default.
        allowed_hosts: ``Host`` names accepted besides loopback and ``bound_host``.
    """

    token: str | None = None
    bound_host: str | None = None
    allowed_origins: Iterable[str] = ()
    allowed_hosts: Iterable[str] = ()
    _origins: frozenset[str] = field(init=False, repr=False)
    _hosts: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.token = self.token or None
        self._origins = frozenset(o.strip().rstrip("/").lower() for o in self.allowed_origins)
        hosts = {host_name(h) for h in self.allowed_hosts}
        if self.bound_host:
            hosts.add(host_name(self.bound_host))
        self._hosts = frozenset(hosts)

    def check(self, headers: Mapping[str, str], need_token: bool = True) -> None:
        """Raise :class:`Refused` unless the request's ``Origin``, ``Host`` and token pass."""
        origin = headers.get("origin")
        if origin is not None and origin.strip().rstrip("/").lower() not in self._origins:
            raise Refused(f"requests from the web origin {cut(origin)} are refused (allow it with --allowed-origin)",
                          403)  # fmt: skip
        host = headers.get("host")
        if self.token is None and host is not None:
            name = host_name(host)
            if not (is_loopback(name) or name in self._hosts):
                raise Refused(f"the Host {cut(host)} is not this server's (allow it with --allowed-host)", 403)
        if need_token and not self.authorized(headers):
            raise Refused("missing or wrong token", 401)

    def authorized(self, headers: Mapping[str, str]) -> bool:
        """Whether the request carries the token (always, when there is none)."""
        if self.token is None:
            return True
        value = headers.get("authorization", "")
        scheme, _, cred = value.partition(" ")
        if scheme.lower() == "bearer":
            given = cred.strip()
        elif scheme.lower() == "basic":
            try:
                given = base64.b64decode(cred.strip(), validate=True).decode().partition(":")[2]
            except (ValueError, UnicodeDecodeError):
                return False
        else:
            return False
        return hmac.compare_digest(given.encode(), self.token.encode())


async def read_body(request: Any, limit: int) -> bytes:
    """The request's body, read in chunks; :class:`Refused` (413) as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise Refused(f"the body is {cut(declared)} bytes; the limit is {limit} (--max-message-bytes)", 413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Refused(f"the body is over {limit} bytes (--max-message-bytes)", 413)
        chunks.append(chunk)
    return b"".join(chunks)
