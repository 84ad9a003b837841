"""Plain Python functions as tools (function_server / FunctionTools) behind a ToolHub, in-process."""

import asyncio
import copy
import pickle

import pytest

from aworld_gym.base.calls import ToolCall
from aworld_gym.base.errors import ConfigError
from aworld_gym.mcp.functions import FunctionTools, function_server, parse_docstring
from aworld_gym.mcp.hub import ToolHub


def add(a: int, b: int = 10) -> int:
    """Add two integers.

    The second paragraph is not part of the description.

    Args:
        a: the first number,
            on two lines.
        b (int): the second number.

    Returns:
        The sum.
    """
    return a + b


def describe(name: str, weight: float, active: bool, tags: list[str], note: str | None = None) -> str:
    """Describe a thing."""
    return f"{name}|{weight}|{active}|{','.join(tags)}|{note}"


def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


async def shout(text: str, times: int = 1) -> str:
    """Upper-case the text (an async tool)."""
    await asyncio.sleep(0)
    return text.upper() * times


def only_positional(x: int, /, y: int) -> int:
    return x - y


TOOLS = [add, describe, divide, shout, only_positional]


def schemas(hub: ToolHub) -> dict[str, dict]:
    return {s["function"]["name"]: s["function"] for s in hub.tool_schemas()}


def test_schemas_come_from_type_hints_and_docstrings():
    with ToolHub(servers={"tools": function_server(TOOLS)}) as hub:
        s = schemas(hub)
    assert sorted(s) == ["add", "describe", "divide", "only_positional", "shout"]
    assert s["add"]["description"] == "Add two integers."
    props = s["add"]["parameters"]["properties"]
    assert props["a"]["type"] == props["b"]["type"] == "integer"
    assert props["a"]["description"] == "the first number, on two lines."
    assert props["b"]["description"] == "the second number." and props["b"]["default"] == 10
    assert s["add"]["parameters"]["required"] == ["a"]  # a default makes a parameter optional
    d = s["describe"]["parameters"]
    types = {k: v.get("type") for k, v in d["properties"].items()}
    assert types == {"name": "string", "weight": "number", "active": "boolean", "tags": "array", "note": None}
    assert d["properties"]["tags"]["items"] == {"type": "string"}
    assert d["required"] == ["name", "weight", "active", "tags"]
    assert s["only_positional"]["parameters"]["required"] == ["x", "y"]


def test_calls_errors_and_async_functions():
    with ToolHub(servers={"tools": function_server(TOOLS)}) as hub:
        r = hub.call(
            [
                ToolCall("add", {"a": 2, "b": 3}),
                ToolCall("add", {"a": 2}),
                ToolCall("describe", {"name": "box", "weight": 1.5, "active": True, "tags": ["a", "b"]}),
                ToolCall("divide", {"a": 1, "b": 0}),
                ToolCall("shout", {"text": "hey", "times": 2}),
                ToolCall("only_positional", {"x": 5, "y": 2}),
                ToolCall("add", {"a": "two"}),
            ]
        )
        assert [x.text for x in r[:3]] == ["5", "12", "box|1.5|True|a,b|None"]
        assert r[3].error == "tool_error" and "ZeroDivisionError: float division by zero" in r[3].text
        assert (r[4].error, r[4].text) == (None, "HEYHEY")
        assert (r[5].error, r[5].text) == (None, "3")
        assert r[6].error == "bad_arguments"  # checked by the hub against the derived schema
        assert r[0].structured == {"result": 5}
        after = hub.call([ToolCall("add", {"a": 1, "b": 1})])[0]  # a raising function does not hurt the server
        assert after.text == "2" and hub.restarts == 0


def test_deepcopy_and_pickle_give_working_servers():
    """gym.make deep-copies its kwargs; vector envs in worker processes pickle them."""
    kwargs = {"mcp_config": {"mcpServers": {"tools": function_server([add, shout])}}}
    copied = copy.deepcopy(kwargs)
    assert copied["mcp_config"]["mcpServers"]["tools"] is not kwargs["mcp_config"]["mcpServers"]["tools"]
    factory = pickle.loads(pickle.dumps(FunctionTools([add, shout], name="calc")))
    assert repr(factory) == "FunctionTools([add, shout], name='calc')"
    unpickled = pickle.loads(pickle.dumps(function_server([add])))
    for config in (
        copied["mcp_config"],
        {"mcpServers": {"calc": copy.deepcopy(factory)}},
        {"mcpServers": {"u": unpickled}},
    ):
        with ToolHub(config) as hub:
            assert hub.call([ToolCall("add", {"a": 20, "b": 22})])[0].text == "42"


def test_factory_form_in_servers():
    with ToolHub(servers={"calc": FunctionTools([add])}) as hub:
        r = hub.call([ToolCall("add", {"a": 1})])[0]
        assert (r.text, r.server) == ("11", "calc")


def test_unusable_functions_are_config_errors():
    with pytest.raises(ConfigError, match="no usable name"):
        function_server([lambda x: x])
    with pytest.raises(ConfigError, match="two functions are named 'add'"):
        function_server([add, add])
    with pytest.raises(ConfigError, match=r"takes \*args"):

        def star(*args: int) -> int:
            return 0

        function_server([star])
    with pytest.raises(ConfigError, match="not callable"):
        FunctionTools([42])


def test_parse_docstring():
    doc = "Summary line\ncontinued.\n\nArgs:\n    x: one.\n    y (int): two\n        lines.\n\nReturns:\n    z: not an arg."
    assert parse_docstring(doc) == ("Summary line continued.", {"x": "one.", "y": "two lines."})
    assert parse_docstring("") == ("", {})
    assert parse_docstring("Just this.\nArgs:\n  a: first.") == ("Just this.", {"a": "first."})
