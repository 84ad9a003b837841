"""Property-based tests (hypothesis): whatever the model writes, the tools return or the task file holds, nothing
raises out of the parsers, the checks, the renderers or ``step``/``reset``; observations are bounded valid strings
and rewards finite."""

from __future__ import annotations

import base64
import json
import math
import types

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aworld_gym.base.calls import ToolCall
from aworld_gym.base.errors import AWorldGymError
from aworld_gym.core.actions import Action, HermesParser, parse_action
from aworld_gym.core.task import load_tasks
from aworld_gym.mcp.demo_server import build_server
from aworld_gym.mcp.results import describe_error, readable, render_content, truncate
from aworld_gym.mcp.tools.arguments import find_problem, json_problem
from aworld_gym.mcp.tools.validate import make_validator
from tests.helpers import TASKS

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                HealthCheck.function_scoped_fixture])  # fmt: skip

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
tags = st.sampled_from(["<tool_call>", "</tool_call>", "<answer>", "</answer>", "<think>", "</think>",
                        "FINAL ANSWER:", "```", "{", "}", '"name"', '"arguments"', ":", ",", "\n", "\x00"])  # fmt: skip
model_text = st.lists(tags | st.text(max_size=30) | json_values.map(json.dumps), max_size=12).map("".join)


@FAST
@given(model_text)
def test_the_parser_never_raises_and_returns_well_formed_calls(text):
    parsed = HermesParser().parse(text)
    assert isinstance(parsed.errors, list)
    assert parsed.answer is None or isinstance(parsed.answer, str)
    for call in parsed.tool_calls:
        assert isinstance(call, ToolCall) and isinstance(call.name, str) and isinstance(call.arguments, dict)


@FAST
@given(model_text, st.none() | st.lists(st.builds(ToolCall, st.text(max_size=10), st.dictionaries(st.text(max_size=5), json_values, max_size=3)), max_size=3))  # fmt: skip
def test_parsing_actions_with_structured_calls_never_raises(text, calls):
    parsed = parse_action(HermesParser(), Action(text, tool_calls=calls))
    assert isinstance(parsed.tool_calls, list)


schemas = st.fixed_dictionaries(
    {"type": st.just("object"),
     "properties": st.dictionaries(st.text(min_size=1, max_size=6), st.sampled_from(
         [{"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}, {"type": "array"},
          {"type": "object"}, {"enum": [1, "a"]}, {"type": ["string", "null"]}, {"minimum": 3}, {}]), max_size=4)},
    optional={"required": st.lists(st.text(min_size=1, max_size=6), max_size=3),
              "additionalProperties": st.booleans()},
)  # fmt: skip


@FAST
@given(schemas, st.dictionaries(st.text(max_size=6), json_values, max_size=5))
def test_argument_checks_never_raise(schema, args):
    validator = make_validator(schema)
    if validator is not None:
        problems = validator(args)
        assert all(isinstance(p, str) for p in problems)
    assert find_problem(args) is None or isinstance(find_problem(args), str)
    assert json_problem(args) is None or isinstance(json_problem(args), str)


def _block(kind: str, payload: str) -> types.SimpleNamespace:
    if kind == "text":
        return types.SimpleNamespace(type="text", text=payload)
    if kind in ("image", "audio"):
        return types.SimpleNamespace(type=kind, data=payload, mime_type=None)
    if kind == "resource":
        return types.SimpleNamespace(type="resource", resource=types.SimpleNamespace(text=None, uri=payload))
    if kind == "resource_link":
        return types.SimpleNamespace(type="resource_link", uri=payload)
    return types.SimpleNamespace(type=kind, data=payload)


blocks = st.builds(_block, st.sampled_from(["text", "image", "audio", "resource", "resource_link", "hologram"]),
                   st.text(max_size=50) | st.binary(max_size=60).map(lambda b: base64.b64encode(b).decode()))  # fmt: skip


@FAST
@given(st.lists(blocks, max_size=6), st.none() | json_values, st.integers(min_value=1, max_value=500))
def test_rendering_any_result_gives_a_bounded_string(content, structured, limit):
    result = types.SimpleNamespace(content=content, structured_content=structured)
    text = render_content(result)
    assert isinstance(text, str)
    cut, was_cut = truncate(text, limit)
    assert len(cut) <= limit + 100 and was_cut == (len(text) > limit)


@FAST
@given(st.text(max_size=2000))
def test_error_messages_become_one_or_two_clean_lines(message):
    out = readable(message)
    assert len(out) <= 300 and len(out.splitlines()) <= 2
    assert all(ch in "\t" or ord(ch) >= 32 for ch in out) and "\x7f" not in out
    assert isinstance(describe_error(ValueError(message)), str)


rows = st.lists(st.dictionaries(st.sampled_from(["id", "task_id", "prompt", "question", "answer", "metadata",
                                                 "files", "x"]), json_values, max_size=6), max_size=5)  # fmt: skip


@FAST
@given(rows)
def test_loading_any_rows_gives_tasks_or_a_clear_error(data):
    try:
        tasks = load_tasks(data)
    except AWorldGymError as exc:  # TaskError/ConfigError: a clear message, never another exception type
        assert str(exc)
        return
    for task in tasks:
        assert isinstance(task.id, str) and isinstance(task.prompt, str)


@pytest.fixture(scope="module")
def env():
    e = gym.make("AWorld/MCP-v0", mcp_config={"mcpServers": {"demo": build_server}}, tasks=TASKS, tool_timeout=3,
                 max_tool_output_chars=2000)  # fmt: skip
    yield e
    e.close()


tool_calls = st.builds(
    lambda name, args: f"<tool_call>{json.dumps({'name': name, 'arguments': args}, ensure_ascii=False)}</tool_call>",
    st.sampled_from(["add", "echo", "noop", "counter", "fail", "big_output", "nope"]),
    st.dictionaries(st.sampled_from(["a", "b", "text", "chars", "message", "x"]), json_values, max_size=3),
)


@SLOW
@given(st.lists(model_text | tool_calls, min_size=1, max_size=4), st.integers(min_value=0, max_value=2**31))
def test_step_and_reset_never_raise_on_any_model_output(env, actions, seed):
    obs, info = env.reset(seed=seed)
    _check_obs(env, obs)
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        _check_obs(env, obs)
        assert isinstance(reward, float) and math.isfinite(reward)
        if terminated or truncated:
            break


def _check_obs(env, obs):
    assert isinstance(obs, str)
    assert obs in env.unwrapped.observation_space  # a str within the space's bound
