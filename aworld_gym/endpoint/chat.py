"""An OpenAI chat-completions request, checked and rendered to prompt ids by the model's own chat template.

Every field is checked before anything is generated: a request the endpoint cannot honour gets OpenAI's error shape
(:class:`RequestError`, status 400) naming the field, never a silent approximation. Text only: an image or audio part
is refused. ``tool_choice`` ``"auto"`` (the default) and ``"none"`` (the tools are left out of the prompt and the
reply is not parsed for calls) are honoured; ``"required"`` and a named function are refused, since a sampler
without constrained decoding cannot guarantee them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_STOPS = 4


class RequestError(Exception):
    """A request the endpoint refuses, in OpenAI's error shape."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 kind: str = "invalid_request_error", code: str | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.message, self.param, self.status, self.kind, self.code = message, param, status, kind, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass
class ChatRequest:
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    tools_offered: bool
    max_tokens: int | None
    temperature: float | None
    top_p: float
    stream: bool
    include_usage: bool
    logprobs: bool
    stop: list[str] = field(default_factory=list)


def _number(body: dict[str, Any], name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestError(f"{name} must be a number", name)
    if not low <= value <= high:
        raise RequestError(f"{name} must be between {low:g} and {high:g}, got {value:g}", name)
    return float(value)


def _top_p(body: dict[str, Any]) -> float:
    value = _number(body, "top_p", 0.0, 1.0)
    if value == 0.0:
        raise RequestError("top_p must be above 0", "top_p")
    return 1.0 if value is None else value


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise RequestError(f"{where}.content[{i}]: only text parts are served, got {kind!r}", where)
            parts.append(part["text"])
        return "".join(parts)
    raise RequestError(f"{where}.content must be a string or a list of text parts", where)


def _message(m: Any, i: int) -> dict[str, Any]:
    where = f"messages[{i}]"
    if not isinstance(m, dict):
        raise RequestError(f"{where} must be an object", where)
    role = m.get("role")
    if role not in ROLES:
        raise RequestError(f"{where}.role must be one of {', '.join(ROLES)}, got {role!r}", where)
    out: dict[str, Any] = {"role": "system" if role == "developer" else role, "content": _text(m.get("content"), where)}
    if role == "assistant" and m.get("tool_calls") is not None:
        calls = m["tool_calls"]
        if not isinstance(calls, list):
            raise RequestError(f"{where}.tool_calls must be a list", where)
        out["tool_calls"] = []
        for j, call in enumerate(calls):
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise RequestError(f"{where}.tool_calls[{j}] must have function.name", where)
            arguments = fn.get("arguments", "{}")
            if not isinstance(arguments, str | dict):
                raise RequestError(f"{where}.tool_calls[{j}].function.arguments must be a JSON string", where)
            out["tool_calls"].append({"id": call.get("id"), "type": "function",
                                      "function": {"name": fn["name"], "arguments": arguments}})  # fmt: skip
    if role == "tool" and m.get("tool_call_id") is not None:
        out["tool_call_id"] = str(m["tool_call_id"])
    return out


def _tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    tools = body.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise RequestError("tools must be a list", "tools")
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict):
            raise RequestError(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}", "tools")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise RequestError(f"tools[{i}].function.name must be a non-empty string", "tools")
        if fn.get("parameters") is not None and not isinstance(fn["parameters"], dict):
            raise RequestError(f"tools[{i}].function.parameters must be a JSON Schema object", "tools")
    return tools or None


def parse_request(body: Any) -> ChatRequest:
    """Check a chat-completions request body; :class:`RequestError` names what is wrong."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", "messages")
    n = body.get("n", 1)
    if n not in (None, 1):
        raise RequestError("n must be 1: one completion per request", "n")
    tools = _tools(body)
    choice = body.get("tool_choice")
    if choice not in (None, "auto", "none"):
        raise RequestError("tool_choice must be 'auto' or 'none': a required or named tool cannot be enforced by "
                           "this endpoint's sampler", "tool_choice")  # fmt: skip
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise RequestError("max_tokens must be a positive integer", "max_tokens")
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else stop if stop is not None else []
    if not isinstance(stops, list) or len(stops) > MAX_STOPS or not all(isinstance(s, str) and s for s in stops):
        raise RequestError(f"stop must be a non-empty string or a list of at most {MAX_STOPS} of them", "stop")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError("stream_options must be an object", "stream_options")
    model = body.get("model", "")
    return ChatRequest(
        model=model if isinstance(model, str) else str(model),
        messages=[_message(m, i) for i, m in enumerate(messages)],
        tools=tools,
        tools_offered=tools is not None and choice != "none",
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 0.0, 2.0),
        top_p=_top_p(body),
        stream=bool(body.get("stream", False)),
        include_usage=bool(options.get("include_usage", False)),
        logprobs=bool(body.get("logprobs", False)),
        stop=list(stops),
    )


def prompt_ids(tokenizer: Any, request: ChatRequest, chat_template_kwargs: dict[str, Any] | None = None) -> list[int]:
    """The request rendered by the tokenizer's chat template, the generation prompt added."""
    tools = request.tools if request.tools_offered else None
    try:
        out = tokenizer.apply_chat_template(request.messages, tools=tools, tokenize=True, add_generation_prompt=True,
                                            **(chat_template_kwargs or {}))  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - a template that rejects the conversation: the request's fault
        raise RequestError(f"the chat template could not render these messages: {type(exc).__name__}: {exc}",
                           "messages") from None  # fmt: skip
    if isinstance(out, dict) or hasattr(out, "input_ids"):
        out = out["input_ids"]
    return [int(i) for i in out]
