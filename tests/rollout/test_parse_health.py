"""Parse health (issue 49, item 4): what each episode's turns say about the model's tool calls, summed over a run,
and the alarm over the last episodes (once per crossing), with a control that never crosses it."""

from __future__ import annotations

import warnings

import pytest

from aworld_gym.cli import main
from aworld_gym.mcp.demo_server import build_server
from aworld_gym.rollout.collect import collect
from aworld_gym.rollout.health import ParseHealth, ParseHealthWarning, episode_health
from aworld_gym.rollout.policies import ScriptedPolicy
from aworld_gym.rollout.sinks import iter_records
from tests.helpers import TASKS

ENV = {"mcp_config": {"mcpServers": {"demo": build_server}}, "tasks": TASKS, "max_turns": 6}


class Script(ScriptedPolicy):
    """Plays the same turns in every episode."""

    def __init__(self, turns: list[str]) -> None:
        super().__init__()
        self.turns = turns

    def decide(self, env):
        return self.turns[min(env.turn, len(self.turns) - 1)]


MESSY = [
    '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}',  # never closed
    "<tool_call>{name: add}</tool_call>",  # not JSON
    '<tool_call>{"name": "subtract", "arguments": {}}</tool_call>',  # no such tool
    "   ",  # empty
    '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>',
    "<answer>5</answer>",
]


def test_an_episode_s_turns_are_counted_by_what_went_wrong(tmp_path):
    out = tmp_path / "messy.jsonl"
    collect("AWorld/MCP-v0", Script(MESSY), episodes=1, sink=str(out), progress=False, env_kwargs=ENV)
    (record,) = iter_records(out)
    h = episode_health(record)
    assert (h.turns, h.tool_turns, h.failed_turns, h.unknown_tools, h.empty) == (6, 2, 2, 1, 1)
    assert dict(h.parse_failures) == {"unclosed_tag": 1, "invalid_json": 1}
    assert h.answered and not h.answer_without_tool_call


def test_the_alarm_says_once_when_the_model_stops_calling_tools_and_the_control_never_does(tmp_path):
    answers_only = Script(["<answer>5</answer>"])
    with pytest.warns(ParseHealthWarning, match="no tool call in 100% of the last 50 episodes") as seen:
        s = collect("AWorld/MCP-v0", answers_only, episodes=120, concurrency=4, progress=False, env_kwargs=ENV,
                    parse_health=ParseHealth(window=50))  # fmt: skip
    assert len([w for w in seen if issubclass(w.category, ParseHealthWarning)]) == 1  # once per crossing
    assert len(s.health.alarms) == 1 and s.health.answers_without_tool_call == 120
    assert "0% of turns call a tool" in s.render() and "no tool call" in s.render()
    health = s.to_dict()["parse_health"]
    assert health["answers_without_tool_call"] == 120 and health["answered_without_tool_call_episodes"] == 1.0

    calls = Script(['<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>', "<answer>5</answer>"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParseHealthWarning)  # the control: calling tools never raises it
        control = collect("AWorld/MCP-v0", calls, episodes=120, concurrency=4, progress=False, env_kwargs=ENV,
                          parse_health=ParseHealth(window=50))  # fmt: skip
    assert control.health.alarms == [] and control.health.shares()["tool_call_turns"] == 0.5


def test_the_alarm_on_calls_that_stop_parsing_and_the_report_s_table(tmp_path):
    broken = Script(["<tool_call>{name: add}</tool_call>", "<answer>5</answer>"])
    out = tmp_path / "broken.jsonl"
    with pytest.warns(ParseHealthWarning, match="failed to parse"):
        s = collect("AWorld/MCP-v0", broken, episodes=30, concurrency=2, sink=str(out), progress=False,
                    env_kwargs=ENV, parse_health=ParseHealth(window=20, no_tool_call=1.01))  # fmt: skip
    assert s.health.failures_by_kind == {"invalid_json": 30}
    quiet = ParseHealth(window=20, parse_failures=0.6, no_tool_call=1.01)  # 50% of turns fail: under its threshold
    for record in iter_records(out):
        quiet.add(record)
    assert quiet.alarms == []
    assert main(["report", str(out)]) == 0


def test_the_report_shows_parse_health(tmp_path, capsys):
    out = tmp_path / "messy.jsonl"
    collect("AWorld/MCP-v0", Script(MESSY), episodes=3, sink=str(out), progress=False, env_kwargs=ENV)
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "parse health" in text and "turns that failed to parse" in text
    assert "invalid_json 3, unclosed_tag 3" in text and "33.3%" in text  # 6 of 18 turns; 6 tool turns of 18


def _episode(i: int, calls: bool) -> dict:
    """A record of an episode that called a tool then answered, or answered at once."""
    call = {"turn": 1, "action": '<tool_call>{"name": "add"}</tool_call>', "reward": 0.0,
            "tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}],
            "tool_results": [{"name": "add", "text": "5", "error": None}], "observation": "5"}  # fmt: skip
    answer = {"turn": 2 if calls else 1, "action": "<answer>5</answer>", "reward": 1.0}
    return {"episode_id": f"e{i}", "env_id": "AWorld/MCP-v0", "task_id": f"t{i % 8}", "sample": i // 8,
            "score": 1.0, "reward": 1.0, "num_turns": 2 if calls else 1, "termination": "answer", "status": "ok",
            "answer": "5", "turns": [call, answer] if calls else [answer]}  # fmt: skip


def test_the_report_shows_the_run_s_course_and_the_alarm_its_window_raised(tmp_path, capsys):
    """A run whose model called a tool in its first 100 episodes and in none of the next 300: the report (text and
    HTML, checked in headless Chromium) says when the run's alarm (the default window of 200) would have fired, and
    plots the share of episodes calling a tool falling to 0; a run that kept calling tools has no alarm."""
    import json

    from aworld_gym.report.html import build
    from tests.report_page import Page

    stopped, kept = tmp_path / "stopped.jsonl", tmp_path / "kept.jsonl"
    stopped.write_text("".join(json.dumps(_episode(i, i < 100)) + "\n" for i in range(400)))
    kept.write_text("".join(json.dumps(_episode(i, True)) + "\n" for i in range(400)))
    assert main(["report", str(stopped)]) == 0
    alarm = (
        "parse health, after 290 episodes: no tool call in 95% of the last 200 episodes (alarm at 95%): the "
        "model has stopped using its tools"
    )
    assert f"ALARM {alarm}" in capsys.readouterr().out
    assert main(["report", str(kept)]) == 0 and "ALARM" not in capsys.readouterr().out
    build([stopped, kept], tmp_path / "r.html")
    with Page(tmp_path / "r.html") as page:
        page.open("")
        seen = page.js("""() => {
            const chart = [...document.querySelectorAll('.chart')].find(c => c.dataset.title === 'Parse health over the run');
            return {traces: chart.data.map(t => ({name: t.name, x: t.x, y: t.y})),
                    alarms: [...document.querySelectorAll('.note.alarm')].map(p => p.textContent)};
        }""")  # fmt: skip
    tools = {t["name"]: t for t in seen["traces"]}
    course = tools["stopped.jsonl: episodes with a tool call"]
    assert course["x"][:2] == [8, 16] and course["x"][-1] == 400  # 50 slices of 8 episodes
    assert course["y"][:12] == [1.0] * 12 and course["y"][13:] == [0.0] * 37  # 12.5 slices called tools
    assert set(tools["kept.jsonl: episodes with a tool call"]["y"]) == {1.0}
    assert set(tools["stopped.jsonl: turns that failed to parse"]["y"]) == {0.0}
    assert seen["alarms"] == [f"stopped.jsonl: {alarm}"]
