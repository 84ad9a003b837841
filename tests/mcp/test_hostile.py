"""Hostile servers: each protocol-level misbehaviour ends its call at once or at its timeout (told by the result's
kind, with clocks only as bounds that hold on a loaded machine), says what went wrong in one or two readable lines, and leaves the next calls working (no wedged session)."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time

import pytest

from aworld_gym.base.calls import ToolCall
from aworld_gym.mcp.hub import ToolHub
from aworld_gym.mcp.tools.listing import fetch_page
from aworld_gym.mcp.transports.stdio import LineReader, message_id
from tests.helpers import wait_until

TIMEOUT = 4.0
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def _config(tmp_path, **env: str) -> dict:
    env = {"HOSTILE_CANCEL_LOG": str(tmp_path / "cancelled.jsonl"), "HOSTILE_PID_FILE": str(tmp_path / "pids"), **env}
    return {"mcpServers": {"h": {"command": sys.executable, "args": ["-m", "tests.hostile_server"],
                                 "cwd": str(ROOT), "timeout": TIMEOUT, "env": env}}}  # fmt: skip


@pytest.fixture
def hostile(tmp_path, request):
    """A hub on the hostile server; ``indirect`` param "uvloop" runs the hub's loop on uvloop (which uvicorn, Ray and
    vLLM install as the policy, and whose subprocesses get socket pairs unless the transport makes its own pipes)."""
    if getattr(request, "param", "asyncio") == "uvloop":
        import asyncio

        import uvloop  # declared in the dev extra: installed by make

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())  # put back after the test by conftest's fixture
    hub = ToolHub(_config(tmp_path)).start()
    hub.cancel_log = tmp_path / "cancelled.jsonl"  # type: ignore[attr-defined]
    hub.pid_file = tmp_path / "pids"  # type: ignore[attr-defined]
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
    "exits while a child holds stdout": ("die_child_holds_stdout", {}, "server_died", "died during the call"),
    "a reply nested too deep": ("deep", {}, "tool_error", "could not be parsed"),
    "a reply with invalid UTF-8": ("bad_utf8", {}, "tool_error", "could not be parsed"),
    "a null result": ("null_result", {}, "tool_error", "could not be parsed"),
    "a list result": ("list_result", {}, "tool_error", "could not be parsed"),
    "the reply in a JSON-RPC batch": ("batch", {}, "tool_error", "could not be parsed"),
    "2,000 server-to-client requests first": ("server_requests", {"n": 2000}, None, "sent 2000"),
    "10,000 junk lines first": ("junk", {"n": 10_000}, None, "junked"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_reply_ends_its_call_and_the_next_calls_work(hostile, case):
    tool, args, kind, phrase = CASES[case]
    t0 = time.perf_counter()
    bad = hostile.call([ToolCall(tool, args)])[0]
    took = time.perf_counter() - t0
    # A kind other than timeout says the call ended before its deadline (a result after the deadline is a timeout,
    # whatever came), so "at once" needs no clock; a timeout ends at the deadline plus a probe bounded by 2 s. The
    # bound holds at 4x load and fails a session wedged for minutes (the 40 MB reply before the bounded reader).
    assert took < 3 * TIMEOUT, f"{case}: {took:.1f} s"
    assert bad.error == kind, bad.text
    assert phrase in bad.text and _readable(bad.text), repr(bad.text)
    for i in range(2):  # the next episodes' calls: right (one stuck behind the last would end as a timeout)
        ok = hostile.call([ToolCall("ok", {"text": str(i)})])[0]
        assert (ok.error, ok.text) == (None, f"ok:{i}"), ok.text


def test_late_and_forged_replies_are_dropped_and_counted(hostile):
    """A reply to an id nobody asked for, and one to a call abandoned at its timeout (and cancelled), never reach a
    caller: both are dropped and counted, as over HTTP (tests/mcp/test_hostile_http.py)."""
    conn = hostile._conns[0]
    assert conn.reply_drops.count == 0
    assert hostile.call([ToolCall("wrong_id", {})])[0].error == "timeout"
    assert hostile.call([ToolCall("late", {"s": TIMEOUT + 0.5})])[0].error == "timeout"
    time.sleep(1.0)  # the late reply is on the pipe now (read when the next call runs the hub's loop)
    ok = hostile.call([ToolCall("ok", {"text": "mine"})])[0]
    assert (ok.error, ok.text) == (None, "ok:mine") and conn.reply_drops.count == 2


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
        m.setattr("aworld_gym.mcp.tools.calls.fetch_page", never)
        res = hostile.call([ToolCall("hang", {})])[0]
    assert res.error == "timeout" and not conn.alive
    ok = hostile.call([ToolCall("ok", {"text": "after"})])[0]
    assert ok.text == "ok:after" and hostile.restarts == before + 1


def _gone(pid: int) -> bool:
    """Dead, or a zombie nobody has reaped yet (it runs nothing and holds nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
@pytest.mark.parametrize("hostile", ["asyncio", "uvloop"], indirect=True)
def test_closing_kills_every_process_the_server_left(hostile):
    """A helper in its own process group, a setsid grandchild whose parent exited (both off our pipes) and a setsid
    child that outlived its server holding stdout: all gone after close, though the server exits promptly on EOF,
    and those of the server that crashed are gone when it is restarted."""
    assert hostile.call([ToolCall("fork_helper", {})])[0].text == "forked 2"
    assert hostile.call([ToolCall("die_child_holds_stdout", {})])[0].error == "server_died"
    assert hostile.call([ToolCall("fork_helper", {})])[0].text == "forked 2"  # on the restarted server
    pids = [int(x) for x in hostile.pid_file.read_text().split()]
    assert len(pids) == 5 and not any(_gone(p) for p in pids[3:])  # the first three went with the restart
    hostile.close()
    wait_until(lambda: all(_gone(p) for p in pids), timeout=3)
    assert [p for p in pids if not _gone(p)] == []


def test_a_server_that_dies_while_its_child_holds_stdout_is_reported_at_once(tmp_path):
    """The server's exit is seen though its stdout stays open (a setsid child holds it): the call ends when the process
    exits, not at its timeout. The timeout is 60 s here, so "before half of it" holds at any load, and a client that
    waited for stdout's EOF (never coming) would end the call at 60 s with the timeout's probe, failing the bound."""
    config = _config(tmp_path)
    config["mcpServers"]["h"]["timeout"] = 60.0
    hub = ToolHub(config).start()
    try:
        t0 = time.perf_counter()
        res = hub.call([ToolCall("die_child_holds_stdout", {})])[0]
        took = time.perf_counter() - t0
        assert res.error == "server_died" and "did not answer within" not in res.text, res.text
        assert took < 30.0, f"took {took:.1f} s: the exit was found by the 60 s timeout, not when it happened"
    finally:
        hub.close()


@pytest.mark.parametrize("hostile", ["asyncio", "uvloop"], indirect=True)
def test_a_server_that_stops_reading_ends_the_step_within_its_timeout(hostile, monkeypatch):
    """The pipe to the server fills: the blocked write marks the session dead (no blocked courtesy cancel, no
    second wait for the probe), and the next call runs on a fresh server. On uvloop too, whose subprocesses would
    get socket pairs that take the whole 190 kB without blocking (the transport makes its own 64 kB pipes).

    Checked by events, not a tight clock: the call ends as ``timeout`` (its 4 s deadline fired) or ``server_died``
    (the 5 s write deadline ended the session), the session is already dead when the step returns, and no probe was
    sent (a probe would queue behind the blocked write and wait its 2 s). The one clock, ``3 * TIMEOUT``, holds at 4x
    load (both deadlines are clock-driven; what follows them is milliseconds of Python) and still fails a step that
    waits for the write or a cancel to drain: the server never reads again, so such a step hangs."""
    assert hostile.call([ToolCall("stop_reading", {})])[0].text == "stopped reading"
    conn = next(iter(hostile._tools.values())).conn
    probes, real_fetch = [], fetch_page

    async def counted(*args, **kwargs):
        probes.append(args)
        return await real_fetch(*args, **kwargs)

    monkeypatch.setattr("aworld_gym.mcp.tools.calls.fetch_page", counted)
    t0 = time.perf_counter()
    res = hostile.call([ToolCall("ok", {"text": "x" * 190_000})])[0]
    took = time.perf_counter() - t0
    assert res.error in ("timeout", "server_died"), res.text
    assert (res.error == "timeout") == ("did not answer within" in res.text), res.text
    assert not conn.alive and probes == [], (conn.alive, len(probes))  # marked dead at once, no probe waited
    assert took < 3 * TIMEOUT, f"{took:.1f} s ({res.text[:200]})"
    monkeypatch.setattr("aworld_gym.mcp.tools.calls.fetch_page", real_fetch)
    assert hostile.call([ToolCall("ok", {"text": "next"})])[0].text == "ok:next"


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_server_to_client_requests_in_flight_are_bounded(hostile):
    """20,000 requests from a server that then never reads our answers: a bounded number is being answered, the rest
    refused or dropped, so the driver's memory stays flat; the session then ends and the next call restarts it."""
    base, peak, done = _rss(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        res = hostile.call([ToolCall("server_requests", {"n": 20_000, "read": False})])[0]
        time.sleep(1.0)  # what the session does with the requests after the call
    finally:
        done.set()
        sampler.join()
    assert res.text == "sent 20000"
    assert peak[0] - base < 40 << 20, f"+{(peak[0] - base) >> 20} MB"
    deadline = time.monotonic() + 3 * TIMEOUT
    while time.monotonic() < deadline and (ok := hostile.call([ToolCall("ok", {"text": "a"})])[0]).error:
        pass
    assert ok.text == "ok:a"


def test_junk_on_stdout_gives_a_bounded_number_of_warnings(hostile, caplog):
    logger = logging.getLogger("aworld_gym.mcp.transports.stdio")
    logger.addHandler(caplog.handler)  # records from the hub's loop thread, whatever the logging config
    try:
        with caplog.at_level(logging.WARNING, logger="aworld_gym.mcp.transports.stdio"):
            assert hostile.call([ToolCall("junk", {"n": 10_000})])[0].text == "junked"
            hostile.close()
    finally:
        logger.removeHandler(caplog.handler)
    records = list({id(r): r for r in caplog.records if r.name == "aworld_gym.mcp.transports.stdio"}.values())
    assert 1 <= len(records) <= 10 and sum(len(r.getMessage()) for r in records) < 5000
    assert "10000" in records[-1].getMessage()  # the count at close


def test_a_tools_list_reply_that_cannot_be_parsed_fails_the_start_at_once(tmp_path):
    from aworld_gym.base.errors import ServerError

    t0 = time.perf_counter()
    with pytest.raises(ServerError, match="could not be parsed"):
        ToolHub(_config(tmp_path, HOSTILE_DEEP_LIST="1")).start()
    assert time.perf_counter() - t0 < 10


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
    "tool, args, kind", [("big_output", {"chars": 5_000_000}, None), ("sleep", {"seconds": 60}, "timeout")]
)
def test_over_streamable_http_a_huge_result_or_a_hang_leaves_the_session_working(http_url, tool, args, kind):
    """Over HTTP a result is one response body (read linearly, no line to assemble): 5 M characters (a 10 MB body,
    under the 16 MB bound on one message) arrive whole and are cut to the hub's output bound; a hang times out. The
    next calls work either way."""
    hub = ToolHub({"mcpServers": {"d": {"type": "streamable-http", "url": http_url, "timeout": TIMEOUT}}}).start()
    try:
        t0 = time.perf_counter()
        res = hub.call([ToolCall(tool, args)])[0]
        assert time.perf_counter() - t0 < 3 * TIMEOUT  # the hang ends at its 4 s timeout (plus the probe), not at 60 s
        assert res.error == kind and _readable(res.text[-200:])
        assert kind or res.truncated
        for i in range(2):
            assert hub.call([ToolCall("add", {"a": 1, "b": i})])[0].text == f"{1.0 + i}"
    finally:
        hub.close()
