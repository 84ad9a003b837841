"""Arguments that cannot be sent are the model's error (``invalid_arguments``), never the session's death.

Each bad kind goes to the demo server in-process, over stdio (a child process) and over streamable HTTP; the
next good call on the same hub must work with no restart and the same server process.
"""

import math
from typing import Any

import pytest

from aworld_gym.base.calls import ToolCall
from aworld_gym.base.errors import ConfigError, ServerError
from aworld_gym.core.actions import HermesParser
from aworld_gym.mcp.demo_server import build_server
from aworld_gym.mcp.functions import function_server
from aworld_gym.mcp.hub import ToolHub
from aworld_gym.mcp.options import ToolOptions
from aworld_gym.mcp.results import INVALID_ARGUMENTS
from aworld_gym.mcp.tools.arguments import json_problem
from tests.helpers import http_config, stdio_config


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


# (id, tool, arguments, a fragment of the message); every message follows "cannot be sent: "
BAD = [
    (
        "lone_surrogate",
        "echo",
        {"text": "ok \ud800"},
        "the string at text holds a lone surrogate ('\\ud800' at index 3)",
    ),
    ("surrogate_in_key", "echo", {"text": "a", "k\udc00": 1}, "a key of the arguments object holds a lone surrogate"),
    ("nested_surrogate", "echo", {"text": [{"deep": ["\udfff"]}]}, "the string at text[0]['deep'][0] holds a lone"),
    ("nan", "add", {"a": math.nan, "b": 1}, "the value at a is NaN, which JSON cannot carry"),
    ("infinity", "add", {"a": 1, "b": -math.inf}, "the value at b is -Infinity"),
    ("too_deep", "echo", {"text": nested(40)}, "nested more than 32 levels deep"),
    ("non_string_key", "echo", {"text": {1: "one"}}, "the value at text has the key 1 (int); JSON object keys"),
    ("top_level_non_string_key", "echo", {2: "x"}, "the arguments object has the key 2 (int)"),
    ("set_value", "echo", {"text": {1, 2}}, "the value at text is of type set, which is not a JSON value"),
    ("object_value", "echo", {"text": [object()]}, "the value at text[0] is of type object"),
    ("bytes_value", "echo", {"text": b"raw"}, "the value at text is of type bytes"),
    ("not_an_object", "echo", ["text"], "the arguments must be a JSON object ({...}), not an array"),
]


@pytest.fixture(scope="module", params=["inprocess", "stdio", "http"])
def hub(request, http_url):
    config = {
        "inprocess": lambda: {"mcpServers": {"demo": build_server}},
        "stdio": stdio_config,
        "http": lambda: http_config(http_url),
    }[request.param]()
    h = ToolHub(config, options=ToolOptions(timeout=10)).start()
    h.first_pid = h.call([ToolCall("pid", {})])[0].text  # the server process the whole module must keep
    yield h
    h.close()


def assert_still_serving(hub: ToolHub) -> None:
    good = hub.call([ToolCall("echo", {"text": "héllo 😀"})])[0]
    assert (good.error, good.text) == (None, "héllo 😀")
    assert hub.restarts == 0
    assert hub.call([ToolCall("pid", {})])[0].text == hub.first_pid


@pytest.mark.parametrize(("tool", "arguments", "fragment"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_unsendable_arguments_are_a_model_error(hub, tool, arguments, fragment):
    r = hub.call([ToolCall(tool, arguments, id="c1")])[0]
    assert r.error == INVALID_ARGUMENTS == "invalid_arguments"
    assert r.text.startswith(f"Error: the arguments of {tool!r} cannot be sent: "), r.text
    assert fragment in r.text, r.text
    assert r.server == "demo" and r.is_error and r.to_dict()["error"] == "invalid_arguments"
    r.text.encode("utf-8")  # the message itself holds no lone surrogate: it can go into any record or prompt
    assert_still_serving(hub)


def test_model_text_with_escapes_goes_through_the_real_parser(hub):
    """json.loads (the action parser) turns "\\ud800" into a lone surrogate and NaN into a float nan; a complete
    pair becomes one character and is sent as usual."""
    text = (
        '<tool_call>{"name": "echo", "arguments": {"text": "bad \\ud800"}}</tool_call>'
        '<tool_call>{"name": "add", "arguments": {"a": NaN, "b": Infinity}}</tool_call>'
        '<tool_call>{"name": "echo", "arguments": {"text": "pair \\ud83d\\ude00"}}</tool_call>'
    )
    action = HermesParser().parse(text)
    assert action.errors == [] and action.tool_calls[0].arguments == {"text": "bad \ud800"}
    lone, nan, pair = hub.call(action.tool_calls)  # concurrently, in one turn
    assert lone.error == nan.error == "invalid_arguments"
    assert "lone surrogate ('\\ud800' at index 4)" in lone.text and "the value at a is NaN" in nan.text
    assert (pair.error, pair.text) == (None, "pair 😀")
    assert_still_serving(hub)


def test_other_argument_errors_keep_their_kinds(hub):
    r = hub.call([ToolCall("add", {"a": 1}), ToolCall("echo", {"text": "y" * 300_000}), ToolCall("echo", {"t": 1})])
    assert [x.error for x in r] == ["bad_arguments", "too_large", "bad_arguments"]
    assert_still_serving(hub)


def test_env_internal_calls_are_checked_too(hub):
    """The env's own calls (acall_internal) raise ServerError for unsendable arguments, before touching the session."""
    with pytest.raises(ServerError, match=r"'echo' cannot be sent: the string at text holds a lone surrogate"):
        hub.run_sync(hub.acall_internal("echo", {"text": "\ud800"}))
    assert hub.run_sync(hub.acall_internal("echo", {"text": "fine"})).content[0].text == "fine"
    assert_still_serving(hub)


def data(value: Any) -> str:
    """Take any JSON value.

    Args:
        value: anything.
    """
    return type(value).__name__


def test_max_argument_depth_is_a_keyword():
    with ToolHub(servers={"f": function_server([data])}, options=ToolOptions(max_argument_depth=3)) as h:
        ok, deep = h.call([ToolCall("data", {"value": nested(2)}), ToolCall("data", {"value": nested(3)})])
        assert (ok.error, ok.text) == (None, "list")  # the arguments object, then two lists: depth 3
        assert deep.error == "invalid_arguments" and "nested more than 3 levels deep (at value[0][0])" in deep.text
        assert h.restarts == 0
    with ToolHub(servers={"f": function_server([data])}) as h:  # 32 by default
        ok, deep = h.call([ToolCall("data", {"value": nested(31)}), ToolCall("data", {"value": nested(32)})])
        assert ok.error is None and deep.error == "invalid_arguments"
    with pytest.raises(ConfigError, match="max_argument_depth"):
        ToolOptions(max_argument_depth=0)


def test_json_problem_accepts_what_json_can_carry():
    fine = {
        "s": "héllo 😀 \x00 {[",
        "n": [1, 2.5, -0.0, 10**30, True, None],
        "o": {"k": {"k": [{"k": ()}]}},
        "code": "def f():\n    return {'a': [1]}\n" * 100,
    }
    assert json_problem(fine) is None
    assert json_problem({}) is None
    assert json_problem({"a": {1: 2}}) is not None and json_problem({"a": [{"b": {None: 2}}]}) is not None
    loop: dict[str, Any] = {}
    loop["self"] = loop
    assert "nested more than 32 levels deep" in json_problem({"x": loop})


def test_unknown_arguments_error_is_short_whatever_the_keys() -> None:
    """64 unknown keys of 10 kB each: the error names a few, cut, and counts the rest (it listed every key whole)."""
    from types import SimpleNamespace

    from aworld_gym.mcp.tools.arguments import check_arguments

    tool = SimpleNamespace(exposed="add", schema={"type": "object", "properties": {"a": {}, "b": {}}}, validator=None)
    args = {f"{i}" + "k" * 10_000: 1 for i in range(64)}
    found = check_arguments(tool, args, max_chars=10_000_000, max_depth=32)
    assert found is not None and found[0] == "bad_arguments"
    assert len(found[1]) < 1_000 and "and 56 more" in found[1]
