"""One connection's side of OAuth: :class:`ConnectionAuth` runs the shared provider's flow for each MCP request and
sends the flow's own requests (metadata, registration, token) itself.

Sending them here rather than through the MCP HTTP client gives each one a timeout (the SDK sets none: gap G6),
keeps the server's static headers and the connection's response hooks away from the authorization server, and
tells which step failed. A failure becomes an :class:`~aworld_gym.mcp.auth.AuthorizationError` naming the step,
its text cut short and scrubbed of every secret the provider holds (G10); the SDK's own log of it loses its
traceback, which could show a server's error body.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncGenerator, Callable
from typing import Any
from urllib.parse import parse_qs

import httpx2

from aworld_gym.mcp.auth import AuthorizationError

MAX_DETAIL = 500
_GRANT_STEPS = {
    "authorization_code": "token request (authorization code)",
    "refresh_token": "token refresh",
    "client_credentials": "token request (client credentials)",
    "urn:ietf:params:oauth:grant-type:jwt-bearer": "token request (jwt-bearer, ID-JAG)",
}
_SECRET_FIELDS = "access_token|refresh_token|id_token|client_secret|client_assertion|assertion|code|code_verifier"
_SCRUB = [
    (re.compile(rf'("(?:{_SECRET_FIELDS})"\s*:\s*")[^"]*"'), r'\1***"'),
    (re.compile(rf"\b((?:{_SECRET_FIELDS})=)[^&\s\"']+"), r"\1***"),
    (re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+"), r"\1 ***"),
]


class ConnectionAuth(httpx2.Auth):
    """The ``httpx2.Auth`` of one connection: the shared provider's flow, its requests sent here with a timeout."""

    requires_response_body = True

    def __init__(self, provider: Any, timeout: float, on_failure: Callable[[AuthorizationError], None]) -> None:
        self.provider, self.timeout, self.on_failure = provider, timeout, on_failure
        _quiet_sdk_log()

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        flow = self.provider.async_auth_flow(request)
        try:
            outgoing = await flow.__anext__()  # the provider's lock is held from here on
            self.provider.step = "authorization"
            while True:
                if outgoing is request:
                    response = yield outgoing
                else:
                    response = await self._send(outgoing)
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        except Exception as exc:  # noqa: BLE001 - every failure of the flow is reported as its step's failure
            if isinstance(exc, AuthorizationError):
                error = AuthorizationError(exc.step, self.scrub(exc.detail))
            else:
                error = AuthorizationError(self.provider.step, self.scrub(f"{type(exc).__name__}: {exc}"))
            self.on_failure(error)
            raise error from None
        finally:
            await flow.aclose()

    async def _send(self, request: httpx2.Request) -> httpx2.Response:
        step = self.provider.step = step_of(request)
        self._check(request, step)
        where = f"{request.url.scheme}://{request.url.netloc.decode()}{request.url.path}"
        try:
            async with httpx2.AsyncClient(timeout=self.timeout, follow_redirects=False) as client:
                return await client.send(request)
        except httpx2.TimeoutException:
            raise AuthorizationError(step, f"{where} did not answer within {self.timeout:g} s") from None
        except httpx2.HTTPError as exc:
            raise AuthorizationError(step, f"could not reach {where}: {type(exc).__name__}") from None

    def _check(self, request: httpx2.Request, step: str) -> None:
        """Refuse registering at a ``/register`` the authorization server's metadata does not offer (the SDK would
        post the client's metadata to the resource server's origin: gap G4)."""
        metadata = self.provider.context.oauth_metadata
        if step == "dynamic client registration" and metadata is not None and metadata.registration_endpoint is None:
            raise AuthorizationError(step, "the authorization server offers no dynamic client registration (no "
                                     "registration_endpoint in its metadata): configure a pre-registered "
                                     '"client_id" (and "client_secret"), or a "client_metadata_url" if it '
                                     "supports client ID metadata documents")  # fmt: skip

    def scrub(self, text: str) -> str:
        """``text`` without any secret the provider holds or any token-looking field, cut short."""
        for secret in sorted(self.provider.secrets(), key=len, reverse=True):
            text = text.replace(secret, "***")
        for pattern, replacement in _SCRUB:
            text = pattern.sub(replacement, text)
        text = " ".join(text.split())
        return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


def step_of(request: httpx2.Request) -> str:
    """Which step of the flow an authorization request is."""
    path = request.url.path
    if request.method == "GET":
        if "oauth-authorization-server" in path or "openid-configuration" in path:
            return "authorization server metadata discovery"
        return "protected resource metadata discovery"
    if "json" in request.headers.get("content-type", ""):
        return "dynamic client registration"
    try:
        grant = parse_qs(request.content.decode("utf-8", "replace")).get("grant_type", [""])[0]
    except Exception:  # noqa: BLE001 - an unread streaming body: a token request of some grant
        grant = ""
    return _GRANT_STEPS.get(grant, "token request")


class _NoTraceback(logging.Filter):
    """The SDK logs a failed flow ("OAuth flow error", with its traceback): that error reaches the user as the
    connection's clear error instead, so the record is dropped; its other records lose their traceback, which could
    show a server's error body."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == "OAuth flow error":
            return False
        record.exc_info, record.exc_text = None, None
        return True


class _Scrubbed(logging.Filter):
    """httpcore's DEBUG trace logs response headers: a redirect's ``Location`` carries the authorization code."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        for pattern, replacement in _SCRUB:
            text = pattern.sub(replacement, text)
        record.msg, record.args = text, None
        return True


def _quiet_sdk_log() -> None:
    for name, kind in (("mcp.client.auth.oauth2", _NoTraceback), ("httpcore2.http11", _Scrubbed),
                       ("httpcore2.http2", _Scrubbed)):  # fmt: skip
        log = logging.getLogger(name)
        if not any(isinstance(f, kind) for f in log.filters):
            log.addFilter(kind())
