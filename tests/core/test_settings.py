"""The env's settings (aworld_gym.core.settings): four typed groups, the flat keywords mapped onto them in one table,
each value checked once, conflicts and misspellings refused with a message that says what to change."""

from __future__ import annotations

import json
import re

import gymnasium as gym
import pytest

import aworld_gym  # noqa: F401 - registers the ids
from aworld_gym.base.errors import ConfigError
from aworld_gym.core.env import MCPEnv
from aworld_gym.core.rewards import TaskScore
from aworld_gym.core.settings import FLAT, GROUPS, Limits, Rendering, Rewards, Settings, ToolOptions
from aworld_gym.mcp.demo_server import build_server
from aworld_gym.mcp.hub import ToolHub
from tests.helpers import TASKS

SERVERS = {"mcpServers": {"demo": build_server}}
FLAT_FORM = {
    "max_turns": 2,
    "max_episode_chars": 50_000,
    "tool_timeout": 5,
    "deny_tools": ["echo"],
    "max_tool_output_chars": 3,
    "system_prompt": "Be brief.",
    "tool_format": "compact",
    "reward_hooks": [TaskScore(weight=2.0)],
}
GROUP_FORM = {
    "limits": Limits(max_turns=2, max_episode_chars=50_000),
    "tool_options": ToolOptions(timeout=5, deny=["echo"], max_output_chars=3),
    "rendering": Rendering(system_prompt="Be brief.", tool_format="compact"),
    "rewards": Rewards(hooks=FLAT_FORM["reward_hooks"]),
}


def tc(name: str, **args: object) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def episode(env: gym.Env) -> list[tuple]:
    """What the model sees and gets in three steps: a cut tool output, a denied tool, the turn limit."""
    obs, info = env.reset(options={"task_id": "mul"})
    out = [(obs, info["system_prompt"], sorted(t["function"]["name"] for t in info["tools"]))]
    for action in (tc("multiply", a=6, b=7), tc("echo", text="hello"), "<answer>42</answer>"):
        obs, reward, term, trunc, info = env.step(action)
        out.append((obs, reward, term, trunc, info.get("truncation_reason")))
        if term or trunc:
            break
    return out


def test_every_flat_keyword_names_a_field_of_its_group():
    for flat, (group, attr) in FLAT.items():
        assert attr in GROUPS[group].__dataclass_fields__, flat
    assert len(set(FLAT.values())) == len(FLAT)  # one keyword per field


def test_flat_keywords_and_group_objects_make_the_same_env():
    flat = gym.make("AWorld/MCP-v0", mcp_config=SERVERS, tasks=TASKS, **FLAT_FORM)
    grouped = gym.make("AWorld/MCP-v0", mcp_config=SERVERS, tasks=TASKS, **GROUP_FORM)
    try:
        assert flat.unwrapped.settings == grouped.unwrapped.settings
        assert flat.unwrapped.tool_options.timeout == 5.0 and flat.unwrapped.hub.options.deny == ("echo",)
        seen = episode(flat)
        assert seen == episode(grouped)
        first, product, denied = seen[0], seen[1], seen[2]
        assert first[1].startswith("Be brief.") and "multiply(" in first[1]  # compact: one line per tool
        assert "echo" not in first[2] and "multiply" in first[2]
        assert product[0].startswith("<tool_response>\n42.") and "output truncated" in product[0]  # cut at 3 chars
        assert "unknown tool 'echo'" in denied[0]
        assert denied[3] is True and denied[4] == "turn_limit"  # max_turns=2: the answer is never reached
    finally:
        flat.close()
        grouped.close()


def test_a_flat_keyword_fills_a_field_its_group_leaves_at_the_default():
    with MCPEnv(SERVERS, TASKS, limits=Limits(max_episode_chars=1000), max_turns=3, strict=True) as env:
        assert env.limits == Limits(max_turns=3, max_episode_chars=1000)
        assert (env.max_turns, env.max_episode_chars, env.strict) == (3, 1000, True)  # the names read before
        with pytest.raises(AttributeError):
            env.max_turns = 5  # read-only: the settings are made once


@pytest.mark.parametrize(
    ("flat", "group"),
    [
        ({"max_turns": 3}, {"limits": Limits(max_turns=4)}),
        ({"tool_timeout": 5}, {"tool_options": ToolOptions(timeout=6)}),
        ({"reward_hooks": []}, {"rewards": Rewards(hooks=[TaskScore()])}),
        ({"tool_format": "full"}, {"rendering": Rendering(tool_format="compact")}),
    ],
)
def test_setting_one_field_both_ways_is_refused(flat, group):
    with pytest.raises(ConfigError) as err:
        MCPEnv(SERVERS, TASKS, **flat, **group)
    (keyword,), (name,) = flat, group
    assert str(err.value).startswith(f"MCPEnv: {keyword}= and {name}=") and "give it once" in str(err.value)


def test_an_unknown_keyword_names_the_id_the_class_the_closest_valid_name_and_every_valid_one():
    with pytest.raises(
        ConfigError,
        match=r"^(AWorld/MCP-v0 \(MCPEnv\)|MCPEnv \(registered as AWorld/MCP-v0(, [^ ,]+)*\)) got an unknown keyword "
        r"'max_turn'; did you mean "
        r"'max_turns'\? It takes: .*\bmax_turns, .*\btool_timeout, ",
    ):
        gym.make("AWorld/MCP-v0", mcp_config=SERVERS, tasks=TASKS, max_turn=3)
    with pytest.raises(
        ConfigError,
        match=r"^AWorld/Code-v0 \(CodeEnv\) got an unknown keyword 'max_turn'; .* It takes: .*"
        r"\bserver, ",
    ):  # a subclass: its id and its own keywords
        gym.make("AWorld/Code-v0", max_turn=3)
    with pytest.raises(ConfigError, match=r"did you mean 'tool_timeout'\?"):
        MCPEnv(SERVERS, TASKS, tool_timout=3)
    with pytest.raises(ConfigError, match=r"did you mean 'tool_options'\?"):
        MCPEnv(SERVERS, TASKS, tools_options=ToolOptions())

    class Deep(MCPEnv):
        def __init__(self, *, depth: int = 1, **kwargs: object) -> None:
            self.depth = depth
            super().__init__(SERVERS, TASKS, **kwargs)

    with pytest.raises(ConfigError, match=r"^Deep got an unknown keyword 'dept'; did you mean 'depth'\? It takes: "):
        Deep(dept=2)  # a subclass's own keywords are suggested too
    with pytest.raises(ConfigError, match=r"unknown keyword 'zzz'\. It takes: "):
        MCPEnv(SERVERS, TASKS, zzz=1)


def test_a_group_of_the_wrong_type_is_refused():
    with pytest.raises(ConfigError, match=r"^MCPEnv: limits= must be a Limits, got dict$"):
        MCPEnv(SERVERS, TASKS, limits={"max_turns": 3})


BAD = [
    ("max_turns", 0, "must be a whole number of at least 1"),
    ("max_episode_chars", 2.5, "must be a whole number"),
    ("max_observation_chars", -1, "must be a whole number"),
    ("truncate_on_infra_error", "no", "must be True or False"),
    ("tool_timeout", -1, "must be a positive number of seconds"),
    ("tool_timeout", float("nan"), "must be a positive number of seconds"),
    ("max_tool_output_chars", 0, "must be a whole number"),
    ("max_argument_chars", True, "must be a whole number"),
    ("max_argument_depth", 0, "must be a whole number"),
    ("allow_tools", "read*", "must be a list of glob patterns"),
    ("deny_tools", [1], "must be a list of glob patterns"),
    ("guard", "no", "must be a function"),
    ("hidden_arguments", {"echo": "text"}, "must map tool names to lists of argument names"),
    ("sequential_calls", 1, "must be True or False"),
    ("tool_images", {"max_images": 1}, "tool_images: unknown key(s)"),
    ("elicitation", "accept", "elicitation must be 'decline', 'accept_defaults' or a function"),
    ("roots", "/data", "roots must be a list"),
    ("scorer", "nope", "scorer: unknown scorer 'nope'"),
    ("reward_hooks", "task", "must be a list of reward hooks"),
    ("strict", None, "must be True or False"),
    ("action_format", "xml", "action_format: unknown action_format 'xml'"),
    ("system_prompt", 3, "must be text"),
    ("tool_format", "xml", "must be one of ('full', 'compact')"),
]


@pytest.mark.parametrize(("flat", "value", "fragment"), BAD, ids=[f"{b[0]}={b[1]!r}" for b in BAD])
def test_each_bad_value_is_a_config_error_naming_the_keyword_as_given(flat, value, fragment):
    with pytest.raises(ConfigError) as err:
        MCPEnv(SERVERS, TASKS, **{flat: value})
    assert str(err.value).startswith(f"MCPEnv: {flat}") and fragment in str(err.value)
    group, attr = FLAT[flat]
    with pytest.raises(ConfigError) as err:  # the same check on the group's field, named as the group names it
        GROUPS[group](**{attr: value})
    assert str(err.value).startswith(f"{GROUPS[group].__name__}: {attr}")


def test_checks_across_fields_and_the_normal_forms():
    with pytest.raises(ConfigError, match="max_tool_output_tokens needs tokenizer="):
        Limits(max_tool_output_tokens=10)
    options = ToolOptions(allow=["a*"], hidden_arguments={"t": ["x"]}, images=False, sampling={"base_url": "http://h/v1",
                          "model": "m"})  # fmt: skip
    assert options.allow == ("a*",) and options.hidden_arguments == {"t": frozenset({"x"})}
    assert options.images.enabled is False and options.sampling.model == "m"
    assert ToolOptions(roots=["{work}"]).roots == ("{work}",)  # the env's work folders: known when the hub is made
    with pytest.raises(ConfigError, match=r"MCPEnv: roots has '\{work\}'"):
        MCPEnv(SERVERS, TASKS, roots=["{work}"])  # MCP-v0 has no work folders


def test_subclass_defaults_and_fixed_settings():
    settings = Settings.take("Env-v0", {"tool_timeout": 5, "tool_options": ToolOptions(deny=["x"])})
    assert settings.given == {"tool_timeout", "deny_tools"}
    mine = settings.with_defaults(tool_timeout=40.0, system_prompt="Mine.")
    assert (mine.tool_options.timeout, mine.rendering.system_prompt, mine.tool_options.deny) == (5.0, "Mine.", ("x",))
    assert mine.replace(deny_tools=("x", "y")).tool_options.deny == ("x", "y")
    with pytest.raises(ConfigError, match=r"^Env-v0 defines its own 'tool_timeout'"):
        settings.fixed("Env-v0", tool_timeout=1)
    with pytest.raises(ConfigError, match="settings= holds every group"):
        MCPEnv(SERVERS, TASKS, settings=mine, max_turns=3)
    with pytest.raises(ConfigError, match=r"^AWorld/Code-v0 defines its own 'scorer'"):
        gym.make("AWorld/Code-v0", rewards=Rewards(scorer="contains"), server="inprocess")


def test_take_leaves_the_other_keywords_and_removes_its_own():
    keywords = {"max_turns": 2, "render_mode": "ansi", "limits": None, "tools": []}
    settings = Settings.take("X", keywords)
    assert keywords == {"render_mode": "ansi", "tools": []} and settings.limits.max_turns == 2


def test_the_hub_reads_its_options_under_the_same_names():
    options = ToolOptions(timeout=7, deny=["echo"], sequential=True)
    with ToolHub(servers={"d": build_server()}, options=options) as hub:
        assert hub.options is options and "echo" not in hub.tool_names and "add" in hub.tool_names
    with MCPEnv(SERVERS, TASKS, tool_timeout=7, deny_tools=["echo"], sequential_calls=True) as env:
        assert env.hub.options == options  # the env hands its group over whole: no renaming on the way


def test_the_documented_table_matches_flat():
    from tests.helpers import ROOT

    text = (ROOT / "docs/env-mcp.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)` \| `(\w+\.\w+)` \|", text, flags=re.M))
    assert rows == {flat: f"{group}.{attr}" for flat, (group, attr) in FLAT.items()}
