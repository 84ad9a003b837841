"""The system prompt's tool list, full (JSON schemas) and compact (one line per tool)."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import aworld_gym  # noqa: F401
from aworld_gym.core.prompts import compact_tool, render_system_prompt
from tests.helpers import stdio_config

SCHEMA = {"type": "function", "function": {
    "name": "browser_click",
    "description": "Perform click on a web page. Use the ref from the snapshot.\nMore text.",
    "parameters": {"type": "object", "required": ["target"], "properties": {
        "target": {"type": "string", "description": "the ref"},
        "button": {"type": "string", "enum": ["left", "right"]},
        "count": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "fields": {"type": "array", "items": {"type": "object", "required": ["ref"],
                                               "properties": {"ref": {"type": "string"}, "value": {}}}}}}}}  # fmt: skip


def test_compact_tool_lines():
    assert compact_tool(SCHEMA) == (
        '- browser_click(target: string, button?: "left"|"right", count?: integer, '
        "fields?: array[{ref: string, value?: any}]): Perform click on a web page."
    )
    long = {"function": {"name": "t", "description": "x" * 400, "parameters": {}}}
    assert compact_tool(long).endswith("...") and len(compact_tool(long)) < 200
    full, compact = render_system_prompt([SCHEMA]), render_system_prompt([SCHEMA], tool_format="compact")
    assert json.dumps(SCHEMA) in full and json.dumps(SCHEMA) not in compact and "browser_click(" in compact
    assert "<tool_call>" in compact and "<answer>" in compact
    with pytest.raises(ValueError, match="tool_format"):
        render_system_prompt([SCHEMA], tool_format="tiny")


def test_compact_tool_reads_any_schema_shape():
    """A server's odd or hostile schema (issue 30): nothing raises, nonsense reads as ``any``, depth is bounded."""
    deep: dict = {"type": "string"}
    for _ in range(3000):  # under the 16,000-character schema cap this is still ~1,000 levels
        deep = {"type": "object", "properties": {"n": deep}}
    odd = {"function": {"name": "odd", "parameters": {"type": "object", "required": "x", "properties": {
        "a": {"anyOf": [1, "s", None, {"type": "null"}, {"type": "integer"}]}, "b": {"oneOf": "nope"},
        "c": {"enum": 5, "type": "string"}, "d": {"enum": [object()]}, "e": {"type": "object", "properties": [1]},
        "f": deep}}}}  # fmt: skip
    line = compact_tool(odd)
    assert line.startswith('- odd(a?: any|integer, b?: any, c?: string, d?: "<object object at')
    assert "e?: object" in line and line.count("{n?: ") == 8 and "..." in line
    assert compact_tool({"function": {"name": "p", "parameters": "not a schema"}}) == "- p()"


def test_an_env_renders_compact_tools_and_keeps_the_full_schemas():
    tasks = [{"id": "q", "prompt": "6*7?", "answer": "42"}]
    env = gym.make("AWorld/MCP-v0", mcp_config=stdio_config(), tasks=tasks, tool_format="compact")
    try:
        _, info = env.reset(seed=0)
        assert "\n- multiply(a: number, b: number): Multiply two numbers.\n" in info["system_prompt"]
        assert '"parameters"' not in info["system_prompt"]
        assert all("parameters" in t["function"] for t in info["tools"])  # native tool calling gets the schemas
        _, r, term, _, _ = env.step("<answer>42</answer>")
        assert r == 1.0 and term
    finally:
        env.close()
