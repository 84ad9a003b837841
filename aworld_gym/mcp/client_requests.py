"""Answering what a server asks the client during a tool call (elicitation, sampling, roots), and telling the model.

Each :class:`~aworld_gym.mcp.transports.connection.Connection` has one :class:`ClientRequests`: its SDK callbacks answer as the
env's :class:`~aworld_gym.mcp.capabilities.Capabilities` say, and never raise (a failure is an ``ErrorData``, never
code -32000, which would read as a dead session). What was asked and answered is recorded on the agent's tool call
that asked; when the env refused (elicitation declined or cancelled, sampling refused or failed), that call's
result becomes an error naming what the tool asked for, even where the server turned the refusal into a success.

Which call asked: the call's task context reaches the callback where the request travels with the call (the
2026-07-28 protocol's input requests, in-process servers, and a streamable-HTTP server that sends the request on
the call's own response stream, as the Python and TypeScript SDKs do); otherwise (stdio, SSE, the standalone GET
stream) the one agent call running on that connection. With several running there, each of them gets the record and
the note, which says the request may belong to another of them.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aworld_gym.mcp import sampling as sampling_
from aworld_gym.mcp.capabilities import Capabilities, SamplingEndpoint
from aworld_gym.mcp.redact import module_logger
from aworld_gym.mcp.results import TOOL_ERROR, ToolResult, readable

logger = module_logger(__name__)

REFUSED_CODE = -1  # the spec's example code for a request the user rejected (never -32000: a dead session)
_INTERNAL_ERROR = -32603


class Asked:
    """What the server asked during one agent call (its records, in order)."""

    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []


_CURRENT: contextvars.ContextVar[Asked | None] = contextvars.ContextVar("aworld_gym_mcp_asked", default=None)


@dataclasses.dataclass
class ToolResultWithRequests(ToolResult):
    """A :class:`ToolResult` whose call the server asked something during; ``to_dict`` adds ``client_requests``."""

    requests: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["client_requests"] = [dict(r) for r in self.requests]
        return out


class ClientRequests:
    """The client side of one MCP session: the SDK callbacks, and which agent calls are running."""

    def __init__(self, caps: Capabilities, server: str) -> None:
        self.caps = caps
        self.server = server
        self._running: dict[Asked, None] = {}  # insertion-ordered set
        self.unattributed: deque[dict[str, Any]] = deque(maxlen=32)  # asked while no agent call was running

    def sdk_callbacks(self) -> dict[str, Any]:
        """``mcp.Client`` keyword arguments (roots only when configured: else the capability is not declared)."""
        out: dict[str, Any] = {"elicitation_callback": self.elicit, "sampling_callback": self.sample}
        if self.caps.roots is not None:
            out["list_roots_callback"] = self.list_roots
        return out

    async def during(self, call: Awaitable[ToolResult]) -> ToolResult:
        """Await an agent call's result with the requests made during it recorded, and its result marked."""
        asked = Asked()
        self._running[asked] = None
        token = _CURRENT.set(asked)
        try:
            result = await call
        finally:
            _CURRENT.reset(token)
            self._running.pop(asked, None)
        return mark(result, asked.records)

    # ----- the SDK callbacks (they never raise) -------------------------------------------------------------
    async def elicit(self, context: Any, params: Any) -> Any:
        from mcp_types import ElicitResult

        how = self.caps.elicitation
        message = readable(getattr(params, "message", "") or "", 200)
        if getattr(params, "mode", "form") == "url":
            self._note({"request": "elicitation", "mode": "url", "message": message, "answer": "cancel",
                        "refused": True}, f'the tool asked the user to open a web page ("{message}"), which this '
                       "environment cannot do, so the tool did not get what it needed")  # fmt: skip
            return ElicitResult(action="cancel")
        schema = params.requested_schema if isinstance(params.requested_schema, Mapping) else {}
        fields = list(schema.get("properties") or {})
        record: dict[str, Any] = {"request": "elicitation", "mode": "form", "message": message, "fields": fields}
        asked_for = f'the tool asked for input ("{message}"' + (f"; fields: {', '.join(fields)})" if fields else ")")
        try:
            if how == "accept_defaults":
                content, why = _defaults(schema)
                by = "accept_defaults"
            elif how == "decline":
                content, why, by = None, "", "decline"
            else:
                content, why, by = await _ask_callable(how, message, schema), "", "callable"
        except Exception as exc:  # noqa: BLE001 - the env's function failed: a declined request, recorded
            content, why, by = None, f"the environment's answer failed ({type(exc).__name__})", "callable"
            logger.warning("elicitation callable for server %r failed: %r", self.server, exc)
        if content is not None:
            try:
                result = ElicitResult(action="accept", content=content)
            except Exception as exc:  # noqa: BLE001 - content of the wrong types: declined, recorded
                result, why = None, f"the environment's answer does not fit the form ({readable(str(exc), 120)})"
            if result is not None:
                self._note({**record, "answer": "accept", "by": by, "refused": False})
                return result
        why = why or "this environment declines such requests"
        self._note({**record, "answer": "decline", "by": by, "refused": True, "reason": why},
                   f"{asked_for} and {why}, so the tool did not get it")  # fmt: skip
        return ElicitResult(action="decline")

    async def sample(self, context: Any, params: Any) -> Any:
        from mcp_types import ErrorData

        how = self.caps.sampling
        record: dict[str, Any] = {"request": "sampling"}
        asked = "the tool asked to use a language model (sampling)"
        if how is None:
            self._note({**record, "answer": "refused", "refused": True,
                        "reason": "sampling is off in this env (MCPEnv(sampling=...) turns it on)"},
                       f"{asked}, which this environment does not allow")  # fmt: skip
            return ErrorData(code=REFUSED_CODE, message="Sampling is not allowed by this client (aworld-gym)")
        by = "endpoint" if isinstance(how, SamplingEndpoint) else "callable"
        try:
            messages = sampling_.openai_messages(params)
            if isinstance(how, SamplingEndpoint):
                text, model, finish = await sampling_.complete(how, messages, sampling_.options(params, how.max_tokens))
            else:
                text, model, finish = _callable_reply(await _run(how, messages, sampling_.options(params)))
        except sampling_.Unsupported as exc:
            why, code = str(exc), REFUSED_CODE
        except Exception as exc:  # noqa: BLE001 - the endpoint or the env's function failed: recorded, answered
            why, code = f"the model failed: {readable(f'{type(exc).__name__}: {exc}', 200)}", _INTERNAL_ERROR
            logger.warning("sampling for server %r failed: %s", self.server, why)
        else:
            if text is not None:
                self._note({**record, "answer": "answered", "by": by, "model": model, "refused": False})
                return sampling_.result(text, model, finish)
            why, code = "the environment's function refused it", REFUSED_CODE
        self._note({**record, "answer": "refused" if code == REFUSED_CODE else "failed", "by": by, "refused": True,
                    "reason": why}, f"{asked} and {why}")  # fmt: skip
        return ErrorData(code=code, message=f"Sampling failed in the client (aworld-gym): {why}")

    async def list_roots(self, context: Any) -> Any:
        from mcp_types import ListRootsResult, Root

        roots = self.caps.roots or ()
        self._note({"request": "roots", "answer": "listed", "roots": [uri for uri, _ in roots], "refused": False})
        return ListRootsResult(roots=[Root(uri=uri, name=name) for uri, name in roots])

    # ----- attribution ----------------------------------------------------------------------------------------
    def _note(self, record: dict[str, Any], refusal: str | None = None) -> None:
        """Record ``record`` (with the model's ``refusal`` note) on the agent call that asked."""
        if refusal is not None:
            record["note"] = refusal
        asked = _CURRENT.get()
        if asked is not None and asked in self._running:  # the call's own context: exact
            asked.records.append(record)
            return
        running = list(self._running)
        if not running:
            self.unattributed.append(record)
            logger.info("server %r asked the client (%s) while no agent call was running", self.server,
                        record["request"])  # fmt: skip
            return
        if len(running) > 1:
            record = {**record, "attribution": f"one of {len(running)} calls to server {self.server!r} running then"}
            if refusal is not None:
                record["note"] = f"{refusal} (the request came while {len(running)} calls to this server were " \
                                 "running; it may belong to another of them)"  # fmt: skip
        for other in running:
            other.records.append(record)


def mark(result: ToolResult, records: list[dict[str, Any]]) -> ToolResult:
    """``result`` with ``records`` attached; an error naming what was refused if the env refused anything."""
    if not records:
        return result
    values = {f.name: getattr(result, f.name) for f in dataclasses.fields(result) if f.init and f.name != "requests"}
    notes = [r["note"] for r in records if r.get("note")]
    if notes:
        reply = result.text.removeprefix("Error: ").strip()
        text = "Error: " + "; ".join(dict.fromkeys(notes)) + "."
        values["text"] = text + (f"\nThe tool replied: {reply}" if reply else "")
        values["error"] = result.error or TOOL_ERROR
    public = tuple({k: v for k, v in r.items() if k != "note"} for r in records)
    return ToolResultWithRequests(**values, requests=public)


def _defaults(schema: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """Each property's ``default``; (None, why) when a required property has none."""
    props = schema.get("properties") or {}
    content = {k: p["default"] for k, p in props.items() if isinstance(p, Mapping) and "default" in p}
    missing = [k for k in schema.get("required") or [] if k not in content]
    if missing:
        return None, f"this environment answers only with the form's defaults, and {', '.join(missing)} has none"
    return content, ""


async def _ask_callable(fn: Callable[..., Any], message: str, schema: Mapping[str, Any]) -> dict[str, Any] | None:
    answer = await _run(fn, message, dict(schema))
    if answer is None:
        return None
    if not isinstance(answer, Mapping):
        raise TypeError(f"the elicitation function returned {type(answer).__name__}, not a dict or None")
    missing = [k for k in schema.get("required") or [] if k not in answer]
    if missing:
        raise ValueError(f"the elicitation function's answer lacks required fields {missing}")
    return dict(answer)


async def _run(fn: Callable[..., Any], *args: Any) -> Any:
    """Call the env's function: a coroutine function on the loop, a plain one in a worker thread."""
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
        return await fn(*args)
    out = await asyncio.to_thread(fn, *args)
    return await out if inspect.isawaitable(out) else out


def _callable_reply(reply: Any) -> tuple[str | None, str, str]:
    """A sampling function's reply: ``None`` (refused), text, or ``{"content"/"text", "model"?}``."""
    if reply is None or isinstance(reply, str):
        return reply, "aworld-gym-policy", "stop"
    if isinstance(reply, Mapping):
        text = reply.get("content", reply.get("text"))
        if isinstance(text, str):
            return text, str(reply.get("model") or "aworld-gym-policy"), str(reply.get("finish_reason") or "stop")
    raise TypeError(f"the sampling function returned {type(reply).__name__}, not text, a dict or None")
