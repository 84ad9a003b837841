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


def render_system_prompt(tools: Sequence[dict[str, Any]], preamble: str | None = None) -> str:
    """A Qwen3-style system prompt listing ``tools`` (OpenAI schemas), one JSON object per line."""
    parts = [preamble if preamble is not None else DEFAULT_PREAMBLE]
    if tools:
        lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        parts.append(TOOLS_SECTION.format(tools=lines))
    parts.append(ANSWER_SECTION)
    return "\n\n".join(p for p in parts if p)


def render_tool_responses(texts: Sequence[str]) -> str:
    """Tool results as the user turn Qwen3's chat template renders them."""
    return "\n".join(f"<tool_response>\n{t}\n</tool_response>" for t in texts)
