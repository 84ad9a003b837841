"""Prompt text derived from the tool schemas (Qwen3/Hermes style)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

DEFAULT_PREAMBLE = "You are a helpful assistant that solves the user's task step by step using the tools provided."

TOOLS_SECTION = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tools}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""

ANSWER_SECTION = (
    "When you know the final answer, reply with it inside <answer></answer> tags, e.g. <answer>42</answer>. "
    "Your answer ends the task."
)

FORMAT_HINT = (
    'Call a tool with <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>, '
    "or give your final answer as <answer>...</answer>."
)


COMPACT_TOOLS_SECTION = """# Tools

You may call one or more functions to assist with the user query. The functions, each with its parameters
(`?` marks an optional one) and what it does:
{tools}

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""

TOOL_FORMATS = ("full", "compact")


def render_system_prompt(
    tools: Sequence[dict[str, Any]], preamble: str | None = None, tool_format: str = "full"
) -> str:
    """A Qwen3-style system prompt listing ``tools`` (OpenAI schemas): ``"full"``, one JSON schema per line (what
    Qwen3's chat template writes), or ``"compact"``, one line per tool (name, typed parameters, the first sentence
    of its description; :func:`compact_tool`)."""
    if tool_format not in TOOL_FORMATS:
        raise ValueError(f"tool_format must be one of {TOOL_FORMATS}, not {tool_format!r}")
    parts = [preamble if preamble is not None else DEFAULT_PREAMBLE]
    if tools and tool_format == "compact":
        parts.append(COMPACT_TOOLS_SECTION.format(tools="\n".join(compact_tool(t) for t in tools)))
    elif tools:
        lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        parts.append(TOOLS_SECTION.format(tools=lines))
    parts.append(ANSWER_SECTION)
    return "\n\n".join(p for p in parts if p)


def compact_tool(schema: dict[str, Any], max_description: int = 160) -> str:
    """One line for a tool: ``- name(a: string, b?: integer): What it does.`` (a schema of any shape: a server's
    odd or hostile one reads as ``any`` where it makes no sense, never an error)."""
    fn = schema.get("function", schema)
    params = fn.get("parameters") or {}
    args = _fields(params, 0) if isinstance(params, dict) else ""
    text = " ".join(str(fn.get("description") or "").split())
    first = text.split(". ")[0].rstrip(".")
    if len(first) > max_description:
        first = first[: max_description - 3].rstrip() + "..."
    return f"- {fn.get('name')}({args})" + (f": {first}." if first else "")


_MAX_DEPTH = 8  # nested types shown this deep; deeper ones read "..."


def _fields(p: dict[str, Any], depth: int) -> str:
    props, required = p.get("properties"), p.get("required")
    if not isinstance(props, dict):
        return ""
    required = {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()
    return ", ".join(f"{name}{'' if name in required else '?'}: {_type(v, depth + 1)}" for name, v in props.items())


def _type(p: Any, depth: int = 0) -> str:
    if not isinstance(p, dict):
        return "any"
    if depth > _MAX_DEPTH:
        return "..."
    if "enum" in p and isinstance(p["enum"], list):
        return "|".join(json.dumps(v, default=str) for v in p["enum"])
    for key in ("anyOf", "oneOf"):
        if isinstance(p.get(key), list):
            kinds = (_type(q, depth + 1) for q in p[key] if not (isinstance(q, dict) and q.get("type") == "null"))
            return "|".join(dict.fromkeys(kinds)) or "null"
    kind = p.get("type", "any")
    if isinstance(kind, list):
        return "|".join(str(k) for k in kind if k != "null")
    if kind == "array":
        return f"array[{_type(p.get('items'), depth + 1)}]"
    if kind == "object" and isinstance(p.get("properties"), dict) and p["properties"]:
        return "{" + _fields(p, depth) + "}"
    return str(kind)


def describe_tool_change(
    old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]], tool_format: str = "full"
) -> str | None:
    """The note telling the model that its tools changed mid-episode (a server's ``tools/list_changed``): the new
    or changed tools, rendered as the system prompt renders them, and the names no longer available; ``None`` when
    nothing the model reads changed."""
    before = {t["function"]["name"]: t for t in old}
    after = {t["function"]["name"]: t for t in new}
    added = [t for name, t in after.items() if before.get(name) != t]
    removed = [name for name in before if name not in after]
    if not added and not removed:
        return None
    parts = ["Note: the available tools changed."]
    if added and tool_format == "compact":
        parts.append("New or changed tools:\n" + "\n".join(compact_tool(t) for t in added))
    elif added:
        lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in added)
        parts.append(f"New or changed tools:\n<tools>\n{lines}\n</tools>")
    if removed:
        parts.append("No longer available: " + ", ".join(removed) + ".")
    return "\n".join(parts)


def render_tool_responses(texts: Sequence[str]) -> str:
    """Tool results as the user turn Qwen3's chat template renders them."""
    return "\n".join(f"<tool_response>\n{t}\n</tool_response>" for t in texts)
