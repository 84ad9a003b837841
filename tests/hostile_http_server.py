"""A streamable-HTTP MCP server that misbehaves at the protocol and HTTP level (raw HTTP/1.1 on asyncio, no SDK).

``initialize``, ``tools/list`` and notifications behave; a ``GET`` (the optional server stream) is refused with 405.
Tools, one misbehaviour each:

- ``ok(text)``: an SSE reply ``ok:<text>``; first, on the same stream, the late reply of every ``late`` call that
  never got its answer (its old id, the text ``LATE reply``);
- ``late()``: opens its SSE stream and never answers (its reply comes on the next ``ok`` call's stream);
- ``forged()``: an SSE stream with a reply for an id nobody asked for, then its own reply ``forged:ok``;
- ``forged_json()``: a JSON body whose id is one nobody asked for (and no other answer);
- ``big_length()``: a JSON body declared as ``Content-Length: 1000000000``, sent as fast as it is read;
- ``big_chunked()``: a chunked JSON body with no length, endless (up to ``$HOSTILE_HTTP_MAX_MB``);
- ``big_sse()``: one SSE event that never ends (up to ``$HOSTILE_HTTP_MAX_MB``);
- ``trickle()``: a 10 MB JSON body sent 1 kB at a time (the call times out long before it ends);
- ``forget(json)``: answers ``forgot``, then forgets the session, as a restarted server would: later requests with
  its id get a 404 (with ``json``, a JSON-RPC error body ``Session not found``, as the Python SDK's server sends;
  without, an empty one) until the client initializes a new session.

What a misbehaving handler saw of its client (it closed the response; how many MB were sent) is appended as a JSON
line to ``$HOSTILE_HTTP_LOG``. The server prints ``PORT <n>`` once it listens (on ``$HOSTILE_HTTP_SOCKET``, a Unix
socket, if set).

    python -m tests.hostile_http_server
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any, ClassVar

TOOLS = ["ok", "late", "forged", "forged_json", "big_length", "big_chunked", "big_sse", "trickle", "forget"]
FORGED_ID = 987654321
MB = 1 << 20
MAX_MB = int(os.environ.get("HOSTILE_HTTP_MAX_MB", "256"))


def _log(**fields: Any) -> None:
    path = os.environ.get("HOSTILE_HTTP_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(fields) + "\n")


def _reply(rid: Any, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}], "isError": False}}


def _event(obj: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + json.dumps(obj).encode() + b"\n\n"


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class Handler:
    """One client connection: HTTP/1.1 requests with bodies, answered one at a time (keep-alive)."""

    late_ids: ClassVar[list[Any]] = []  # ids of `late` calls never answered, shared by every connection
    sessions: ClassVar[list[str]] = ["s1"]  # the session ids given out; the last one is current
    forgotten: ClassVar[dict[str, bool]] = {}  # a forgotten session id -> whether its 404 has a JSON body

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def serve(self) -> None:
        try:
            while True:
                head = await self.reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method = lines[0].split(" ", 1)[0]
                headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
                body = await self.reader.readexactly(int(headers.get("content-length", "0")))
                if (sid := headers.get("mcp-session-id")) in self.forgotten:
                    await self.gone(self.forgotten[sid])
                elif not await self.route(method, body):
                    break
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            self.writer.close()

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def status(self, code: int, reason: str, headers: str = "") -> None:
        await self.send(f"HTTP/1.1 {code} {reason}\r\n{headers}Content-Length: 0\r\n\r\n".encode())

    async def json(self, obj: dict[str, Any]) -> None:
        data = json.dumps(obj).encode()
        head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: {self.sessions[-1]}\r\n"
                f"Content-Length: {len(data)}\r\n\r\n")  # fmt: skip
        await self.send(head.encode() + data)

    async def gone(self, with_json: bool) -> None:
        """A request with a session id this server does not know: 404."""
        if not with_json:
            await self.status(404, "Not Found")
            return
        data = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Session not found"}})
        await self.send(f"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {len(data)}"
                        f"\r\n\r\n{data}".encode())  # fmt: skip

    async def sse_start(self) -> None:
        await self.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n")  # fmt: skip

    async def route(self, method: str, body: bytes) -> bool:
        """Answer one request; return whether the connection may serve another."""
        if method == "GET":
            await self.status(405, "Method Not Allowed", "Allow: POST, DELETE\r\n")
            return True
        if method != "POST":
            await self.status(200, "OK")
            return True
        msg = json.loads(body)
        rid, name = msg.get("id"), msg.get("method")
        if rid is None:  # a notification
            await self.status(202, "Accepted")
            return True
        if name == "initialize":
            if self.sessions[-1] in self.forgotten:
                self.sessions.append(f"s{len(self.sessions) + 1}")
            version = msg.get("params", {}).get("protocolVersion", "2025-06-18")
            await self.json({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": version,
                             "capabilities": {"tools": {}}, "serverInfo": {"name": "hostile-http", "version": "1"}}})  # fmt: skip
        elif name == "tools/list":
            tools = [{"name": n, "description": f"{n} (hostile)", "inputSchema": {"type": "object"}} for n in TOOLS]
            await self.json({"jsonrpc": "2.0", "id": rid, "result": {"tools": tools}})
        elif name == "tools/call":
            params = msg.get("params", {})
            return await self.call(rid, params.get("name"), params.get("arguments") or {})
        else:
            await self.json({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {name}"}})
        return True

    async def call(self, rid: Any, tool: str, args: dict[str, Any]) -> bool:
        if tool == "ok":
            await self.sse_start()
            while self.late_ids:
                await self.send(_chunk(_event(_reply(self.late_ids.pop(0), "LATE reply"))))
            await self.send(_chunk(_event(_reply(rid, f"ok:{args.get('text', '')}"))) + _chunk(b""))
        elif tool == "late":
            await self.sse_start()
            self.late_ids.append(rid)
            await self.reader.read(1)  # until the client closes the response
            _log(tool=tool, event="closed")
            return False
        elif tool == "forged":
            await self.sse_start()
            await self.send(_chunk(_event(_reply(FORGED_ID, "forged reply"))))
            await self.send(_chunk(_event(_reply(rid, "forged:ok"))) + _chunk(b""))
        elif tool == "forget":
            await self.json(_reply(rid, "forgot"))
            self.forgotten[self.sessions[-1]] = bool(args.get("json"))
        elif tool == "forged_json":
            await self.json(_reply(FORGED_ID, "for somebody else"))
        elif tool in ("big_length", "big_chunked", "big_sse", "trickle"):
            await self.flood(rid, tool)
            return False
        else:
            await self.json({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": f"no tool {tool}"}})
        return True

    async def flood(self, rid: Any, tool: str) -> None:
        """Send a body far too big (or too slow); log how far it got before the client closed it."""
        start = json.dumps(_reply(rid, "")).encode().split(b'"text": ""')[0] + b'"text": "'
        chunked = tool in ("big_chunked", "big_sse")
        if tool == "big_length":
            head = "Content-Type: application/json\r\nContent-Length: 1000000000\r\n"
        elif tool == "trickle":
            head = f"Content-Type: application/json\r\nContent-Length: {10 * MB}\r\n"
        elif tool == "big_chunked":
            head = "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
        else:
            head, start = "Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n", b"data: " + start
        piece, total, sent = (b"x" * 1024, 10 * MB, 0) if tool == "trickle" else (b"x" * MB, MAX_MB * MB, 0)
        try:
            await self.send(f"HTTP/1.1 200 OK\r\n{head}\r\n".encode())
            await self.send(_chunk(start) if chunked else start)
            while sent < total:
                await self.send(_chunk(piece) if chunked else piece)
                sent += len(piece)
                await asyncio.sleep(0.05 if tool == "trickle" else 0.002)
            _log(tool=tool, event="all sent", sent_mb=sent / MB)
            await self.reader.read(1)
        except ConnectionError:
            _log(tool=tool, event="closed", sent_mb=sent / MB)


async def main() -> None:
    path = os.environ.get("HOSTILE_HTTP_SOCKET")  # listen on this Unix socket instead (prints PORT 0)
    if path:
        server = await asyncio.start_unix_server(lambda r, w: Handler(r, w).serve(), path)
        print("PORT 0", flush=True)
    else:
        server = await asyncio.start_server(lambda r, w: Handler(r, w).serve(), "127.0.0.1", 0)
        print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
