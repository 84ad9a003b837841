"""Offline search: Okapi BM25 over a folder of documents (no network)."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from aworld_gym.base.errors import ConfigError
from aworld_gym.envs.gaia.search_types import SearchError, SearchResult, html_to_text

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
