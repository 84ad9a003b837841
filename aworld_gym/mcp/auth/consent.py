"""The consent step of the authorization-code flow: from the authorization URL to the redirect that carries the code.

``"consent": "headless"`` (the default) GETs the authorization URL without following the redirect to
``redirect_uri``, and reads ``code``, ``state`` and ``iss`` from that redirect's ``Location``: it works with
authorization servers that approve a known client at once (test and internal IdPs, or a session cookie the IdP
already holds). A page that needs a person fails with a clear error instead of waiting.

``"consent": "module.path:callable"`` hands the authorization URL to your function (sync or async), which returns
the URL the browser was redirected to (the one with ``code``): a browser automation, a loopback listener, or a
person pasting the URL.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

from aworld_gym.mcp.auth import AuthorizationError

STEP = "authorization request (consent)"
MAX_HOPS = 10


class Consent:
    """The ``redirect_handler``/``callback_handler`` pair the SDK calls one after the other (under the provider's
    lock, so one slot per provider is enough)."""

    def __init__(self, how: str, redirect_uri: str, timeout: float) -> None:
        self.how, self.redirect_uri, self.timeout = how, redirect_uri, timeout
        self._result: Any = None
        self.last_code: str | None = None
        self.client_refused = False  # the server refused the client itself (it may have forgotten a registration)

    async def redirect(self, authorization_url: str) -> None:
        self._result, self.client_refused = None, False
        final = await (self._headless(authorization_url) if self.how == "headless" else self._call(authorization_url))
        self._result = self._parse(final)

    async def callback(self) -> Any:
        result, self._result = self._result, None
        if result is None:
            raise AuthorizationError(STEP, "no authorization response was received")
        return result

    async def _headless(self, url: str) -> str:
        import httpx2

        async with httpx2.AsyncClient(follow_redirects=False, timeout=self.timeout) as client:
            for _ in range(MAX_HOPS):
                if _same_endpoint(url, self.redirect_uri):
                    return url
                try:
                    response = await client.get(url)
                except httpx2.TimeoutException:
                    raise AuthorizationError(STEP, f"{_where(url)} did not answer within {self.timeout:g} s") from None
                except httpx2.HTTPError as exc:
                    raise AuthorizationError(STEP, f"could not reach {_where(url)}: {type(exc).__name__}") from None
                location = response.headers.get("location")
                if response.is_redirect and location:
                    url = urljoin(str(response.url), location)
                    continue
                if response.status_code < 400:
                    raise AuthorizationError(
                        STEP,
                        f"{_where(url)} answered with a page (HTTP {response.status_code}) instead of redirecting "
                        'to the redirect_uri: it needs a person. Log in once with "consent": "module.path:callable" '
                        '(your function completes the login) and a "token_store", or use the client_credentials '
                        "grant for unattended runs",
                    )
                self.client_refused = response.status_code in (400, 401)
                raise AuthorizationError(STEP, f"{_where(url)} answered HTTP {response.status_code}")
        raise AuthorizationError(STEP, f"more than {MAX_HOPS} redirects without reaching the redirect_uri")

    async def _call(self, url: str) -> str:
        module_name, _, attr = self.how.partition(":")
        try:
            target: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                target = getattr(target, part)
        except (ImportError, AttributeError) as exc:
            raise AuthorizationError(STEP, f"cannot load the consent handler {self.how!r}: {exc}") from None
        try:
            final = target(url)
            if inspect.isawaitable(final):
                final = await final
        except AuthorizationError:
            raise
        except Exception as exc:  # noqa: BLE001 - the handler's failure is the step's failure, told plainly
            raise AuthorizationError(STEP, f"the consent handler {self.how!r} raised {type(exc).__name__}") from None
        if not isinstance(final, str) or not final:
            raise AuthorizationError(STEP, f"the consent handler {self.how!r} must return the redirect URL, got "
                                           f"{type(final).__name__}")  # fmt: skip
        return final

    def _parse(self, url: str) -> Any:
        from mcp.shared.auth import AuthorizationCodeResult

        query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items() if v}
        if "error" in query:
            self.client_refused = query["error"] in ("invalid_client", "unauthorized_client")
            why = query["error"] + (f" ({query['error_description'][:200]})" if query.get("error_description") else "")
            raise AuthorizationError(STEP, f"the authorization server refused: {why}")
        if not query.get("code"):
            raise AuthorizationError(STEP, "the redirect carries no authorization code")
        self.last_code = query["code"]
        return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))


def _same_endpoint(url: str, redirect_uri: str) -> bool:
    """Whether ``url`` is ``redirect_uri`` (scheme, host, port and path; the query is the answer)."""
    a, b = urlsplit(url), urlsplit(redirect_uri)
    port = lambda p: p.port or {"http": 80, "https": 443}.get(p.scheme)  # noqa: E731
    return (a.scheme, (a.hostname or "").lower(), port(a), a.path or "/") == (
        b.scheme, (b.hostname or "").lower(), port(b), b.path or "/")  # fmt: skip


def _where(url: str) -> str:
    """A URL for a message: without its query (state, PKCE challenge) or fragment."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"
