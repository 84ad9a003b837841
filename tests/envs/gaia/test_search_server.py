"""Search MCP server: offline BM25 backend, HTTP provider backends (mock transport / 127.0.0.1 only), MCP tools.

No test touches the network: HTTP backends get an ``httpx2.MockTransport`` or a server on 127.0.0.1.
"""

from __future__ import annotations

import json
import math
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import httpx2
import pytest

from aworld_gym.base.calls import ToolCall
from aworld_gym.base.errors import ConfigError
from aworld_gym.envs.gaia.search_server import (
    TRUNCATION_NOTE,
    HTTPSearchBackend,
    LocalBM25Backend,
    SearchBackend,
    SearchError,
    SearchResult,
    build_server,
    main,
    make_backend,
    make_snippet,
)
from aworld_gym.mcp.hub import ToolHub
from aworld_gym.mcp.options import ToolOptions

FILLER = "Meadows rivers forests mountains valleys lakes and coastlines shape the regional landscape. "

DOCS = {
    "eiffel.txt": "URL: https://example.org/eiffel\nTitle: Eiffel Tower\n\nThe Eiffel Tower is a wrought-iron lattice "
    "tower on the Champ de Mars in Paris, France. It is 330 metres tall and was finished in 1889.\n",
    "lang/python.md": "# Python (programming language)\n\nPython is a programming language created by Guido van "
    "Rossum and first released in 1991.\n",
    "moon.html": '<html><head><title>Apollo 11 - Moon landing</title><link rel="canonical" '
    'href="https://example.org/apollo11"><script>var leaked = "zzsecretscript";</script><style>.x{color:red}</style>'
    "</head><body><h1>Apollo 11</h1><p>Apollo 11 landed on the Moon on 20 July 1969. Neil Armstrong walked first."
    "</p></body></html>",
    "meta.htm": '<html><head><meta name="url" content="https://example.org/okapi"></head><body><h1>Okapi</h1>'
    "<p>The okapi is a giraffid mammal native to the Congo rainforest.</p></body></html>",
    "volcano_once.txt": "Volcano notes. " + FILLER * 6,
    "volcano_often.txt": "Volcano volcano volcano. The volcano erupted; the volcano cooled. " + FILLER * 5,
    "deep/notes.txt": "Marginalia about the Zanzibar archipelago spice trade and cloves.\n",
    "record.json": json.dumps(
        {"url": "https://example.org/fjord", "title": "Geirangerfjord", "text": "A fjord in Norway, UNESCO site."}
    ),
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    for name, text in DOCS.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    (folder / "ignored.bin").write_bytes(b"\x00volcano")
    return folder


@pytest.fixture(scope="module")
def backend(corpus):
    return LocalBM25Backend(corpus)


# ----- offline backend -------------------------------------------------------------------------------------
def test_indexes_every_supported_file_with_url_and_title(backend):
    by_url = {d.url: d.title for d in backend.docs}
    assert isinstance(backend, SearchBackend)
    assert len(backend.docs) == len(DOCS)
    assert by_url["https://example.org/eiffel"] == "Eiffel Tower"
    assert by_url["file://lang/python.md"] == "Python (programming language)"
    assert by_url["https://example.org/apollo11"] == "Apollo 11 - Moon landing"
    assert by_url["https://example.org/okapi"] == "Okapi"
    assert by_url["https://example.org/fjord"] == "Geirangerfjord"
    assert by_url["file://deep/notes.txt"] == "notes.txt"


@pytest.mark.parametrize(
    ("query", "url"),
    [
        ("how tall is the Eiffel tower", "https://example.org/eiffel"),
        ("who created Python", "file://lang/python.md"),
        ("Neil Armstrong moon landing", "https://example.org/apollo11"),
        ("okapi giraffid", "https://example.org/okapi"),
        ("Zanzibar cloves", "file://deep/notes.txt"),
        ("Norway fjord", "https://example.org/fjord"),
    ],
)
def test_distinctive_query_ranks_right_doc_first(backend, query, url):
    assert backend.search(query, 5)[0].url == url


def test_bm25_prefers_more_term_occurrences_and_matches_formula(backend, tmp_path):
    hits = backend.search("volcano", 5)
    assert [h.url for h in hits] == ["file://volcano_often.txt", "file://volcano_once.txt"]
    # Okapi BM25 by hand on a two-document corpus.
    (tmp_path / "a.txt").write_text("apple apple banana")
    (tmp_path / "b.txt").write_text("cherry banana")
    small = LocalBM25Backend(tmp_path)
    scores = {d.url: s for s, d in small.score("apple")}
    idf, avgdl = math.log(1 + (2 - 1 + 0.5) / (1 + 0.5)), 2.5
    expected = idf * 2 * 2.5 / (2 + 1.5 * (1 - 0.75 + 0.75 * 3 / avgdl))
    assert scores == {"file://a.txt": pytest.approx(expected)}
    assert small.search("the of and", 5) == []  # stopwords only


def test_snippet_is_short_and_around_the_query_terms(backend):
    long_text = FILLER * 40 + "The quokka is a small marsupial from Rottnest Island. " + FILLER * 40
    snippet = make_snippet(long_text, "quokka Rottnest")
    assert "quokka" in snippet and "Rottnest" in snippet
    assert 100 < len(snippet) <= 210 and snippet.startswith("...") and snippet.endswith("...")
    assert "1889" in backend.search("Eiffel finished", 1)[0].snippet
    assert "zzsecretscript" not in backend.search("Apollo", 1)[0].snippet


def test_fetch_serves_indexed_docs_without_scripts(backend):
    text = backend.fetch("https://example.org/apollo11")
    assert "Apollo 11 landed on the Moon" in text
    assert "zzsecretscript" not in text and "color:red" not in text
    assert backend.fetch("https://example.org/eiffel/#history").startswith("The Eiffel Tower")
    assert "Guido van Rossum" in backend.fetch("file://lang/python.md")


@pytest.mark.parametrize("url", ["https://example.com/not-indexed", "file:///etc/passwd", "file://../secret.txt"])
def test_fetch_of_other_urls_is_refused_offline(backend, corpus, url):
    with pytest.raises(SearchError, match="not available offline") as info:
        backend.fetch(url)
    assert str(corpus) in str(info.value) and "HTTP backend" in str(info.value)


def test_empty_or_missing_folder_is_a_config_error(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "image.png").write_bytes(b"\x89PNG")
    with pytest.raises(ConfigError, match="empty"):
        LocalBM25Backend(tmp_path / "empty")
    with pytest.raises(ConfigError, match="does not exist"):
        LocalBM25Backend(tmp_path / "missing")


def test_make_backend_specs(corpus, monkeypatch):
    assert isinstance(make_backend(f"local:{corpus}"), LocalBM25Backend)
    monkeypatch.setenv("SERPER_API_KEY", "k")
    assert make_backend("serper").name == "serper"
    for spec in (None, "", "  "):
        with pytest.raises(ConfigError, match="no search backend configured"):
            make_backend(spec)
    with pytest.raises(ConfigError, match="unknown search backend 'bing'"):
        make_backend("bing")
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="TAVILY_API_KEY"):
        make_backend("tavily")


# ----- the MCP tools, through the real MCP path -------------------------------------------------------------
class RecordingBackend:
    name = "recording"

    def __init__(self) -> None:
        self.asked: list[int] = []

    def search(self, query: str, max_results: int) -> list[SearchResult]:
        if query == "explode":
            raise RuntimeError("backend exploded")
        self.asked.append(max_results)
        return [SearchResult(f"T{i}", f"https://x.org/{i}", "s") for i in range(max_results)]

    def fetch(self, url: str) -> str:
        return "word " * 10_000


@pytest.fixture
def hub(backend):
    h = ToolHub(servers={"search": build_server(backend, max_chars=300)}).start()
    yield h
    h.close()


def test_tools_through_mcp(hub):
    assert sorted(hub.tool_names) == ["fetch_url", "web_search"]
    schema = next(t for t in hub.tool_schemas() if t["function"]["name"] == "web_search")["function"]
    assert schema["parameters"]["required"] == ["query"] and "Search the web" in schema["description"]
    r = hub.call([ToolCall("web_search", {"query": "Eiffel tower height"})])[0]
    assert r.error is None
    assert r.text.startswith("1. Eiffel Tower\n   URL: https://example.org/eiffel\n   ") and "330 metres" in r.text
    none = hub.call([ToolCall("web_search", {"query": "xylophone quasar"})])[0]
    assert none.error is None and none.text == "No results for 'xylophone quasar'."
    page = hub.call([ToolCall("fetch_url", {"url": "https://example.org/apollo11"})])[0]
    assert page.error is None and "Neil Armstrong" in page.text and "zzsecretscript" not in page.text


def test_tool_errors_are_results(hub):
    r = hub.call(
        [
            ToolCall("fetch_url", {"url": "https://example.com/elsewhere"}),
            ToolCall("fetch_url", {"url": "file:///etc/passwd"}),
            ToolCall("web_search", {"query": "   "}),
        ]
    )
    assert [x.error for x in r] == ["tool_error"] * 3
    assert all(x.text.startswith("Error executing tool ") for x in r)
    assert "not available offline" in r[0].text and "not available offline" in r[1].text
    assert "query is empty" in r[2].text
    assert hub.call([ToolCall("web_search", {"query": "okapi"})])[0].error is None  # server still fine


def test_max_results_clamped_and_fetch_truncated():
    fake = RecordingBackend()
    with ToolHub(servers={"search": build_server(fake, max_chars=500)}) as h:
        texts = [h.call([ToolCall("web_search", {"query": "q", "max_results": n})])[0].text for n in (0, -3, 3, 50)]
        assert fake.asked == [1, 1, 3, 10]
        assert texts[3].count("URL: https://x.org/") == 10 and texts[3].startswith("1. T0")
        page = h.call([ToolCall("fetch_url", {"url": "https://x.org/1"})])[0]
        assert page.error is None and len(page.text) <= 500 and TRUNCATION_NOTE in page.text
        boom = h.call([ToolCall("web_search", {"query": "explode"})])[0]
        assert boom.error == "tool_error" and boom.text == "Error executing tool web_search: backend exploded"


def test_runs_as_a_stdio_module(corpus):
    args = ["-m", "aworld_gym.envs.gaia.search_server", "--backend", f"local:{corpus}"]
    with ToolHub(
        {"mcpServers": {"search": {"command": sys.executable, "args": args}}}, options=ToolOptions(timeout=20)
    ) as h:
        assert h.call([ToolCall("web_search", {"query": "okapi"})])[0].text.startswith("1. Okapi")


def test_main_without_backend_exits_with_the_config_message(capsys, monkeypatch):
    monkeypatch.delenv("AWORLD_SEARCH_BACKEND", raising=False)
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2 and "no search backend configured" in capsys.readouterr().err


# ----- HTTP backends (mock transport / 127.0.0.1) ----------------------------------------------------------
RESPONSES = {
    "tavily": {"results": [{"title": "T", "url": "https://t.org", "content": "tavily snippet", "score": 0.9}]},
    "serper": {"organic": [{"title": "T", "link": "https://t.org", "snippet": "serper snippet", "position": 1}]},
    "brave": {
        "web": {
            "results": [
                {
                    "title": "<strong>T</strong>",
                    "url": "https://t.org",
                    "description": "brave &amp; <strong>snippet</strong>",
                }
            ]
        }
    },
}


def mock_backend(provider: str, handler, **kwargs) -> HTTPSearchBackend:
    client = httpx2.Client(transport=httpx2.MockTransport(handler))
    kwargs.setdefault("allow_private_fetch", True)  # mocked hosts: no DNS look-up
    return HTTPSearchBackend(provider, api_key="KEY", client=client, backoff_s=0.001, **kwargs)


@pytest.mark.parametrize("provider", ["tavily", "serper", "brave"])
def test_provider_request_shape_and_parsing(provider):
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, json=RESPONSES[provider])

    results = mock_backend(provider, handler).search("capital of France", 3)
    snippet = {"tavily": "tavily snippet", "serper": "serper snippet", "brave": "brave & snippet"}[provider]
    assert results == [SearchResult("T", "https://t.org", snippet)]
    (req,) = seen
    if provider == "tavily":
        assert (req.method, str(req.url)) == ("POST", "https://api.tavily.com/search")
        assert req.headers["Authorization"] == "Bearer KEY"
        assert json.loads(req.content) == {"query": "capital of France", "max_results": 3}
    elif provider == "serper":
        assert (req.method, str(req.url)) == ("POST", "https://google.serper.dev/search")
        assert req.headers["X-API-KEY"] == "KEY"
        assert json.loads(req.content) == {"q": "capital of France", "num": 3}
    else:
        assert (req.method, req.url.host, req.url.path) == ("GET", "api.search.brave.com", "/res/v1/web/search")
        assert req.headers["X-Subscription-Token"] == "KEY"
        assert dict(req.url.params) == {"q": "capital of France", "count": "3"}


def test_api_key_from_env_or_config_error(monkeypatch):
    monkeypatch.setenv("BRAVE_API_KEY", "from-env")
    assert HTTPSearchBackend("brave").api_key == "from-env"
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="SERPER_API_KEY"):
        HTTPSearchBackend("serper")
    with pytest.raises(ConfigError, match="unknown search provider"):
        HTTPSearchBackend("altavista", api_key="k")


def test_transient_failures_are_retried():
    attempts = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        attempts.append(1)
        if len(attempts) == 1:
            raise httpx2.ConnectError("connection refused", request=request)
        if len(attempts) < 4:
            return httpx2.Response(503 if len(attempts) == 2 else 429, text="busy")
        return httpx2.Response(200, json=RESPONSES["serper"])

    assert mock_backend("serper", handler).search("q", 5)[0].snippet == "serper snippet"
    assert len(attempts) == 4

    attempts.clear()
    always_down = mock_backend("serper", lambda r: attempts.append(1) or httpx2.Response(502))
    with pytest.raises(SearchError, match="failed after 4 attempts: HTTP 502"):
        always_down.search("q", 5)
    assert len(attempts) == 4


def test_client_errors_are_not_retried():
    attempts = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        attempts.append(1)
        return httpx2.Response(401, json={"detail": "bad key"})

    with pytest.raises(SearchError, match=r"tavily refused the API key \(HTTP 401\); check TAVILY_API_KEY"):
        mock_backend("tavily", handler).search("q", 5)
    assert len(attempts) == 1
    not_json = mock_backend("tavily", lambda r: httpx2.Response(200, text="<html>oops</html>"))
    with pytest.raises(SearchError, match="unexpected response"):
        not_json.search("q", 5)


def test_fetch_html_to_text_size_cap_and_schemes():
    def handler(request: httpx2.Request) -> httpx2.Response:
        if request.url.path == "/big":
            return httpx2.Response(200, text="a" * 10_000, headers={"Content-Type": "text/plain"})
        if request.url.path == "/pdf":
            return httpx2.Response(200, content=b"%PDF", headers={"Content-Type": "application/pdf"})
        if request.url.path == "/gone":
            return httpx2.Response(404, text="not here")
        if request.url.path == "/latin":
            page = '<html><head><meta charset="iso-8859-1"></head><body>caf\xe9</body></html>'.encode("latin-1")
            return httpx2.Response(200, content=page, headers={"Content-Type": "text/html"})
        if request.url.path == "/old":
            return httpx2.Response(301, headers={"Location": "https://site.org/page"})
        page = "<html><head><script>zzsecretscript()</script></head><body><p>Hello <b>page</b></p></body></html>"
        return httpx2.Response(200, text=page, headers={"Content-Type": "text/html; charset=utf-8"})

    b = mock_backend("brave", handler, max_fetch_bytes=1000)
    assert b.fetch("https://site.org/page") == "Hello\npage"
    assert b.fetch("http://site.org/old") == "Hello\npage"
    assert b.fetch("https://site.org/big") == "a" * 1000
    assert b.fetch("https://site.org/latin") == "café"
    with pytest.raises(SearchError, match="application/pdf"):
        b.fetch("https://site.org/pdf")
    with pytest.raises(SearchError, match="HTTP 404"):
        b.fetch("https://site.org/gone")
    for url in ("file:///etc/passwd", "data:text/plain,hi", "ftp://site.org/x", "site.org"):
        with pytest.raises(SearchError, match="only http:// and https://"):
            b.fetch(url)


class _Handler(BaseHTTPRequestHandler):
    hits: ClassVar[list[tuple[str, str, dict]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.hits.append((self.path, self.headers.get("X-API-KEY", ""), body))
        if len(self.hits) == 1:
            self.send_response(503)
            self.end_headers()
            return
        self._send(json.dumps(RESPONSES["serper"]).encode(), "application/json")

    def do_GET(self) -> None:
        self._send(b"<html><title>x</title><body><p>served locally</p></body></html>", "text/html")

    def _send(self, data: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def test_real_http_server_on_localhost_through_mcp(monkeypatch):
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        b = HTTPSearchBackend(
            "serper",
            api_key="LOCALKEY",
            endpoint=f"{base}/search",
            backoff_s=0.001,
            timeout_s=5,
            allow_private_fetch=True,
        )
        with ToolHub(servers={"search": build_server(b)}) as h:
            r = h.call([ToolCall("web_search", {"query": "q", "max_results": 2})])[0]
            assert r.error is None and r.text == "1. T\n   URL: https://t.org\n   serper snippet"
            assert _Handler.hits == [("/search", "LOCALKEY", {"q": "q", "num": 2})] * 2  # 503, then success
            page = h.call([ToolCall("fetch_url", {"url": f"{base}/page"})])[0]
            assert page.text == "x\nserved locally"
        b.close()
    finally:
        server.shutdown()
        server.server_close()


def test_fetch_refuses_private_addresses_and_redirects_to_them():
    """No SSRF: loopback/private targets are refused, also when a public page redirects there (mocked: no traffic)."""
    seen = []

    def handler(request):
        seen.append(str(request.url))
        return httpx2.Response(302, headers={"Location": "http://127.0.0.1:8080/admin"})

    b = HTTPSearchBackend("serper", api_key="K", client=httpx2.Client(transport=httpx2.MockTransport(handler)))
    for url in ("http://127.0.0.1:8080/admin", "http://10.0.0.5/", "http://[::1]/", "http://169.254.169.254/latest"):
        with pytest.raises(SearchError, match="private or local"):
            b.fetch(url)
    assert seen == []
    with pytest.raises(SearchError, match="private or local"):
        b.fetch("http://93.184.216.34/start")
    assert seen == ["http://93.184.216.34/start"]
