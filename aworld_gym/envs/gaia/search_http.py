"""Live search: Tavily, Serper and Brave over HTTP (transient-only retries), and fetch_url with the
private-address guard."""

from __future__ import annotations

import html
import os
import random
import re
import time
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import httpx2

from aworld_gym.base.errors import ConfigError
from aworld_gym.envs.gaia.search_types import SearchError, SearchResult, html_to_text

_T = TypeVar("_T")


# ----- live backends: search APIs over HTTP -------------------------------------------------------------------
def _strip_tags(text: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", text)).split())


class Provider(NamedTuple):
    """How to call one search API.

    The key goes in header ``key_header`` (after ``key_prefix``); the query and the result count go in the JSON
    body (POST) or the query string (GET); hits are at ``results`` (a key path), with their title, URL and
    snippet under ``fields``.
    """

    method: str
    endpoint: str
    key_env: str
    key_header: str
    key_prefix: str
    query: str
    count: str
    results: tuple[str, ...]
    fields: tuple[str, str, str]


# fmt: off
PROVIDERS: dict[str, Provider] = {
    "tavily": Provider("POST", "https://api.tavily.com/search", "TAVILY_API_KEY", "Authorization", "Bearer ",
                       "query", "max_results", ("results",), ("title", "url", "content")),
    "serper": Provider("POST", "https://google.serper.dev/search", "SERPER_API_KEY", "X-API-KEY", "",
                       "q", "num", ("organic",), ("title", "link", "snippet")),
    "brave": Provider("GET", "https://api.search.brave.com/res/v1/web/search", "BRAVE_API_KEY", "X-Subscription-Token",
                      "", "q", "count", ("web", "results"), ("title", "url", "description")),
}
# fmt: on
_TRANSIENT = (httpx2.TimeoutException, httpx2.NetworkError, httpx2.RemoteProtocolError)


class _Retry(Exception):
    def __init__(self, message: str, wait_s: float | None = None) -> None:
        super().__init__(message)
        self.wait_s = wait_s


class HTTPSearchBackend:
    """Live web search through a search API, and page fetching over HTTP(S).

    Args:
        provider: ``tavily``, ``serper`` or ``brave``.
        api_key: the API key; defaults to the provider's variable (``TAVILY_API_KEY``, ...).
        timeout_s: timeout of each HTTP request.
        endpoint: the search API URL (defaults to the provider's; for tests and proxies).
        client: the HTTP client to use (e.g. with ``httpx2.MockTransport``); one is made when ``None``.
        retries: transient failures (connection errors, timeouts, 429, 5xx) are retried this many times.
        backoff_s: first retry delay; doubled each retry, with jitter.
        max_fetch_bytes: a fetched page is cut to this many bytes.

    Raises:
        ConfigError: unknown provider, or no API key.
    """

    def __init__(
        self,
        provider: str,
        api_key: str | None = None,
        timeout_s: float = 20.0,
        *,
        endpoint: str | None = None,
        client: httpx2.Client | None = None,
        retries: int = 3,
        backoff_s: float = 1.0,
        max_fetch_bytes: int = 5_000_000,
        allow_private_fetch: bool = False,
    ) -> None:
        self.name = provider.lower()
        self.allow_private_fetch = allow_private_fetch
        if self.name not in PROVIDERS:
            raise ConfigError(f"unknown search provider {provider!r}; choose one of {', '.join(PROVIDERS)}")
        self.provider = PROVIDERS[self.name]
        self.api_key = api_key or os.environ.get(self.provider.key_env, "")
        if not self.api_key:
            raise ConfigError(f"the {self.name} search backend needs an API key: set {self.provider.key_env}")
        self.endpoint = endpoint or self.provider.endpoint
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self.max_fetch_bytes = max_fetch_bytes
        self.client = client or httpx2.Client(
            timeout=timeout_s, follow_redirects=True, headers={"User-Agent": "aworld-gym-search/0.1"}
        )

    def _with_retries(self, what: str, attempt: Callable[[], _T]) -> _T:
        for i in range(self.retries + 1):
            try:
                return attempt()
            except (_Retry, *_TRANSIENT) as exc:
                problem = str(exc) if isinstance(exc, _Retry) else f"{type(exc).__name__}: {exc}".rstrip(": ")
                if i == self.retries:
                    raise SearchError(f"{what} failed after {i + 1} attempts: {problem}") from exc
                delay = self.backoff_s * 2**i * random.uniform(0.5, 1.5)
                time.sleep(min(exc.wait_s, 30.0) if isinstance(exc, _Retry) and exc.wait_s else delay)
            except (httpx2.HTTPError, httpx2.InvalidURL) as exc:
                raise SearchError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable")

    def _check(self, response: httpx2.Response, what: str, uses_key: bool = False) -> None:
        status = response.status_code
        if status == 429 or status >= 500:
            after = response.headers.get("Retry-After", "")
            raise _Retry(f"HTTP {status}", float(after) if after.isdigit() else None)
        if status in (401, 403) and uses_key:
            raise SearchError(f"{self.name} refused the API key (HTTP {status}); check {self.provider.key_env}")
        if status >= 400:
            response.read()
            raise SearchError(f"{what} failed: HTTP {status} {response.text[:200].strip()}".rstrip())

    def search(self, query: str, max_results: int) -> list[SearchResult]:
        """Results of the provider's web search."""
        pv = self.provider
        args = {pv.query: query, pv.count: max_results}
        body: dict[str, Any] = {"json": args} if pv.method == "POST" else {"params": args}

        def attempt() -> list[SearchResult]:
            headers = {pv.key_header: pv.key_prefix + self.api_key}
            response = self.client.request(pv.method, self.endpoint, headers=headers, timeout=self.timeout_s, **body)
            self._check(response, f"search with {self.name}", uses_key=True)
            try:
                hits = response.json()
                for key in pv.results:
                    hits = hits.get(key) or {}
                rows = [[_strip_tags(str(hit.get(f) or "")) for f in pv.fields] for hit in hits or []]
                return [SearchResult(t, u, snip[:500]) for t, u, snip in rows if u][:max_results]
            except (ValueError, AttributeError, TypeError) as exc:
                raise SearchError(f"{self.name} answered with an unexpected response: {response.text[:200]}") from exc

        return self._with_retries(f"search with {self.name}", attempt)

    def fetch(self, url: str) -> str:
        """The text of a web page (HTML converted to text); only ``http``/``https`` URLs."""
        scheme = url.split(":", 1)[0].lower() if ":" in url else ""
        if scheme not in ("http", "https"):
            raise SearchError(f"refused {url!r}: only http:// and https:// URLs can be fetched")

        def attempt() -> str:
            target = url
            for _ in range(6):  # follow redirects by hand so that every hop is checked
                self._check_public(target)
                with self.client.stream("GET", target, follow_redirects=False, timeout=self.timeout_s) as response:
                    location = response.headers.get("Location")
                    if response.is_redirect and location:
                        target = str(response.url.join(location))
                        continue
                    return self._read_page(response, url)
            raise SearchError(f"fetching {url}: too many redirects")

        return self._with_retries(f"fetching {url}", attempt)

    def _check_public(self, url: str) -> None:
        """Refuse URLs whose host is (or resolves to) a private, loopback, link-local or reserved address."""
        if self.allow_private_fetch:
            return
        import ipaddress
        import socket
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SearchError(f"refused {url!r}: only http:// and https:// URLs can be fetched")
        try:
            infos = socket.getaddrinfo(parts.hostname, parts.port or 443, proto=socket.IPPROTO_TCP)
        except OSError as exc:
            raise SearchError(f"cannot resolve {parts.hostname!r}: {exc}") from None
        for info in infos:
            ip = ipaddress.ip_address(info[4][0])
            if not ip.is_global:
                raise SearchError(f"refused {url!r}: {parts.hostname} is a private or local address ({ip})")

    def _read_page(self, response: Any, url: str) -> str:
        self._check(response, f"fetching {url}")
        kind = response.headers.get("Content-Type", "text/html").split(";")[0].strip().lower()
        if not (kind.startswith("text/") or "html" in kind or "json" in kind or "xml" in kind):
            raise SearchError(f"{url} is a {kind} document, not a text page")
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) >= self.max_fetch_bytes:
                break
        data, charset = bytes(body[: self.max_fetch_bytes]), response.charset_encoding
        if "html" in kind or data.lstrip()[:15].lower().startswith(b"<!doctype html"):
            return html_to_text(data.decode(charset, errors="replace") if charset else data)  # bs4 sniffs
        return data.decode(charset or "utf-8", errors="replace")

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()
