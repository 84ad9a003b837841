"""Hostile streamable-HTTP servers (tests/hostile_http_server.py): a reply is taken only for its own request id (a
late or forged one is dropped and counted, never another call's result), a body over the client's bound is neither
buffered nor read on (the call is told at once, readably), an abandoned call's response is closed, and the next
calls work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aworld_gym.base.calls import ToolCall
from aworld_gym.mcp.hub import ToolHub
from tests.helpers import wait_until

TIMEOUT = 4.0
ROOT = Path(__file__).resolve().parents[2]
RSS_BOUND_MB = 100


@pytest.fixture(params=["tcp"])
def hostile(request, tmp_path):
    """A hub on the hostile server, over TCP (or, with the param ``"unix"``, a Unix socket)."""
    log, sock = tmp_path / "http.jsonl", tmp_path / "s.sock"
    env = {**os.environ, "HOSTILE_HTTP_LOG": str(log)} | (
        {"HOSTILE_HTTP_SOCKET": str(sock)} if request.param == "unix" else {}
    )
    proc = subprocess.Popen([sys.executable, "-m", "tests.hostile_http_server"], cwd=str(ROOT), text=True,
                            stdout=subprocess.PIPE, env=env)  # fmt: skip
    try:
        line = proc.stdout.readline()
        assert line.startswith("PORT "), line
        entry = {"type": "streamable-http", "url": f"http://127.0.0.1:{int(line.split()[1])}/mcp", "timeout": TIMEOUT}
        if request.param == "unix":
            entry |= {"url": "http://localhost/mcp", "socket": str(sock)}
        hub = ToolHub({"mcpServers": {"h": entry}}).start()
        hub.log = log  # type: ignore[attr-defined]
        hub.conn = next(iter(hub._tools.values())).conn  # type: ignore[attr-defined]
        try:
            yield hub
        finally:
            hub.close()
    finally:
        proc.kill()
        proc.wait(5)


def _events(hub, tool: str) -> list[dict]:
    if not hub.log.exists():
        return []
    return [e for e in map(json.loads, hub.log.read_text().splitlines()) if e["tool"] == tool]


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


def _reset_peak() -> str:
    """Reset the peak RSS (Linux: clear_refs 5); return the field that holds the growth's high mark."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return "VmHWM"
    except OSError:
        return "VmRSS"


def _next_calls_work(hub) -> None:
    """Two calls answered with their own results. A call stuck behind what the last one left (a wedged stream, a
    response never closed) ends at its timeout with a ``timeout`` result and is not retried, so the result alone
    fails such a call, on a quiet machine or a loaded one, with no clock."""
    for i in range(2):
        ok = hub.call([ToolCall("ok", {"text": str(i)})])[0]
        assert (ok.error, ok.text) == (None, f"ok:{i}"), ok.text


@pytest.mark.parametrize("hostile", ["tcp", "unix"], indirect=True)
def test_a_late_reply_on_the_next_calls_stream_is_dropped_not_taken_as_its_result(hostile):
    bad = hostile.call([ToolCall("late", {})])[0]
    assert bad.error == "timeout", bad.text
    wait_until(lambda: _events(hostile, "late"), timeout=5)  # the abandoned call's response was closed
    ok = hostile.call([ToolCall("ok", {"text": "mine"})])[0]
    assert (ok.error, ok.text) == (None, "ok:mine"), ok.text  # not "LATE reply"
    assert hostile.conn.reply_drops.count == 1
    _next_calls_work(hostile)
    assert hostile.conn.reply_drops.count == 1


def test_a_forged_reply_on_a_calls_stream_is_dropped_and_its_own_reply_taken(hostile):
    res = hostile.call([ToolCall("forged", {})])[0]
    assert (res.error, res.text) == (None, "forged:ok"), res.text
    assert hostile.conn.reply_drops.count == 1
    _next_calls_work(hostile)


def test_a_json_body_with_another_requests_id_answers_its_call_at_once(hostile):
    res = hostile.call([ToolCall("forged_json", {})])[0]
    # told at once, not at the timeout, with no clock: a call that ends past its deadline is a ``timeout`` result
    # whatever came (aworld_gym/mcp/tools/calls.py::send), so a tool_error says the forged body ended the call first
    assert res.error == "tool_error" and "reply for another request" in res.text, res.text
    assert hostile.conn.reply_drops.count == 1
    _next_calls_work(hostile)


@pytest.mark.parametrize("hostile", ["tcp", "unix"], indirect=True)
@pytest.mark.parametrize(
    "tool",
    [
        "big_length",  # Content-Length: 1000000000: refused before a byte of the body is read
        "big_chunked",  # a chunked JSON body with no length: reading stops at the bound
        "big_sse",  # one SSE event that never ends: reading stops at the bound
    ],
)
def test_a_body_over_the_bound_is_not_buffered_and_its_call_is_told_at_once(hostile, tool):
    before = _status_kb("VmRSS")
    field = _reset_peak()
    res = hostile.call([ToolCall(tool, {})])[0]
    time.sleep(1.0)  # a read that went on after the call ended would show here
    grew_mb = (_status_kb(field) - before) / 1024
    # told before the deadline, with no clock: a call that ends past it is a ``timeout`` result whatever came
    assert res.error == "tool_error", res.text[:300]
    assert "more than this client accepts (16 MB)" in res.text and len(res.text.splitlines()) <= 2, res.text[:300]
    assert grew_mb < RSS_BOUND_MB, f"{tool}: RSS grew {grew_mb:.0f} MB"
    wait_until(lambda: _events(hostile, tool), timeout=5)  # the server saw its response closed
    assert _events(hostile, tool)[0]["event"] == "closed"
    assert _events(hostile, tool)[0]["sent_mb"] < 64  # what was read, and what socket buffers held
    _next_calls_work(hostile)


def test_an_abandoned_calls_response_is_closed_so_nothing_reads_on(hostile):
    res = hostile.call([ToolCall("trickle", {})])[0]
    assert res.error == "timeout", res.text
    wait_until(lambda: _events(hostile, "trickle"), timeout=5)
    assert _events(hostile, "trickle")[0]["event"] == "closed"
    _next_calls_work(hostile)


def test_the_id_check_on_each_stream_and_the_rate_limited_warning(monkeypatch):
    """Directly on the transport: a reply on a request's stream is taken only for that id ("7" is not 7; an error
    with id null is the request's own); on the GET stream only a request in flight may be answered; every drop is
    counted, one warning a minute logged."""
    import anyio
    import httpx2
    from mcp.shared._context_streams import create_context_streams

    from aworld_gym.mcp.transports.http import BoundedHTTPTransport

    def event(rid, kind="result"):
        body = {"jsonrpc": "2.0", "id": rid, kind: {} if kind == "result" else {"code": -1, "message": "x"}}
        return httpx2.ServerSentEvent(data=json.dumps(body))

    async def main():
        transport = BoundedHTTPTransport("http://x/mcp")
        writer, reader = create_context_streams[object](10)
        transport._in_flight_posts[9] = object()  # a request in flight
        taken = [await transport._handle_sse_event(e, writer, 7) for e in (event(8), event("7"), event(None, "error"))]
        taken.append(await transport._handle_sse_event(event(7), writer, 7))
        taken += [await transport._handle_sse_event(e, writer, None) for e in (event(5), event(9))]
        writer.close()
        got = [m.message.id async for m in reader]
        return transport.drops.count, taken, got

    import aworld_gym.mcp.transports.http as http_module

    said: list[str] = []  # taken at the call, not through caplog (in the full suite caplog has missed records)
    monkeypatch.setattr(http_module.logger, "warning", lambda msg, *args: said.append(msg % args))
    drops, taken, got = anyio.run(main)
    assert drops == 3 and got == [7, 7, 9]  # the null-id error answers 7; 8, "7" and 5 are dropped
    assert taken == [False, False, True, True, False, True]
    assert len(said) == 1 and "dropped" in said[0], said


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_bomb_is_bounded_after_decoding(encoding):
    """A 500 error whose body is ~200 kB of gzip holding 200 MB of zeros (the SDK and our refusal note read error
    bodies whole): the bound applies to the decoded bytes, which are never expanded past it."""
    import gzip
    import resource
    import zlib

    import anyio
    import httpx2

    from aworld_gym.mcp.transports.http import BodyTooLarge, bound_bodies

    packer = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)
    zeros = b"\0" * (1 << 20)
    bomb = b"".join(packer.compress(zeros) for _ in range(200)) + packer.flush()  # 200 MB, never held whole

    class Body(httpx2.AsyncByteStream):
        async def __aiter__(self):
            for i in range(0, len(bomb), 65536):
                yield bomb[i : i + 65536]

    def reply(request):
        assert request.headers["accept-encoding"] == "gzip, deflate"  # no encoding we cannot decode under the bound
        headers = {"content-encoding": encoding, "content-type": "application/json"}
        return httpx2.Response(500, headers=headers, stream=Body())

    async def main():
        async with httpx2.AsyncClient(transport=httpx2.MockTransport(reply)) as http:
            bound_bodies(http, max_bytes=1 << 20)
            async with http.stream("POST", "http://x/mcp", json={}) as response:
                with pytest.raises(BodyTooLarge):
                    await response.aread()
        async with httpx2.AsyncClient(transport=httpx2.MockTransport(lambda r: httpx2.Response(
                200, headers={"content-encoding": encoding}, stream=Small()))) as http:  # fmt: skip
            bound_bodies(http, max_bytes=1 << 20)
            return (await http.post("http://x/mcp", json={})).json()

    small = gzip.compress(b'{"ok": 1}') if encoding == "gzip" else zlib.compress(b'{"ok": 1}')

    class Small(httpx2.AsyncByteStream):
        async def __aiter__(self):
            yield small

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert anyio.run(main) == {"ok": 1}  # a small compressed reply still reads
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # kB: the 200 MB never existed


@pytest.mark.parametrize("with_json", [False, True])
def test_a_session_the_server_forgot_is_a_dead_server_then_a_new_session(hostile, with_json):
    """A restarted HTTP server answers the old session id with 404: the SDK client reports it as INVALID_REQUEST
    (its own "Session terminated", or the server's JSON error "Session not found"). The call ends as server_died and
    the next call opens a new session (before, a JSON 404 was a tool error, and so was every later call)."""
    assert hostile.call([ToolCall("forget", {"json": with_json})])[0].text == "forgot"
    gone = hostile.call([ToolCall("ok", {"text": "a"})])[0]
    assert gone.error == "server_died", gone.text
    assert "Session not found" in gone.text if with_json else "Session terminated" in gone.text
    again = hostile.call([ToolCall("ok", {"text": "b"})])[0]
    assert again.text == "ok:b" and hostile.restarts == 1
