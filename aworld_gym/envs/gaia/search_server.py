"""Web search MCP server for GAIA-style agents, with pluggable backends.

Run: ``python -m aworld_gym.envs.gaia.search_server --backend local:<folder>`` (offline BM25 over a folder of
documents) or ``--backend tavily|serper|brave`` (live web; the API key comes from ``TAVILY_API_KEY``,
``SERPER_API_KEY`` or ``BRAVE_API_KEY``). Without ``--backend``, ``AWORLD_SEARCH_BACKEND`` is used.
Tools: ``web_search(query, max_results)`` and ``fetch_url(url)``.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
import random
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar, runtime_checkable

import httpx2
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from aworld_gym.core.errors import ConfigError
from aworld_gym.mcp.serving import serve

BACKEND_ENV = "AWORLD_SEARCH_BACKEND"
TRUNCATION_NOTE = "[... truncated ...]"
_T = TypeVar("_T")


class SearchError(RuntimeError):
    """A search or fetch failed (the message is shown to the model)."""


@dataclass(frozen=True)
class SearchResult:
    """One search hit."""

    title: str
    url: str
    snippet: str


@runtime_checkable
class SearchBackend(Protocol):
    """What the server needs from a search provider."""

    name: str

    def search(self, query: str, max_results: int) -> list[SearchResult]: ...

    def fetch(self, url: str) -> str: ...


def html_to_text(markup: Any) -> str:
    """Visible text of an HTML page (markup or a parsed ``BeautifulSoup``), without scripts and styles."""
    from bs4 import BeautifulSoup

    soup = markup if isinstance(markup, BeautifulSoup) else BeautifulSoup(markup, "html.parser")
    for tag in soup(["script", "style", "noscript", "template", "svg"]):
        tag.decompose()
    lines = (" ".join(line.split()) for line in soup.get_text("\n").splitlines())
    return "\n".join(line for line in lines if line)


# ----- offline backend: Okapi BM25 over a folder --------------------------------------------------------------
_WORD_RE = re.compile(r"\w+")
_HEADER_RE = re.compile(r"^\s*(url|title)\s*:\s*(.+?)\s*$", re.IGNORECASE)
_MD_HEADING_RE = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
STOPWORDS = frozenset(
    "a an and are as at be by for from has have in is it its of on or that the this to was were will with".split()  # noqa: SIM905
)
SUFFIXES = (".txt", ".md", ".html", ".htm", ".json")


def tokenize(text: str) -> list[str]:
    """Lower-cased ``\\w+`` tokens without stopwords."""
    return [t for t in _WORD_RE.findall(text.lower()) if t not in STOPWORDS]


@dataclass
class _Doc:
    url: str
    title: str
    text: str
    tf: Counter[str]
    length: int


def _read_doc(path: Path, rel: str) -> tuple[str, str, str]:
    """(url, title, text) of one file."""
    lines, header, top = path.read_text(encoding="utf-8", errors="replace").splitlines(), {}, 0
    while top < min(5, len(lines)) and (m := _HEADER_RE.match(lines[top])):  # URL:/Title: lines on top
        header.setdefault(m.group(1).lower(), m.group(2))
        top += 1
    raw = "\n".join(lines[top:]).strip()
    url = header.get("url", "") if re.match(r"\w+://\S+$", header.get("url", "")) else ""
    title, text = header.get("title", ""), raw
    suffix = path.suffix.lower()
    if suffix in (".html", ".htm"):
        from bs4 import BeautifulSoup

        soup = BeautifulSoup(raw, "html.parser")
        link = soup.find("link", rel="canonical", href=True) or soup.find("meta", attrs={"name": "url"}, content=True)
        url = url or (str(link.get("href") or link.get("content")) if link else "")
        heading = soup.title or soup.find(["h1", "h2"])
        title = title or (" ".join(heading.get_text().split()) if heading else "")
        text = html_to_text(soup)
    elif suffix == ".json":
        try:
            data = json.loads(raw)
        except ValueError:
            data = raw
        if isinstance(data, dict):
            url = url or str(data.get("url") or "")
            title = title or str(data.get("title") or "")
            body = next((data[k] for k in ("text", "content", "body") if isinstance(data.get(k), str)), None)
            text = body if body is not None else json.dumps(data, ensure_ascii=False, indent=1)
        elif not isinstance(data, str):
            text = json.dumps(data, ensure_ascii=False, indent=1)
    if not title:
        heading = _MD_HEADING_RE.search(raw[:5000])
        title = heading.group(1) if heading else ""
    return url or f"file://{rel}", title, text


def _norm_url(url: str) -> str:
    return url.strip().split("#", 1)[0].rstrip("/")


class LocalBM25Backend:
    """Offline search: Okapi BM25 over the .txt/.md/.html/.htm/.json files of a folder (recursively).

    A document's URL comes from a ``URL: https://...`` line at its top (or an HTML canonical link /
    ``<meta name="url">``), else it is ``file://<relative path>``; its title from a ``Title: ...`` line, the HTML
    ``<title>`` or the first heading, else the file name.

    Args:
        folder: the folder of documents (indexed once, at construction).
        max_doc_chars: each document's text is cut to this length.

    Raises:
        ConfigError: the folder is missing or holds no document.
    """

    name = "local"
    k1, b = 1.5, 0.75

    def __init__(self, folder: str | Path, max_doc_chars: int = 200_000) -> None:
        self.folder = Path(folder).expanduser()
        if not self.folder.is_dir():
            raise ConfigError(f"search folder {str(self.folder)!r} does not exist or is not a folder")
        self.docs: list[_Doc] = []
        self._by_url: dict[str, _Doc] = {}
        for path in sorted(p for p in self.folder.rglob("*") if p.suffix.lower() in SUFFIXES and p.is_file()):
            try:
                url, title, text = _read_doc(path, path.relative_to(self.folder).as_posix())
            except OSError:
                continue
            text, title = text[:max_doc_chars], " ".join(title.split())
            tokens = tokenize(text if title in text[:1000] else f"{title}\n{text}")  # the title counts once
            doc = _Doc(url, title or path.name, text, Counter(tokens), len(tokens))
            self.docs.append(doc)
            self._by_url.setdefault(_norm_url(url), doc)
        if not self.docs:
            raise ConfigError(f"search folder {str(self.folder)!r} holds no {'/'.join(SUFFIXES)} document to index")
        self._df: Counter[str] = Counter(t for d in self.docs for t in d.tf)
        self._avgdl = sum(d.length for d in self.docs) / len(self.docs) or 1.0

    def score(self, query: str) -> list[tuple[float, _Doc]]:
        """(BM25 score, doc) of every document that matches a query term, best first."""
        n = len(self.docs)
        idf = {t: math.log(1.0 + (n - self._df[t] + 0.5) / (self._df[t] + 0.5)) for t in set(tokenize(query))}
        scored = []
        for doc in self.docs:
            norm = self.k1 * (1 - self.b + self.b * doc.length / self._avgdl)
            s = sum(w * doc.tf[t] * (self.k1 + 1) / (doc.tf[t] + norm) for t, w in idf.items() if t in doc.tf)
            if s > 0:
                scored.append((s, doc))
        scored.sort(key=lambda x: -x[0])
        return scored

    def search(self, query: str, max_results: int) -> list[SearchResult]:
        """The best ``max_results`` documents for the query."""
        return [SearchResult(d.title, d.url, make_snippet(d.text, query)) for _, d in self.score(query)[:max_results]]

    def fetch(self, url: str) -> str:
        """The text of an indexed document; any other URL raises :class:`SearchError`."""
        doc = self._by_url.get(_norm_url(url))
        if doc is None:
            raise SearchError(
                f"{url} is not available offline: the local search backend only serves the documents in "
                f"{self.folder} (use a HTTP backend for the live web)"
            )
        return doc.text


def make_snippet(text: str, query: str, width: int = 200) -> str:
    """About ``width`` characters of ``text`` around the densest cluster of query terms."""
    flat = " ".join(text.split())
    terms = set(tokenize(query))
    hits = [(m.start(), m.group().lower()) for m in _WORD_RE.finditer(flat) if m.group().lower() in terms][:2000]
    if not hits:
        return flat[:width] + ("..." if len(flat) > width else "")
    best, start = -1, 0
    for i, (pos, _) in enumerate(hits):
        window = set()
        for p, t in hits[i:]:
            if p >= pos + width * 2 // 3:
                break
            window.add(t)
        if len(window) > best:
            best, start = len(window), max(0, pos - width // 3)
    if start:
        space = flat.find(" ", start)
        start = space + 1 if 0 <= space < start + 30 else start
    end = min(len(flat), start + width)
    if end < len(flat):
        space = flat.rfind(" ", start, end)
        end = space if space > start + width // 2 else end
    return ("..." if start else "") + flat[start:end] + ("..." if end < len(flat) else "")


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


def make_backend(spec: str | None) -> SearchBackend:
    """A backend from a spec: ``local:<folder>`` or a provider name (``tavily``, ``serper``, ``brave``).

    Raises:
        ConfigError: no spec, an unknown one, a bad folder or a missing API key.
    """
    if not spec or not spec.strip():
        raise ConfigError(
            "no search backend configured: use 'local:<folder>' (offline, BM25 over a folder of documents) or "
            f"one of {', '.join(PROVIDERS)} (live web; needs its API key variable), e.g. --backend local:./corpus "
            f"or {BACKEND_ENV}=tavily"
        )
    spec = spec.strip()
    if spec.lower().startswith("local:"):
        return LocalBM25Backend(spec[len("local:") :])
    if spec.lower() in PROVIDERS:
        return HTTPSearchBackend(spec.lower())
    raise ConfigError(f"unknown search backend {spec!r}; use 'local:<folder>' or one of {', '.join(PROVIDERS)}")


def build_server(backend: SearchBackend, max_chars: int = 20_000) -> MCPServer:
    """An MCP server with ``web_search`` and ``fetch_url`` over ``backend``.

    Args:
        backend: where results and pages come from.
        max_chars: ``fetch_url`` output is cut to this many characters.
    """
    server = MCPServer("search", log_level="WARNING")

    @server.tool()
    def web_search(query: str, max_results: int = 5) -> str:
        """Search the web. Returns numbered results, each with a title, URL and snippet.

        Args:
            query: what to look for (key words work best).
            max_results: how many results to return (1-10).
        """
        if not query.strip():
            raise ToolError("the query is empty; pass some key words")
        try:
            results = backend.search(query, max(1, min(10, int(max_results))))
        except Exception as exc:
            raise ToolError(str(exc)) from exc  # shown as "Error executing tool ...: <exc>"
        if not results:
            return f"No results for {query!r}."
        return "\n\n".join(f"{i}. {r.title}\n   URL: {r.url}\n   {r.snippet}" for i, r in enumerate(results, 1))

    @server.tool()
    def fetch_url(url: str) -> str:
        """Fetch a web page and return its text (long pages are truncated).

        Args:
            url: the page's URL, e.g. one from web_search.
        """
        try:
            text = backend.fetch(url.strip())
        except Exception as exc:
            raise ToolError(str(exc)) from exc  # shown as "Error executing tool ...: <exc>"
        if len(text) <= max_chars:
            return text or "(the page has no text)"
        note = f"\n\n{TRUNCATION_NOTE} (showing {{}} of {len(text)} characters)"
        keep = max(0, max_chars - len(note) - 10)
        return text[:keep] + note.format(keep)

    return server


def main(argv: list[str] | None = None) -> None:
    """Command line: serve the search server on stdio or streamable HTTP."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transport", default="stdio", choices=["stdio", "streamable-http", "sse"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8932)
    parser.add_argument(
        "--backend", default=os.environ.get(BACKEND_ENV), help="local:<folder> | tavily | serper | brave"
    )
    parser.add_argument("--max-chars", type=int, default=20_000, help="fetch_url output limit")
    args = parser.parse_args(argv)
    try:
        backend = make_backend(args.backend)
    except ConfigError as exc:
        parser.error(str(exc))
    serve(build_server(backend, args.max_chars), args.transport, args.host, args.port)


if __name__ == "__main__":
    main()
