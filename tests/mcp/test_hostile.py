"""Hostile servers: each protocol-level misbehaviour ends its call within the timeout plus a small margin, says what
went wrong in one or two readable lines, and leaves the next calls working (no wedged session)."""

from __future__ import annotations

import json
import sys
import time

import pytest

from aworld_gym.core.actions import ToolCall
from aworld_gym.mcp.hub import ToolHub
from aworld_gym.mcp.stdio import LineReader, message_id
from tests.helpers import wait_until

TIMEOUT = 4.0
MARGIN = 3.0  # the health probe after a timeout is bounded by 2 s
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


@pytest.fixture
def hostile(tmp_path):
    log = tmp_path / "cancelled.jsonl"
    config = {"mcpServers": {"h": {"command": sys.executable, "args": ["-m", "tests.hostile_server"],
                                   "cwd": str(ROOT), "timeout": TIMEOUT,
                                   "env": {"HOSTILE_CANCEL_LOG": str(log)}}}}  # fmt: skip
    hub = ToolHub(config).start()
    hub.cancel_log = log  # type: ignore[attr-defined]
    yield hub
    hub.close()


def _readable(text: str) -> bool:
    return all(ch in "\n\t" or ord(ch) >= 32 for ch in text) and "\x1b" not in text and len(text.splitlines()) <= 2


CASES = {
    # tool, arguments, the error kind, a phrase the observation must hold
    "a 40 MB result": ("huge", {"mb": 40}, "tool_error", "more than this client accepts"),
    "20,000 log notifications first": ("flood", {"n": 20_000}, None, "flooded"),
    "a non-JSON line": ("garbage", {}, "timeout", "did not answer within"),
    "a reply with an unknown id": ("wrong_id", {}, "timeout", "did not answer within"),
    "no answer": ("hang", {}, "timeout", "did not answer within"),
    "exits mid-call": ("die", {}, "server_died", "died during the call"),
    "an error with NUL and escapes": ("nul_error", {}, "tool_error", "badthing happened"),
    "unknown content and bad base64": ("weird", {}, "tool_error", "not valid MCP"),
    "an error with no content": ("empty_error", {}, "tool_error", "reported an error and gave no message"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_reply_ends_its_call_and_the_next_calls_work(hostile, case):
    tool, args, kind, phrase = CASES[case]
    t0 = time.perf_counter()
    bad = hostile.call([ToolCall(tool, args)])[0]
    took = time.perf_counter() - t0
    assert took < TIMEOUT + MARGIN, f"{case}: {took:.1f} s"
    assert bad.error == kind, bad.text
    assert phrase in bad.text and _readable(bad.text), repr(bad.text)
    for i in range(2):  # the next episodes' calls: fast and right
        t0 = time.perf_counter()
        ok = hostile.call([ToolCall("ok", {"text": str(i)})])[0]
        assert (ok.error, ok.text) == (None, f"ok:{i}"), ok.text
        assert time.perf_counter() - t0 < 3.0


def test_a_timed_out_call_is_cancelled_at_the_server(hostile):
    res = hostile.call([ToolCall("hang", {})])[0]
    assert res.error == "timeout"
    wait_until(lambda: hostile.cancel_log.exists() and hostile.cancel_log.read_text().strip(), timeout=5)
    cancelled = [json.loads(line) for line in hostile.cancel_log.read_text().splitlines()]
    assert len(cancelled) == 1 and "requestId" in cancelled[0]


def test_a_wedged_session_is_found_and_restarted(hostile, monkeypatch):
    """A server that stops reading its input (here: it hangs every call and then even the probe): the probe after
    the timeout finds the session dead, and the next call runs on a fresh server process."""
    before = hostile.restarts
    conn = next(iter(hostile._tools.values())).conn

    async def never(*a, **k):  # a session that no longer answers anything: the probe's tools/list never returns
        import asyncio

        await asyncio.sleep(60)

    with monkeypatch.context() as m:
        m.setattr("aworld_gym.mcp.calls.fetch_page", never)
        res = hostile.call([ToolCall("hang", {})])[0]
    assert res.error == "timeout" and not conn.alive
    ok = hostile.call([ToolCall("ok", {"text": "after"})])[0]
    assert ok.text == "ok:after" and hostile.restarts == before + 1


def test_the_line_reader_is_bounded_and_linear():
    reader = LineReader(max_bytes=1000)
    big = b'{"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "' + b"x" * 5000 + b'"}]}}\n'
    out = []
    for i in range(0, len(big), 300):  # in pieces, as a pipe delivers it
        out += reader.feed(big[i : i + 300])
    out += reader.feed(
        b'{"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": 1}}\n'
    )
    out += reader.feed(b'{"jsonrpc": "2.0", "id": 8, "result": {}}\n')
    assert len(out) == 2 and reader.dropped_logs == 1
    assert out[0].message.id == 7 and "more than this client accepts" in out[0].message.error.message
    assert out[1].message.id == 8
    assert message_id(b'{"jsonrpc":"2.0","id":"abc","result"') == "abc"
    assert message_id(b'{"jsonrpc":"2.0","result":') is None


@pytest.mark.parametrize(
    "tool, args, kind", [("big_output", {"chars": 40_000_000}, None), ("sleep", {"seconds": 60}, "timeout")]
)
def test_over_streamable_http_a_huge_result_or_a_hang_leaves_the_session_working(http_url, tool, args, kind):
    """Over HTTP a result is one response body (read linearly, no line to assemble): 40 MB arrives whole and is cut
    to the hub's output bound; a hang times out. The next calls work either way."""
    hub = ToolHub({"mcpServers": {"d": {"type": "streamable-http", "url": http_url, "timeout": TIMEOUT}}}).start()
    try:
        t0 = time.perf_counter()
        res = hub.call([ToolCall(tool, args)])[0]
        assert time.perf_counter() - t0 < TIMEOUT + MARGIN
        assert res.error == kind and _readable(res.text[-200:])
        assert kind or res.truncated
        for i in range(2):
            assert hub.call([ToolCall("add", {"a": 1, "b": i})])[0].text == f"{1.0 + i}"
    finally:
        hub.close()
