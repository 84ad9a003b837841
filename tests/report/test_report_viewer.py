"""What the viewer shows of a transcript and of several runs (issue 46), checked in the DOM of a real headless
Chromium: a browser agent's page snapshot (the observation, where it says more than the tool results, folded when
long; a tool result with no text says so rather than showing an empty box), code arguments as code (real newlines,
not JSON's ``\\n``), every run's tasks in the success-by-task chart, a sentence instead of a table of dashes for runs
with no task in common, and counts with their right plural. The terminal tables say the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aworld_gym.core.prompts import render_tool_responses
from aworld_gym.report.html import build, transcript
from aworld_gym.report.shots import Images
from aworld_gym.report.stats import RunStats, compare
from aworld_gym.report.tables import render, render_comparison

SNAPSHOT = "The page now:\n```yaml\n" + "".join(
    f'- checkbox "option {i}" [ref=e{i}]\n' for i in range(80)
) + '- button "Submit" [ref=e99]\n```'  # fmt: skip
CODE = "def add(a, b):\n    return a + b\n\nprint(add(2, 3))"


def browser_record(task: str = "click-checkboxes", sample: int = 0) -> dict:
    """A Browser-v0 episode as its JSONL holds it: the click's own result is empty, the page snapshot the agent saw
    is in the observation; the last turn's observation adds "The task is over." to the results."""
    last = "### Page\n- Page URL: /miniwob/click-checkboxes.html"
    return {"episode_id": f"{task}-{sample}", "env_id": "AWorld/Browser-v0", "task_id": task, "sample": sample,
            "policy": "reference", "score": 1.0, "reward": 1.0, "num_turns": 2, "termination": "answer",
            "status": "ok", "prompt": "Select option 3 and click Submit.", "answer": "",
            "turns": [
                {"turn": 1, "action": '<tool_call>{"name": "browser_click"}</tool_call>',
                 "tool_calls": [{"name": "browser_click", "arguments": {"element": "option 3", "target": "e3"}}],
                 "tool_results": [{"name": "browser_click", "text": "", "error": None, "latency_s": 0.2}],
                 "observation": render_tool_responses([SNAPSHOT]), "reward": 0.0},
                {"turn": 2, "action": '<tool_call>{"name": "browser_click"}</tool_call>',
                 "tool_calls": [{"name": "browser_click", "arguments": {"element": "Submit", "target": "e99"}}],
                 "tool_results": [{"name": "browser_click", "text": last, "error": None, "latency_s": 0.2}],
                 "observation": render_tool_responses([last]) + "\nThe task is over.", "reward": 1.0}]}  # fmt: skip


def code_record(task: str, sample: int = 0, score: float = 1.0) -> dict:
    """A Code-v0 episode: one run_python call whose code spans lines; the observation is the joined results."""
    out = "5"
    return {"episode_id": f"{task}-{sample}", "env_id": "AWorld/Code-v0", "task_id": task, "sample": sample,
            "policy": "reference", "score": score, "reward": score, "num_turns": 1, "termination": "answer",
            "status": "ok", "prompt": "Write add.", "answer": "ok",
            "turns": [{"turn": 1, "action": "<tool_call>...</tool_call>",
                       "tool_calls": [{"name": "run_python", "arguments": {"code": CODE, "timeout": 5}}],
                       "tool_results": [{"name": "run_python", "text": out, "error": None, "latency_s": 0.1}],
                       "observation": render_tool_responses([out]), "reward": score}]}  # fmt: skip


def write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_the_transcript_keeps_an_observation_only_where_it_differs_and_code_apart():
    t = transcript(browser_record(), 100_000, Images(0))
    assert t["turns"][0]["observation"] == render_tool_responses([SNAPSHOT])  # the snapshot: the results were empty
    assert t["turns"][1]["observation"].endswith("The task is over.")
    call = transcript(code_record("HumanEval/0"), 100_000, Images(0))["turns"][0]
    assert call["observation"] is None  # the same as its one result: not shown twice
    assert call["calls"] == [{"name": "run_python", "arguments": '{"timeout": 5}',
                              "code": [{"name": "code", "text": CODE}]}]  # fmt: skip


def test_the_terminal_says_there_is_nothing_to_compare_and_counts_in_the_right_plural(tmp_path):
    summaries = []
    for name, records in (("browser", [browser_record()]), ("code", [code_record("HumanEval/0", s) for s in (0, 1)])):
        stats = RunStats(str(write(tmp_path / f"{name}.jsonl", records)), None)
        for r in records:
            assert stats.add(r)
        summaries.append(stats.summary())
    assert "1 episode over 1 task (1 sample per task)" in render(summaries[0])
    assert "2 episodes over 1 task (2 samples per task)" in render(summaries[1])
    assert render_comparison(compare(summaries)) == (
        "comparison: these runs have no task in common, so there is nothing to compare"
    )


@pytest.mark.slow
def test_the_viewer_shows_what_the_agent_saw_code_as_code_every_runs_tasks_and_plurals(tmp_path):
    from tests.report_page import Page

    browser = write(tmp_path / "browser.jsonl", [browser_record()])
    code = write(tmp_path / "code.jsonl", [code_record("HumanEval/0", s, score=float(s)) for s in (0, 1)])
    build([browser, code], tmp_path / "r.html")
    with Page(tmp_path / "r.html") as page:
        page.open("#episode-0")
        seen = page.js("""() => {
            const turn = n => document.querySelector(`#transcript .turn[data-turn="${n}"]`);
            const obs = turn(1).querySelector('.result.obs');
            const chart = [...document.querySelectorAll('.chart')].find(c => c.dataset.title.startsWith('Success rate by task'));
            return {
                obsShown: obs.querySelector('pre').innerText, obsFolded: obs.querySelector('details pre').textContent,
                obsOpen: obs.querySelector('details').open,
                empty: turn(1).querySelector('.result.tool').innerText,
                lastObs: turn(2).querySelector('.result.obs pre').textContent,
                comparison: document.getElementById('comparison').innerText,
                comparisonTable: !!document.getElementById('comparison-table'),
                ticks: [...chart.querySelectorAll('.xtick text')].map(e => e.textContent),
                bars: chart.data.map(t => ({name: t.name, x: t.x, y: t.y})),
                cards: [...document.querySelectorAll('.card')].map(c => c.innerText),
                meta: document.getElementById('detail-meta').textContent,
                note: document.getElementById('bound-note').textContent,
            };
        }""")  # fmt: skip
        # The page snapshot: its start shown, the whole of it folded below; the empty result says where to look.
        assert seen["obsShown"].startswith("<tool_response>\nThe page now:\n```yaml\n- checkbox")
        assert seen["obsShown"].endswith(" ...") and seen["obsOpen"] is False
        assert seen["obsFolded"] == render_tool_responses([SNAPSHOT])
        assert "no text of its own: the observation below shows what the agent saw" in seen["empty"]
        assert seen["lastObs"].endswith("</tool_response>\nThe task is over.")
        # Two runs, no task in common: a sentence, no table of dashes.
        assert "no task in common: there is nothing to compare" in seen["comparison"]
        assert not seen["comparisonTable"]
        # The chart has both runs' tasks (hardest first), each run's bar only where it has the task.
        assert seen["ticks"] == ["HumanEval/0", "click-checkboxes"]
        assert seen["bars"] == [{"name": "browser.jsonl", "x": seen["ticks"], "y": [None, 1]},
                                {"name": "code.jsonl", "x": seen["ticks"], "y": [0.5, None]}]  # fmt: skip
        assert "1 (1 sample each)" in seen["cards"][0] and "1 (2 samples each)" in seen["cards"][1]
        assert "; 2 turns;" in seen["meta"] and seen["note"].startswith("Transcripts embedded for 3 of 3 episodes")
        # run_python's code as code: its own lines in a monospace <pre>, no JSON escapes; the rest as JSON.
        page.js("() => { window.aworldReport.open(1); return true; }")
        call = page.js("""() => { const c = document.querySelector('#transcript .call');
            const pre = c.querySelector('pre.code');
            return {args: c.querySelector('pre:not(.code)').textContent, name: c.querySelector('.arg .meta').textContent,
                    code: pre.textContent, font: getComputedStyle(pre).fontFamily,
                    meta: document.getElementById('detail-meta').textContent}; }""")  # fmt: skip
        assert call["code"] == CODE and "\\n" not in call["code"] and call["name"] == "code"
        assert call["args"] == '{"timeout": 5}' and "monospace" in call["font"]
        assert "; 1 turn;" in call["meta"]
        assert page.console_errors()[0] == 0
