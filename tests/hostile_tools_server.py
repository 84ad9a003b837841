"""An MCP server whose ``tools/list`` is hostile (raw JSON-RPC, no SDK), over stdio or streamable HTTP.

    python -m tests.hostile_tools_server CASE [--http --port N]

Every case lists ``ok(text)`` (echoes ``ok:<text>``) and ``add_tool()`` (adds ``new_tool`` to the list and sends
``notifications/tools/list_changed`` before its result), then the case's own tools:

- ``recursive_ref``: ``loop`` with the schema ``{"type": "object", "$ref": "#"}`` (a validator recurses forever);
- ``banana``: ``fruit`` whose property ``x`` has the unknown type ``"banana"``;
- ``huge_description``: ``chatty`` with a 2 MB description;
- ``huge_schema``: ``bloated`` (a 100 kB schema, mostly property descriptions) and ``enormous`` (5,000 properties);
- ``malformed``: five broken tool items (no inputSchema, a number for a name, a string for a schema, no name, an
  item that is not an object) and ``silent`` (a valid tool that never answers);
- ``bad_names``: names no OpenAI ``tools=`` API accepts (a space, a path, 300 characters, ``</tool_call>``, a NUL,
  the empty string) and two names that clean up to the same one;
- ``duplicates``: ``dup`` listed twice with different descriptions;
- ``deep_schema``: ``deep``, whose input schema nests 120 objects, and ``shallow`` (3 objects);
- ``secrets``: ``echo_secrets`` answers what a careless server would echo (as text and as structured content): over
  stdio its ``TOKEN`` environment variable, over HTTP the request's ``Authorization`` header and path (with the
  query);
- ``unauthorized`` (HTTP): every POST is answered 401, the body echoing the ``Authorization`` header and the path.

Any other tool called answers ``called <repr of its name> with <JSON of its arguments>``, so a test sees which
name the call reached. Over HTTP every POST is answered with ``application/json`` (``text/event-stream`` when a
notification goes first), GET with 405: a minimal streamable-HTTP server without sessions.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OBJECT: dict[str, Any] = {"type": "object", "properties": {}}


def _tool(name: Any, schema: Any = None, description: str = "") -> dict[str, Any]:
    return {"name": name, "description": description or f"{name!r} (hostile)", "inputSchema": schema or OBJECT}


def _bloated() -> dict[str, Any]:
    props = {f"p{i}": {"type": "string", "description": "d" * 1_000} for i in range(100)}
    return {"type": "object", "properties": props}


def _deep(depth: int) -> dict[str, Any]:
    """An object schema nesting ``depth`` objects (each one property ``a``)."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def _enormous() -> dict[str, Any]:
    return {"type": "object", "properties": {f"argument_{i}": {"type": "string"} for i in range(5_000)}}


CASES: dict[str, list[Any]] = {
    "recursive_ref": [_tool("loop", {"type": "object", "$ref": "#"})],
    "banana": [_tool("fruit", {"type": "object", "properties": {"x": {"type": "banana"}}})],
    "huge_description": [_tool("chatty", description="blah " * 400_000)],
    "huge_schema": [_tool("bloated", _bloated()), _tool("enormous", _enormous())],
    "malformed": [
        {"name": "no_schema", "description": "no inputSchema"},
        _tool(123),
        {"name": "string_schema", "inputSchema": "not an object"},
        {"description": "no name", "inputSchema": OBJECT},
        "not a tool at all",
        _tool("silent"),  # a valid tool that never answers (stdio): its timeout's health probe lists the tools
    ],
    "bad_names": [
        _tool("read file"),
        _tool("../../etc/passwd"),
        _tool("x" * 300),
        _tool("</tool_call>"),
        _tool("nul\x00name"),
        _tool(""),
        _tool("a b"),
        _tool("a.b"),
    ],
    "duplicates": [_tool("dup", description="the first dup"), _tool("dup", description="the second dup")],
    "secrets": [_tool("echo_secrets")],
    "deep_schema": [_tool("deep", _deep(120)), _tool("shallow", _deep(3))],
}


class Server:
    """The tool list of one case, and the answers to one JSON-RPC message."""

    def __init__(self, case: str) -> None:
        self.tools: list[Any] = [
            _tool("ok", {"type": "object", "properties": {"text": {"type": "string"}}}),
            _tool("add_tool"),
            *CASES.get(case, []),
        ]
        self.lock = threading.Lock()
        self.case = case
        self.echoed = {"TOKEN": os.environ.get("TOKEN", "")}  # what echo_secrets answers (over HTTP: per request)

    def answer(self, msg: Any) -> list[dict[str, Any]]:
        """The messages to send back for ``msg`` (notifications first, then the response); none for a notification."""
        if not isinstance(msg, dict) or "id" not in msg or "method" not in msg:
            return []
        rid, method, params = msg["id"], msg["method"], msg.get("params") or {}
        if method == "initialize":
            caps = {"tools": {"listChanged": True}}
            return [_reply(rid, {"protocolVersion": params.get("protocolVersion", "2025-06-18"), "capabilities": caps,
                                 "serverInfo": {"name": "hostile-tools", "version": "1"}})]  # fmt: skip
        if method == "tools/list":
            with self.lock:
                return [_reply(rid, {"tools": list(self.tools)})]
        if method == "ping":
            return [_reply(rid, {})]
        if method == "tools/call":
            return self.call(rid, params.get("name"), params.get("arguments") or {})
        return [{"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"method not found: {method}"}}]

    def call(self, rid: Any, name: Any, args: dict[str, Any]) -> list[dict[str, Any]]:
        if name == "ok":
            return [_text(rid, f"ok:{args.get('text', '')}")]
        if name == "add_tool":
            with self.lock:
                self.tools.append(_tool("new_tool", {"type": "object", "properties": {"n": {"type": "integer"}}},
                                        "A tool added while the episode ran."))  # fmt: skip
            changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
            return [changed, _text(rid, "added new_tool")]
        if name == "silent":
            return []
        if name == "echo_secrets":
            result = {"content": [{"type": "text", "text": json.dumps(self.echoed)}], "structuredContent": {
                "seen": self.echoed}, "isError": False}  # fmt: skip
            return [_reply(rid, result)]
        return [_text(rid, f"called {name!r} with {json.dumps(args, sort_keys=True)}")]


def _reply(rid: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def _text(rid: Any, text: str) -> dict[str, Any]:
    return _reply(rid, {"content": [{"type": "text", "text": text}], "isError": False})


def serve_stdio(server: Server) -> None:
    for line in sys.stdin.buffer:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        for out in server.answer(msg):
            sys.stdout.buffer.write((json.dumps(out) + "\n").encode())
        sys.stdout.buffer.flush()


def serve_http(server: Server, port: int) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            echoed = {"authorization": self.headers.get("Authorization", ""), "path": self.path}
            if server.case == "unauthorized":
                data = f"unauthorized: {json.dumps(echoed)}".encode()
                self.send_response(401)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            server.echoed = echoed
            try:
                out = server.answer(json.loads(body))
            except ValueError:
                out = []
            if not out:
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if len(out) == 1:
                data, kind = json.dumps(out[0]).encode(), "application/json"
            else:
                data, kind = (
                    "".join(f"event: message\ndata: {json.dumps(m)}\n\n" for m in out).encode(),
                    "text/event-stream",
                )
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_DELETE = do_GET

        def log_message(self, *args: Any) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def main(argv: list[str]) -> None:
    server = Server(argv[0] if argv else "")
    if "--http" in argv:
        serve_http(server, int(argv[argv.index("--port") + 1]))
    else:
        serve_stdio(server)


if __name__ == "__main__":
    main(sys.argv[1:])
