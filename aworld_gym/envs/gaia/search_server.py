"""Web search MCP server for GAIA-style agents, with pluggable backends.

Run: ``python -m aworld_gym.envs.gaia.search_server --backend local:<folder>`` (offline BM25 over a folder of
documents) or ``--backend tavily|serper|brave`` (live web; the API key comes from ``TAVILY_API_KEY``,
``SERPER_API_KEY`` or ``BRAVE_API_KEY``). Without ``--backend``, ``AWORLD_SEARCH_BACKEND`` is used.
Tools: ``web_search(query, max_results)`` and ``fetch_url(url)``.
"""

from __future__ import annotations

import argparse
import os

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from aworld_gym.base.errors import ConfigError
from aworld_gym.base.version import __version__
from aworld_gym.envs.gaia.search_http import PROVIDERS, HTTPSearchBackend, Provider
from aworld_gym.envs.gaia.search_local import LocalBM25Backend, make_snippet, tokenize
from aworld_gym.envs.gaia.search_types import (
    BACKEND_ENV,
    TRUNCATION_NOTE,
    SearchBackend,
    SearchError,
    SearchResult,
    html_to_text,
)
from aworld_gym.mcp.cache import SCOPE_META
from aworld_gym.mcp.serving import serve

__all__ = [
    "BACKEND_ENV",
    "PROVIDERS",
    "TRUNCATION_NOTE",
    "HTTPSearchBackend",
    "LocalBM25Backend",
    "Provider",
    "SearchBackend",
    "SearchError",
    "SearchResult",
    "build_server",
    "html_to_text",
    "main",
    "make_backend",
    "make_snippet",
    "tokenize",
]


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


# The tool cache (aworld_gym.mcp.cache) may serve a search or a page to any task: the same call, the same answer.
STATELESS = {SCOPE_META: "stateless"}


def build_server(backend: SearchBackend, max_chars: int = 20_000) -> MCPServer:
    """An MCP server with ``web_search`` and ``fetch_url`` over ``backend``.

    Args:
        backend: where results and pages come from.
        max_chars: ``fetch_url`` output is cut to this many characters.
    """
    server = MCPServer("search", version=__version__, log_level="WARNING")

    @server.tool(meta=STATELESS)
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

    @server.tool(meta=STATELESS)
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
