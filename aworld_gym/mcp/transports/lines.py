"""A stdio server's output split into JSON-RPC messages: linear, bounded, and never silent about a reply it drops.

- A message over ``max_bytes`` is not assembled at all: the rest of its line is skipped, and the request it answers
  (its id read from the line's first bytes) gets a JSON-RPC error saying how big it was.
- A message nested deeper than the SDK's JSON parser goes (200 levels: a tool whose ``inputSchema`` nests 120 objects
  in a ``tools/list`` reply) is parsed again by Python's (:func:`parse_message`), so that one deep tool costs only
  that tool (the listing drops it), not the whole reply.
- A reply the parser rejects (nested too deep for both, invalid UTF-8, a null or list result, a JSON-RPC batch) answers its
  request at once with an error saying why, instead of leaving the call to its timeout.
- Log notifications (``notifications/message``) are dropped unparsed (the hub never shows server logs).
- Lines that are not JSON-RPC are warned about a few times, then counted (:class:`Warnings`): a server printing
  a megabyte of junk costs a handful of log records.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import mcp_types as types
from mcp.shared.message import SessionMessage

from aworld_gym.mcp.redact import module_logger

logger = module_logger("aworld_gym.mcp.transports.stdio")

DEFAULT_MAX_MESSAGE_BYTES = 16 << 20
TOO_LARGE = -32099  # a server-error code of our own: the message was dropped by this client
PARSE_ERROR = -32700  # JSON-RPC's: the reply could not be parsed
_ID = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.){0,200}"|-?\d{1,20})')
_LOG = b'"notifications/message"'
_METHOD = re.compile(rb'"method"\s*:')
_ANSWER = re.compile(rb'"(?:result|error)"\s*:')


def message_id(head: bytes) -> Any:
    """The JSON-RPC id in the first bytes of a message, or None (the id of a result precedes a long payload in
    every server we know; one that puts it last is answered by the call's timeout instead)."""
    m = _ID.search(head)
    if m is None:
        return None
    raw = m.group(1)
    return raw[1:-1].decode(errors="replace") if raw.startswith(b'"') else int(raw)


def error_reply(rid: Any, code: int, text: str) -> SessionMessage:
    """A JSON-RPC error for request ``rid``, as if the server had sent it."""
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=rid, error=types.ErrorData(code=code, message=text)))


def too_large(rid: Any, size: int, limit: int) -> SessionMessage:
    """The answer to request ``rid`` whose ``size``-byte reply was dropped."""
    text = f"the server's reply was over {size >> 20} MB, more than this client accepts ({limit >> 20} MB); dropped"
    return error_reply(rid, TOO_LARGE, text)


def _reason(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    try:
        first = errors()[0] if callable(errors) else None
    except Exception:  # noqa: BLE001 - any reason will do
        first = None
    text = str(first.get("msg", "")) if isinstance(first, dict) else str(exc).split("\n", 1)[0]
    return " ".join(text.split())[:120] or type(exc).__name__


def unparsable(line: bytes, exc: Exception) -> tuple[list[SessionMessage], str]:
    """The errors answering the requests a line the parser rejected was the reply to (none if it answers none),
    and why it was rejected."""
    ids: list[Any] = []
    head = line[:4096]
    try:
        obj = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        obj, why = None, "it is not valid UTF-8"
    except RecursionError:
        obj, why = None, "it is nested too deeply"
    except ValueError:
        obj, why = None, _reason(exc)
    else:
        why = _reason(exc)
    if isinstance(obj, list):
        why = "it is a JSON-RPC batch, which MCP does not use"
        ids = [m["id"] for m in obj if isinstance(m, dict) and "id" in m and "method" not in m]
    elif isinstance(obj, dict):
        if "method" not in obj and "id" in obj:
            ids = [obj["id"]]
            if "result" in obj and not isinstance(obj["result"], dict):
                why = f"its result is {_json_type(obj['result'])}, not an object"
    elif obj is None and head.lstrip()[:1] == b"{" and not _METHOD.search(head) and _ANSWER.search(head):
        ids = [message_id(head)]
    text = f"the server's reply could not be parsed: {why}"
    replies = [
        error_reply(rid, PARSE_ERROR, text) for rid in ids if isinstance(rid, str | int) and not isinstance(rid, bool)
    ]
    return replies, why


def parse_message(data: bytes | str) -> types.JSONRPCMessage:
    """One JSON-RPC message, as the SDK parses it; one that only nests deeper than the SDK's parser goes (200
    levels) is parsed by Python's and validated the same way. The second parse accepts nothing the first one refuses
    for another reason: no ``NaN``/``Infinity``, no lone surrogate, nothing past Python's own recursion limit.

    Raises:
        ValueError: the message is not a JSON-RPC message (the SDK parser's error).
    """
    try:
        return types.jsonrpc_message_adapter.validate_json(data, by_name=False)
    except ValueError as exc:
        if not _json_invalid(exc):
            raise
        try:
            obj = json.loads(data, parse_constant=_no_constant)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            raise exc from None
        if _holds_surrogate(obj):
            raise exc from None
        return types.jsonrpc_message_adapter.validate_python(obj, by_name=False)


def _json_invalid(exc: ValueError) -> bool:
    """Whether a pydantic error is the JSON parser's (``json_invalid``), not the message model's."""
    errors = getattr(exc, "errors", None)
    try:
        return callable(errors) and any(e.get("type") == "json_invalid" for e in errors())
    except Exception:  # noqa: BLE001 - not a pydantic error
        return False


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_SURROGATE = re.compile("[\ud800-\udfff]")


def _holds_surrogate(obj: Any) -> bool:
    """Whether a parsed JSON value holds a lone surrogate in any string or key (walked without recursion)."""
    stack = [obj]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return True
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def _json_type(value: Any) -> str:
    return {type(None): "null", list: "a list", str: "a string", bool: "a boolean"}.get(type(value), "a number")


class Warnings:
    """Warnings about lines one server wrote that are not JSON-RPC: the first ``first`` in full (200 bytes of each),
    then a count every ``every_s`` seconds and at :meth:`close`."""

    def __init__(self, first: int = 5, every_s: float = 60.0) -> None:
        self.first, self.every_s = first, every_s
        self.lines = self.bytes = 0
        self.unshown = 0
        self.last = time.monotonic()

    def junk(self, line: bytes, why: str) -> None:
        """Note one rejected ``line`` (``why``: the reason, for the first few)."""
        self.lines += 1
        self.bytes += len(line)
        if self.lines <= self.first:
            logger.warning("MCP server wrote a line that is not JSON-RPC (%d bytes; %s): %.200r", len(line), why, line)
            return
        self.unshown += 1
        if time.monotonic() - self.last >= self.every_s:
            self._summary()

    def _summary(self) -> None:
        logger.warning("MCP server has written %d lines (%d bytes) that are not JSON-RPC; %d not shown",
                       self.lines, self.bytes, self.unshown)  # fmt: skip
        self.unshown, self.last = 0, time.monotonic()

    def close(self) -> None:
        """Report the lines not reported yet."""
        if self.unshown:
            self._summary()


class LineReader:
    """Splits a byte stream into messages, linear in its size, with a bound on one message."""

    def __init__(self, max_bytes: int, warnings: Warnings | None = None) -> None:
        self.max_bytes = max_bytes
        self.parts: list[bytes] = []
        self.size = 0
        self.skipping: tuple[Any, int] | None = None  # (id, bytes so far) of an oversized message being skipped
        self.dropped_logs = 0
        self.warnings = warnings or Warnings()

    def feed(self, chunk: bytes) -> list[SessionMessage]:
        """The messages ``chunk`` completes (an oversized or unparsable reply becomes the error answering it)."""
        out: list[SessionMessage] = []
        while chunk:
            nl = chunk.find(b"\n")
            piece, chunk = (chunk, b"") if nl < 0 else (chunk[:nl], chunk[nl + 1 :])
            if self.skipping is not None:
                rid, seen = self.skipping
                self.skipping = (rid, seen + len(piece))
                if nl >= 0:
                    self.skipping = None
                    if rid is not None:
                        out.append(too_large(rid, seen + len(piece), self.max_bytes))
                continue
            self.parts.append(piece)
            self.size += len(piece)
            if self.size > self.max_bytes:
                head, seen = b"".join(self.parts)[:4096], self.size
                self.parts, self.size = [], 0
                self.skipping = (message_id(head), seen)
                if nl >= 0:  # the oversized line ended in this chunk
                    rid = self.skipping[0]
                    self.skipping = None
                    if rid is not None:
                        out.append(too_large(rid, seen, self.max_bytes))
                continue
            if nl < 0:
                break
            line = b"".join(self.parts)
            self.parts, self.size = [], 0
            if not line.strip():
                continue
            if _LOG in line[:200] and b'"id"' not in line[:200]:
                self.dropped_logs += 1
                continue
            out += self.parse(line)
        return out

    def parse(self, line: bytes) -> list[SessionMessage]:
        """One complete line as messages: itself, the errors answering an unparsable reply, or nothing."""
        try:
            return [SessionMessage(parse_message(line))]
        except ValueError as exc:
            replies, why = unparsable(line, exc)
            self.warnings.junk(line, why)
            return replies
