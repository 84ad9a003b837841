"""The search server's shared pieces: results, the backend protocol, errors, HTML to text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

BACKEND_ENV = "AWORLD_SEARCH_BACKEND"
TRUNCATION_NOTE = "[... truncated ...]"


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
