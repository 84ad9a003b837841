"""Hostile tool lists (issue 30, items 6, 7, 9 and 10's names, duplicates and list_changed): what a server publishes
in ``tools/list`` can cost it a tool, never the env. Each case runs against ``tests/hostile_tools_server.py`` (raw
JSON-RPC) over stdio and over streamable HTTP: schemas that cannot be checked locally are left to the server,
descriptions and schemas are capped, malformed tools are dropped one by one, names are made valid (calls reach the
original name), a repeated name keeps its first definition, and ``tools/list_changed`` re-lists the tools between
steps, the model being told.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Iterator

import gymnasium as gym
import pytest

import aworld_gym  # noqa: F401 - registers the ids
from aworld_gym.base.calls import ToolCall
from aworld_gym.mcp.hub import ToolHub
from aworld_gym.mcp.tools import listing
from tests.helpers import ROOT, http_server

ENV = "AWorld/MCP-v0"
TASKS = [{"id": "t", "prompt": "Use the tools.", "answer": "done"}]
VALID = re.compile(r"[a-zA-Z0-9_-]{1,64}")


@contextlib.contextmanager
def server_config(case: str, transport: str) -> Iterator[dict]:
    """The ``mcp_config`` of the hostile tools server publishing ``case``, over ``transport``."""
    if transport == "stdio":
        yield {"mcpServers": {"h": {"command": sys.executable, "args": ["-m", "tests.hostile_tools_server", case],
                                    "cwd": str(ROOT), "timeout": 10}}}  # fmt: skip
        return
    with http_server(["-m", "tests.hostile_tools_server", case, "--http"]) as url:
        yield {"mcpServers": {"h": {"type": "streamable-http", "url": url, "timeout": 10}}}


@contextlib.contextmanager
def started(case: str, transport: str) -> Iterator[ToolHub]:
    with server_config(case, transport) as config:
        hub = ToolHub(config).start()
        try:
            yield hub
        finally:
            hub.close()


@pytest.fixture(params=["stdio", "streamable-http"])
def transport(request) -> str:
    return request.param


@pytest.fixture
def warnings(monkeypatch) -> list[str]:
    """The warnings of the tool listing, taken at the call (each is logged once per process: the record of that is
    reset here). Not through caplog: in CI's full suite a caplog check of another logger once saw no records."""
    monkeypatch.setattr(listing, "_warned", set())
    said: list[str] = []
    monkeypatch.setattr(listing.logger, "warning", lambda msg, *args, **kw: said.append(msg % args if args else msg))
    return said


def messages(said: list[str]) -> list[str]:
    return list(said)


def echo(name: str, args: dict) -> str:
    """What the hostile server answers when ``name`` is called with ``args``."""
    return f"called {name!r} with {json.dumps(args, sort_keys=True)}"


def test_a_recursive_ref_schema_is_left_to_the_server(transport, warnings):
    """``{"type": "object", "$ref": "#"}`` made the validator recurse until RecursionError: every call crashed."""
    with started("recursive_ref", transport) as hub:
        for i in range(2):
            res = hub.call([ToolCall("loop", {"x": i})])[0]
            assert (res.error, res.text) == (None, echo("loop", {"x": i}))
        assert hub.call([ToolCall("ok", {"text": "1"})])[0].text == "ok:1"
    (line,) = [m for m in messages(warnings) if "'loop'" in m]
    assert "cannot be checked here" in line and "\n" not in line


def test_a_recursive_ref_schema_does_not_end_the_episode(warnings):
    with server_config("recursive_ref", "stdio") as config:
        env = gym.make(ENV, mcp_config=config, tasks=TASKS)
        try:
            env.reset(seed=0)
            _, _, terminated, truncated, info = env.step(
                '<tool_call>{"name": "loop", "arguments": {"x": 1}}</tool_call>'
            )
            assert not terminated and not truncated and info["action_error"] is None
            assert info["tool_results"][0]["error"] is None
        finally:
            env.close()


def test_an_unknown_type_is_left_to_the_server(transport):
    """``"type": "banana"`` made every value the model's ``bad_arguments``."""
    with started("banana", transport) as hub:
        for value in (1, "a", None):
            res = hub.call([ToolCall("fruit", {"x": value})])[0]
            assert (res.error, res.text) == (None, echo("fruit", {"x": value}))


def test_a_huge_description_is_cut_in_the_system_prompt(transport, warnings):
    """A 2 MB description became a 2.1 MB system prompt."""
    with server_config("huge_description", transport) as config:
        env = gym.make(ENV, mcp_config=config, tasks=TASKS)
        try:
            _, info = env.reset(seed=0)
            (chatty,) = [t["function"] for t in info["tools"] if t["function"]["name"] == "chatty"]
            assert listing.MAX_DESCRIPTION_CHARS <= len(chatty["description"]) < listing.MAX_DESCRIPTION_CHARS + 100
            assert chatty["description"].endswith("[description cut: 2000000 characters]")
            assert len(info["system_prompt"]) < 10_000
        finally:
            env.close()
    assert len([m for m in messages(warnings) if "tool 'chatty': its description" in m]) == 1


def test_a_huge_schema_loses_its_descriptions_or_the_tool(transport, warnings):
    """A 100 kB schema (mostly descriptions) and a 180 kB one (5,000 properties) were shown whole."""
    with started("huge_schema", transport) as hub:
        assert hub.tool_names == ["ok", "add_tool", "bloated"]
        (bloated,) = [t["function"] for t in hub.tool_schemas() if t["function"]["name"] == "bloated"]
        assert len(json.dumps(bloated["parameters"])) <= listing.MAX_SCHEMA_CHARS
        assert sorted(bloated["parameters"]["properties"]) == sorted(f"p{i}" for i in range(100))
        assert "description" not in json.dumps(bloated["parameters"])
        assert hub.call([ToolCall("bloated", {"p1": "v"})])[0].text == echo("bloated", {"p1": "v"})
    found = messages(warnings)
    assert any("tool 'bloated': its input schema" in m and "descriptions were removed" in m for m in found)
    assert any("tool 'enormous' dropped" in m and "the limit is" in m for m in found)


def test_malformed_tools_are_dropped_one_by_one(transport, warnings):
    """One malformed tool failed the whole server at reset, with a multi-line pydantic dump."""
    with started("malformed", transport) as hub:
        assert hub.tool_names == ["ok", "add_tool", "silent"]
        assert hub.call([ToolCall("ok", {"text": "x"})])[0].text == "ok:x"
    dropped = [m for m in messages(warnings) if "dropped" in m]
    assert len(dropped) == 5 and all("\n" not in m and m.startswith("MCP server 'h': tool #") for m in dropped)
    assert any("'no_schema'" in m and "inputSchema" in m for m in dropped)
    assert any("(123)" in m and "name" in m for m in dropped)


def test_a_timeout_on_a_server_with_a_malformed_tool_keeps_its_session():
    """The health probe after a timeout lists the tools raw, as the hub does: one malformed tool in the list must
    not make a live session look dead (it was restarted after every timeout)."""
    config = {"mcpServers": {"h": {"command": sys.executable, "args": ["-m", "tests.hostile_tools_server", "malformed"],
                                   "cwd": str(ROOT), "timeout": 1.5}}}  # fmt: skip
    hub = ToolHub(config).start()
    try:
        conn = hub._conns[0]
        assert hub.call([ToolCall("silent", {})])[0].error == "timeout"
        assert conn.alive and hub.restarts == 0
        assert hub.call([ToolCall("ok", {"text": "y"})])[0].text == "ok:y" and hub.restarts == 0
    finally:
        hub.close()


def test_invalid_names_are_renamed_and_calls_reach_the_original(transport, warnings):
    """Names with spaces, paths, 300 characters, ``</tool_call>``, NUL or nothing were exposed verbatim."""
    originals = ["read file", "../../etc/passwd", "x" * 300, "</tool_call>", "nul\x00name", "", "a b", "a.b"]
    with started("bad_names", transport) as hub:
        names = hub.tool_names
        assert all(VALID.fullmatch(n) for n in names), names
        assert len(set(names)) == len(names) == 2 + len(originals)
        assert {"read_file", "etc_passwd", "tool_call", "nul_name", "a_b"} <= set(names)
        routed = {hub._tools[n].name: n for n in names}
        assert set(originals) <= set(routed)
        for original in originals:
            res = hub.call([ToolCall(routed[original], {})])[0]
            assert (res.error, res.text) == (None, echo(original, {}))
        shown = [t["function"]["name"] for t in hub.tool_schemas()]
        assert shown == names and not any("/" in n or "<" in n or "\x00" in n for n in shown)
        assert "\\u0000" not in json.dumps(hub.tool_schemas())  # nor in a description (the server repeats the name)
    renamed = [m for m in messages(warnings) if "is exposed as" in m]
    assert len(renamed) == len(originals) and all(len(m) < 300 for m in renamed)


def test_a_repeated_name_keeps_its_first_definition(transport, warnings):
    """A name listed twice silently kept the later definition."""
    with started("duplicates", transport) as hub:
        assert hub.tool_names == ["ok", "add_tool", "dup"]
        (dup,) = [t["function"] for t in hub.tool_schemas() if t["function"]["name"] == "dup"]
        assert dup["description"] == "the first dup"
        assert hub.call([ToolCall("dup", {})])[0].text == echo("dup", {})
    assert [m for m in messages(warnings) if "twice" in m] == [
        "MCP server 'h' lists the tool 'dup' twice: the first definition is kept"
    ]


def test_list_changed_relists_the_hub_tools(transport):
    with started("", transport) as hub:
        assert "new_tool" not in hub.tool_names
        assert hub.call([ToolCall("add_tool", {})])[0].text == "added new_tool"
        assert "new_tool" in hub.tool_names and hub.tools_version == 1  # re-listed after the step's calls
        res = hub.call([ToolCall("new_tool", {"n": 2})])[0]
        assert (res.error, res.text) == (None, echo("new_tool", {"n": 2}))
        assert hub.call([ToolCall("new_tool", {"n": "two"})])[0].error == "bad_arguments"  # its schema is known


def test_list_changed_tells_the_model_and_the_next_episode(transport):
    """A tool added with ``notifications/tools/list_changed`` stayed "unknown"."""
    with server_config("", transport) as config:
        env = gym.make(ENV, mcp_config=config, tasks=TASKS)
        try:
            _, info = env.reset(seed=0)
            assert "new_tool" not in json.dumps(info["tools"])
            obs, _, _, _, info = env.step('<tool_call>{"name": "add_tool", "arguments": {}}</tool_call>')
            assert "added new_tool\nNote: the available tools changed.\nNew or changed tools:\n<tools>\n" in obs
            assert '"name": "new_tool"' in obs and "A tool added while the episode ran." in obs
            assert "new_tool" in [t["function"]["name"] for t in info["tools"]] and info["tools"] == env.unwrapped.tools
            assert "the available tools changed" in env.unwrapped.messages[-1]["content"]  # the tool message
            obs, _, _, _, info = env.step('<tool_call>{"name": "new_tool", "arguments": {"n": 1}}</tool_call>')
            assert info["tool_results"][0]["error"] is None and echo("new_tool", {"n": 1}) in obs
            assert "tools" not in info and "Note:" not in obs  # told once
            _, info = env.reset(seed=0)
            assert '"name": "new_tool"' in info["system_prompt"]
        finally:
            env.close()


def test_a_deeply_nested_schema_costs_only_its_tool(transport, warnings):
    """An ``inputSchema`` nesting 120 objects made the SDK's JSON parser refuse the whole ``tools/list`` reply (over
    200 levels): the server failed to start. Now that tool is left out with one warning line; the others work."""
    with started("deep_schema", transport) as hub:
        assert hub.tool_names == ["ok", "add_tool", "shallow"]
        assert hub.call([ToolCall("ok", {"text": "d"})])[0].text == "ok:d"
        res = hub.call([ToolCall("shallow", {"a": {"a": {"a": "x"}}})])[0]
        assert (res.error, res.text) == (None, echo("shallow", {"a": {"a": {"a": "x"}}}))
        assert hub.call([ToolCall("deep", {})])[0].error == "unknown_tool"
    (line,) = [m for m in messages(warnings) if "'deep'" in m]
    assert "dropped" in line and f"more than {listing.MAX_SCHEMA_DEPTH} deep" in line and "\n" not in line


def test_a_deep_reply_is_still_refused_past_python_s_own_limit():
    """Python's parser, the fallback for deep replies, is no way around the bounds: 100,000 levels, a lone surrogate
    or NaN are refused as before (with the SDK parser's error)."""
    from aworld_gym.mcp.transports.lines import parse_message

    head = b'{"jsonrpc": "2.0", "id": 1, "result": '
    deep = head + b'{"a": ' * 300 + b"1" + b"}" * 300 + b"}"
    assert parse_message(deep).result["a"]["a"]["a"]  # 300 levels: past the SDK's 200, parsed
    for bad in (head + b"[" * 100_000 + b"]" * 100_000 + b"}",
                head + b'{"a": "\\ud800", "b": ' + b"[" * 300 + b"]" * 300 + b"}}",
                head + b'{"a": NaN, "b": ' + b"[" * 300 + b"]" * 300 + b"}}"):  # fmt: skip
        with pytest.raises(ValueError):
            parse_message(bad)


def test_the_server_s_own_name_of_a_renamed_tool_reaches_it(transport):
    """``../../etc/passwd`` was listed as ``etc_passwd``; the model calling the name the server declared was told
    "unknown tool". The declared name is an alias of the exposed one (only for names no tools= API accepts)."""
    with started("bad_names", transport) as hub:
        for original in ("../../etc/passwd", "read file", "</tool_call>", "a.b"):
            res = hub.call([ToolCall(original, {})])[0]
            assert (res.error, res.text) == (None, echo(original, {}))
        assert hub.call([ToolCall("passwd", {})])[0].error == "unknown_tool"


def test_the_declared_name_works_in_an_episode():
    with server_config("bad_names", "stdio") as config:
        env = gym.make(ENV, mcp_config=config, tasks=TASKS)
        try:
            env.reset(seed=0)
            obs, _, _, _, info = env.step('<tool_call>{"name": "../../etc/passwd", "arguments": {}}</tool_call>')
            assert info["tool_results"][0]["error"] is None and echo("../../etc/passwd", {}) in obs
        finally:
            env.close()
