"""From a completion's text to OpenAI's assistant message: the reasoning (``<think>``), the text, the tool calls.

Qwen3/Hermes ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks become ``tool_calls`` (arguments as a
JSON string, as OpenAI sends them). A completion whose blocks do not all decode is returned as text, whole, with no
tool calls (what vLLM's hermes parser does): the agent sees what the model wrote, and the record keeps the tokens.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from aworld_gym.core.actions import read_tool_calls, strip_think


@dataclass
class Completion:
    content: str | None
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    def message(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning is not None:
            out["reasoning_content"] = self.reasoning
        if self.tool_calls:
            out["tool_calls"] = self.tool_calls
        return out


def parse_completion(text: str, tools_offered: bool = True) -> Completion:
    """The assistant message of ``text`` (the completion without its end-of-turn token). ``tools_offered=False``
    (no tools in the request, or ``tool_choice="none"``): the text is returned as it is, blocks included."""
    body, reasoning = strip_think(text)
    if not tools_offered or "<tool_call>" not in body:
        return Completion(body.strip() or (None if reasoning else ""), reasoning)
    rest, calls, errors = read_tool_calls(body, max_calls=64)
    if errors or not calls:
        return Completion(body.strip(), reasoning)
    tool_calls = [{"id": f"call_{secrets.token_hex(12)}", "type": "function",
                   "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                  for c in calls]  # fmt: skip
    return Completion(rest.strip() or None, reasoning, tool_calls)
