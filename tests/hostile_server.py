"""A stdio MCP server that misbehaves at the protocol level, one misbehaviour per tool (raw JSON-RPC, no SDK).

Tools: ``ok(text)`` answers normally; ``huge(mb)`` answers with an ``mb`` MB text; ``flood(n)`` sends ``n`` log
notifications before its result; ``garbage()`` writes a non-JSON line and never answers; ``wrong_id()`` answers
with an id nobody asked for; ``late(s)`` answers after ``s`` seconds; ``hang()`` never answers; ``die()`` exits mid-call; ``nul_error()`` answers with a
JSON-RPC error whose message holds a NUL byte and control characters; ``weird()`` returns content items of
unknown type and an image with bad base64; ``empty_error()`` answers ``isError: true`` with no content.

Process and pipe misbehaviours: ``fork_helper()`` leaves a child in its own process group and a setsid grandchild
(its parent gone) sleeping, both with stdio on /dev/null; ``die_child_holds_stdout()`` exits, leaving a setsid child
that holds stdout; ``stop_reading()`` answers, then never reads stdin again; ``server_requests(n)`` sends ``n``
server-to-client requests (``ping``, ``roots/list``) before its result (with ``read: false``, then never reads
stdin again, so no answer of ours is read); ``junk(n)`` writes ``n`` non-JSON lines
before its result. The pids of every process left behind are appended to ``$HOSTILE_PID_FILE``.

Replies the parser rejects: ``deep()`` (nested too deep), ``bad_utf8()``, ``null_result()``, ``list_result()`` and
``batch()`` (a JSON-RPC batch holding the reply); with ``$HOSTILE_DEEP_LIST`` set the ``tools/list`` reply is
nested too deep. ``notifications/cancelled`` are appended to ``$HOSTILE_CANCEL_LOG``.

    python -m tests.hostile_server
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

TOOLS = {
    "ok": {"text": {"type": "string"}},
    "huge": {"mb": {"type": "integer"}},
    "flood": {"n": {"type": "integer"}},
    "garbage": {},
    "wrong_id": {},
    "late": {"s": {"type": "number"}},
    "hang": {},
    "die": {},
    "nul_error": {},
    "weird": {},
    "empty_error": {},
    "fork_helper": {},
    "die_child_holds_stdout": {},
    "stop_reading": {},
    "server_requests": {"n": {"type": "integer"}, "read": {"type": "boolean"}},
    "junk": {"n": {"type": "integer"}},
    "deep": {},
    "bad_utf8": {},
    "null_result": {},
    "list_result": {},
    "batch": {},
}
_lock = threading.Lock()


def raw(data: bytes) -> None:
    with _lock:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def record(*pids: int) -> None:
    path = os.environ.get("HOSTILE_PID_FILE")
    if path:
        with open(path, "a") as f:
            f.write("".join(f"{pid}\n" for pid in pids))


def sleeper(keep: tuple[int, ...] = ()) -> None:
    """In a forked child: stdio to /dev/null (but the fds in ``keep``), then sleep until killed."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        if fd not in keep:
            os.dup2(null, fd)
    while True:
        time.sleep(60)


def fork_helper() -> list[int]:
    """A child in its own process group and a setsid grandchild whose parent has exited; returns their pids."""
    r, w = os.pipe()
    if os.fork() == 0:  # the helper in its own process group
        os.setpgid(0, 0)
        os.write(w, f"{os.getpid()}\n".encode())
        sleeper()
    middle = os.fork()
    if middle == 0:  # a new session, whose child is orphaned at once
        os.setsid()
        if os.fork() == 0:
            os.write(w, f"{os.getpid()}\n".encode())
            sleeper()
        os._exit(0)
    os.waitpid(middle, 0)
    os.close(w)
    pids: list[int] = []
    with os.fdopen(r) as f:
        while len(pids) < 2:
            pids.append(int(f.readline()))
    return pids


def die_child_holds_stdout() -> None:
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        os.write(w, f"{os.getpid()}\n".encode())
        sleeper(keep=(1,))
    record(int(os.fdopen(r).readline()))
    os._exit(3)


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
    elif name == "late":
        time.sleep(float(args.get("s", 5)))
        result(rid, [{"type": "text", "text": "LATE reply"}])
    elif name == "hang":
        pass
    elif name == "die":
        os._exit(3)
    elif name == "nul_error":
        write({"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": "bad\x00thing\x1b[31m happened\x07"}})
    elif name == "empty_error":
        result(rid, [], is_error=True)
    elif name == "stop_reading":
        result(rid, [{"type": "text", "text": "stopped reading"}])
    elif name == "fork_helper":
        pids = fork_helper()
        record(*pids)
        result(rid, [{"type": "text", "text": f"forked {len(pids)}"}])
    elif name == "die_child_holds_stdout":
        die_child_holds_stdout()
    elif name == "server_requests":
        n = int(args.get("n", 20_000))
        for i in range(n):
            write({"jsonrpc": "2.0", "id": f"s{i}", "method": "roots/list" if i % 2 else "ping"})
        result(rid, [{"type": "text", "text": f"sent {n}"}])
    elif name == "junk":
        raw(b"".join(b"junk line %d %s\n" % (i, b"z" * 90) for i in range(int(args.get("n", 10_000)))))
        result(rid, [{"type": "text", "text": "junked"}])
    elif name == "deep":
        raw(
            b'{"jsonrpc": "2.0", "id": %s, "result": {"content": [], "x": %s}}\n'
            % (json.dumps(rid).encode(), nested(5000))
        )
    elif name == "bad_utf8":
        raw(
            b'{"jsonrpc": "2.0", "id": %s, "result": {"content": [{"type": "text", "text": "\xff\xfe"}]}}\n'
            % json.dumps(rid).encode()
        )
    elif name == "null_result":
        write({"jsonrpc": "2.0", "id": rid, "result": None})
    elif name == "list_result":
        write({"jsonrpc": "2.0", "id": rid, "result": [1, 2]})
    elif name == "batch":
        raw(
            (
                json.dumps(
                    [{"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "in a batch"}]}}]
                )
                + "\n"
            ).encode()
        )
    elif name == "weird":
        result(
            rid,
            [{"type": "hologram", "data": 1}, {"type": "image", "data": "%%%not base64%%%", "mimeType": "image/png"}],
        )


def stops_reading(params: dict) -> bool:
    name, args = params.get("name"), params.get("arguments") or {}
    return name == "stop_reading" or (name == "server_requests" and args.get("read") is False)


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
        elif method == "tools/list" and os.environ.get("HOSTILE_DEEP_LIST"):
            raw(b'{"jsonrpc": "2.0", "id": %s, "result": {"tools": %s}}\n' % (json.dumps(rid).encode(), nested(5000)))
        elif method == "tools/list":
            tools = [{"name": n, "description": f"{n} (hostile)", "inputSchema": {"type": "object", "properties": p}}
                     for n, p in TOOLS.items()]  # fmt: skip
            write({"jsonrpc": "2.0", "id": rid, "result": {"tools": tools}})
        elif method == "ping":
            write({"jsonrpc": "2.0", "id": rid, "result": {}})
        elif method == "tools/call" and stops_reading(msg.get("params", {})):
            params = msg["params"]
            call(rid, params["name"], params.get("arguments") or {})
            while True:  # in the main thread: stdin is never read again
                time.sleep(60)
        elif method == "tools/call":
            params = msg.get("params", {})
            threading.Thread(target=call, args=(rid, params.get("name"), params.get("arguments") or {})).start()
        elif (
            rid is not None and method is not None and method not in ("initialize", "tools/list", "ping", "tools/call")
        ):
            write({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"method not found: {method}"}})
        elif method == "notifications/cancelled":
            log = os.environ.get("HOSTILE_CANCEL_LOG")
            if log:
                with open(log, "a") as f:
                    f.write(json.dumps(msg.get("params", {})) + "\n")


if __name__ == "__main__":
    main()
