"""One sanitiser for everything a tool result shows the model, and a server's stderr bounded on disk (issue 30).

A raw JSON-RPC stdio server (no SDK on its side, so nothing cleans its output for it) returns text with NUL, ANSI
escapes and bells, an image whose mimeType is 100 kB of escapes and junk, and a resource link and a resource whose
uris are 100 kB long; it also writes megabytes to stderr on request.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from aworld_gym.base.calls import ToolCall
from aworld_gym.mcp.hub import ToolHub
from aworld_gym.mcp.results.images import read_image
from aworld_gym.mcp.results.sanitize import clean_field, clean_text
from aworld_gym.mcp.transports import errlog
from aworld_gym.mcp.transports.errlog import CappedLog
from tests.helpers import wait_until

SERVER = textwrap.dedent(r"""
    import json, sys
    PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    DIRTY = "red\x1b[31m alert\x1b[0m\x07 a\x00b\r\nnext\x1b]0;title\x07 line\x7f"
    JUNK = "\x1b[2J\x00" + "z" * 100_000
    def out(obj):
        sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()
    for line in sys.stdin:
        msg = json.loads(line)
        method, rid = msg.get("method"), msg.get("id")
        if method == "initialize":
            out({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": msg["params"]["protocolVersion"],
                 "capabilities": {"tools": {}}, "serverInfo": {"name": "dirty", "version": "1"}}})
        elif method == "tools/list":
            tools = [{"name": n, "inputSchema": {"type": "object", "properties": {"mb": {"type": "integer"}}}}
                     for n in ("dirty", "junk_meta", "stderr")]
            out({"jsonrpc": "2.0", "id": rid, "result": {"tools": tools}})
        elif method == "tools/call":
            name = msg["params"]["name"]
            if name == "dirty":
                content = [{"type": "text", "text": DIRTY}]
            elif name == "junk_meta":
                content = [{"type": "text", "text": "the real answer is 42"},
                           {"type": "image", "data": PNG, "mimeType": "image/png" + JUNK},
                           {"type": "resource_link", "uri": "file:///" + JUNK, "name": "n"},
                           {"type": "resource", "resource": {"uri": "file:///" + JUNK, "blob": PNG,
                                                             "mimeType": "text/plain" + JUNK}}]
            else:
                chunk = ("e" * 1023 + "\n") * 1024
                for _ in range(int(msg["params"]["arguments"].get("mb", 1))):
                    sys.stderr.write(chunk)
                sys.stderr.flush()
                content = [{"type": "text", "text": "wrote"}]
            out({"jsonrpc": "2.0", "id": rid, "result": {"content": content}})
        elif rid is not None:
            out({"jsonrpc": "2.0", "id": rid, "result": {}})
""")


def _clean(text: str) -> bool:
    return all(ch in "\n\t" or (32 <= ord(ch) != 127) for ch in text)


@pytest.fixture
def dirty_hub(tmp_path):
    script = tmp_path / "dirty_server.py"
    script.write_text(SERVER)
    hub = ToolHub({"mcpServers": {"d": {"command": sys.executable, "args": [str(script)], "timeout": 10}}}).start()
    yield hub
    hub.close()


def test_text_loses_escapes_and_control_characters_but_keeps_its_words(dirty_hub):
    res = dirty_hub.call([ToolCall("dirty", {})])[0]
    assert res.error is None
    assert res.text == "red alert ab\nnext line", repr(res.text)


def test_metadata_is_bounded_so_it_cannot_crowd_out_the_result(dirty_hub):
    res = dirty_hub.call([ToolCall("junk_meta", {})])[0]
    assert res.error is None and _clean(res.text), repr(res.text[:300])
    assert res.text.startswith("the real answer is 42")
    assert len(res.text) < 1500 and not res.truncated, len(res.text)  # 300 kB of metadata came in
    assert "[image: image/png, 70 bytes]" in res.text  # shown: its type read from the bytes, not the junk
    assert res.text.count("more characters)") == 3  # each other field says it was cut


def test_clean_text_and_clean_field_units():
    assert clean_text("plain text\twith tab\n") == "plain text\twith tab\n"
    assert clean_text("\x1b[1;32mok\x1b[0m\x1b[?25l \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\") == "ok link"
    assert clean_text("a\rb\r\nc\x00\x08\x0c") == "a\nb\nc"
    assert clean_field("image/png\n\x1b[2J") == "image/png"
    line, _ = read_image("image", "image/png\x00\x1b[31m" + "q" * 10_000, "AAAA", None)  # images not shown
    assert _clean(line) and len(line) < 300 and line.startswith("[image: image/png"), line
    long = clean_field("u" * 5000, limit=100)
    assert len(long) <= 100 and long.endswith("(4930 more characters)"), long


def test_a_server_writing_megabytes_to_stderr_is_cut_on_disk(dirty_hub, monkeypatch):
    """Between calls too: the janitor thread trims every open log (here every 0.2 s instead of 5)."""
    monkeypatch.setattr(errlog, "CHECK_S", 0.2)
    conn = next(iter(dirty_hub._tools.values())).conn
    log = conn._stderr
    for _ in range(3):
        assert dirty_hub.call([ToolCall("stderr", {"mb": 2})])[0].text == "wrote"
    assert wait_until(lambda: log.trimmed_bytes >= 5 << 20, timeout=15)  # no call is running now
    assert log.size() <= errlog.MAX_BYTES
    assert log.trimmed_bytes >= 5 << 20
    tail = conn.stderr_tail(500)
    assert tail.endswith("e" * 100) and len(tail) <= 500
    assert dirty_hub.call([ToolCall("dirty", {})])[0].error is None  # the server is fine, writing on


def test_capped_log_keeps_the_tail_while_the_writer_appends(tmp_path):
    log = CappedLog(max_bytes=100_000, keep_bytes=20_000, check_s=0.0)
    writer = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfor i in range(20000): sys.stderr.write(f'line {i}\\n')\n"],
        stderr=log.file,
    )
    try:
        deadline = time.monotonic() + 30
        while writer.poll() is None and time.monotonic() < deadline:
            log.maybe_trim()
            time.sleep(0.01)
        log.trim()
        assert writer.returncode == 0
        assert log.size() <= 100_000 and log.trimmed_bytes > 0
        assert log.tail(30).endswith("line 19999")
        kept = os.pread(log.file.fileno(), 10 << 20, log._punched).decode().splitlines()[1:]  # after the hole
        numbers = [int(line.split()[1]) for line in kept]
        assert numbers == list(range(numbers[0], 20000)) and len(numbers) > 500  # nothing lost or out of order
    finally:
        log.close()
