"""A stdio MCP server that misbehaves at the protocol level, one misbehaviour per tool (raw JSON-RPC, no SDK).

Tools: ``ok(text)`` answers normally; ``huge(mb)`` answers with an ``mb`` MB text; ``flood(n)`` sends ``n`` log
notifications before its result; ``garbage()`` writes a non-JSON line and never answers; ``wrong_id()`` answers
with an id nobody asked for; ``hang()`` never answers; ``die()`` exits mid-call; ``nul_error()`` answers with a
JSON-RPC error whose message holds a NUL byte and control characters; ``weird()`` returns content items of
unknown type and an image with bad base64; ``empty_error()`` answers ``isError: true`` with no content.
``notifications/cancelled`` are appended to ``$HOSTILE_CANCEL_LOG``.

    python -m tests.hostile_server
"""

from __future__ import annotations

import json
import os
import sys
import threading

TOOLS = {
    "ok": {"text": {"type": "string"}},
    "huge": {"mb": {"type": "integer"}},
    "flood": {"n": {"type": "integer"}},
    "garbage": {},
    "wrong_id": {},
    "hang": {},
    "die": {},
    "nul_error": {},
    "weird": {},
    "empty_error": {},
}
_lock = threading.Lock()


def write(obj: dict) -> None:
    data = (json.dumps(obj) + "\n").encode()
    with _lock:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


def result(rid: object, content: list[dict], is_error: bool = False) -> None:
    write({"jsonrpc": "2.0", "id": rid, "result": {"content": content, "isError": is_error}})


def call(rid: object, name: str, args: dict) -> None:
    if name == "ok":
        result(rid, [{"type": "text", "text": f"ok:{args.get('text', '')}"}])
    elif name == "huge":
        result(rid, [{"type": "text", "text": "x" * (int(args.get("mb", 40)) << 20)}])
    elif name == "flood":
        for i in range(int(args.get("n", 20_000))):
            write({"jsonrpc": "2.0", "method": "notifications/message",
                   "params": {"level": "info", "data": f"log line {i} " + "y" * 200}})  # fmt: skip
        result(rid, [{"type": "text", "text": "flooded"}])
    elif name == "garbage":
        with _lock:
            sys.stdout.buffer.write(b"this is not json {{{\n")
            sys.stdout.buffer.flush()
    elif name == "wrong_id":
        result(987654321, [{"type": "text", "text": "for somebody else"}])
    elif name == "hang":
        pass
    elif name == "die":
        os._exit(3)
    elif name == "nul_error":
        write({"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": "bad\x00thing\x1b[31m happened\x07"}})
    elif name == "empty_error":
        result(rid, [], is_error=True)
    elif name == "weird":
        result(
            rid,
            [{"type": "hologram", "data": 1}, {"type": "image", "data": "%%%not base64%%%", "mimeType": "image/png"}],
        )


def main() -> None:
    for line in sys.stdin.buffer:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        method, rid = msg.get("method"), msg.get("id")
        if method == "initialize":
            version = msg.get("params", {}).get("protocolVersion", "2025-06-18")
            write({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": version, "capabilities": {"tools": {}},
                                                           "serverInfo": {"name": "hostile", "version": "1"}}})  # fmt: skip
        elif method == "tools/list":
            tools = [{"name": n, "description": f"{n} (hostile)", "inputSchema": {"type": "object", "properties": p}}
                     for n, p in TOOLS.items()]  # fmt: skip
            write({"jsonrpc": "2.0", "id": rid, "result": {"tools": tools}})
        elif method == "ping":
            write({"jsonrpc": "2.0", "id": rid, "result": {}})
        elif method == "tools/call":
            params = msg.get("params", {})
            threading.Thread(target=call, args=(rid, params.get("name"), params.get("arguments") or {})).start()
        elif rid is not None and method not in ("initialize", "tools/list", "ping", "tools/call"):
            write({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"method not found: {method}"}})
        elif method == "notifications/cancelled":
            log = os.environ.get("HOSTILE_CANCEL_LOG")
            if log:
                with open(log, "a") as f:
                    f.write(json.dumps(msg.get("params", {})) + "\n")


if __name__ == "__main__":
    main()
