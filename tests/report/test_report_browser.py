"""The HTML report of real collected runs, opened in headless Chromium through Playwright MCP as a person would
see it: the page shows the numbers the JSONL holds (counts, success rate, pass@k computed here by hand), the
filters change the list, an episode opens with its tool calls, a GRPO group shows its samples side by side,
browser screenshots a run stored are shown, the charts are drawn, and the console has no errors. The charts read
right: the terminations chart has the kinds on its axis (one bar per run), task ids come in natural order (charts,
groups, the episode list), and Plotly's mode bar never covers a chart's title."""

from __future__ import annotations

import itertools
import json
import math
import random
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from aworld_gym.base.errors import PolicyError
from aworld_gym.envs.code.reference import CodeReferencePolicy
from aworld_gym.envs.gaia.reference import GAIAReferencePolicy
from aworld_gym.report.html import build
from aworld_gym.report.stats import natural_key
from aworld_gym.rollout.collect import collect
from aworld_gym.rollout.sinks.screenshots import screenshots_folder
from tests.report_page import Page

pytestmark = pytest.mark.slow
G = 4


class SometimesWrong(GAIAReferencePolicy):
    """The reference plan, but 40% of its answers replaced by a wrong guess (so groups have mixed outcomes)."""

    name = "sometimes-wrong"

    def __init__(self, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.rng = random.Random(seed)

    def decide(self, env):
        out = super().decide(env)
        if "<answer>" in out and self.rng.random() < 0.4:
            return "<think>I am not sure; a guess.</think>\n<answer>a wrong guess</answer>"
        return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    seeds = itertools.count()
    collect("AWorld/GAIA-v0", lambda: SometimesWrong(next(seeds)), episodes=12 * G, group_size=G, concurrency=4,
            sink=tmp / "noisy.jsonl", progress=False)  # fmt: skip
    collect("AWorld/GAIA-v0", "reference", episodes=12, concurrency=4, sink=tmp / "reference.jsonl", progress=False)
    return tmp


def by_hand(path: Path) -> dict:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    per_task = defaultdict(lambda: [0, 0])
    for r in rows:
        per_task[r["task_id"]][0] += 1
        per_task[r["task_id"]][1] += r["score"] == 1.0
    samples = min(n for n, _ in per_task.values())
    passes = {k: sum(1 - math.comb(n - c, k) / math.comb(n, k) for n, c in per_task.values()) / len(per_task)
              for k in (1, 2, 4) if k <= samples}  # fmt: skip
    return {"rows": rows, "episodes": len(rows), "successes": sum(r["score"] == 1.0 for r in rows), "pass": passes}


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def test_the_report_shows_the_runs_numbers_and_opens_episodes(runs, tmp_path):
    noisy, ref = by_hand(runs / "noisy.jsonl"), by_hand(runs / "reference.jsonl")
    assert 0 < noisy["successes"] < noisy["episodes"]  # mixed outcomes, or the test shows nothing
    report = tmp_path / "report.html"
    made = build([runs / "noisy.jsonl", runs / "reference.jsonl"], report, by="level")
    assert made["bound"]["embedded"] == made["bound"]["episodes"] == noisy["episodes"] + ref["episodes"]
    page_text = report.read_text()
    assert "cdn" not in page_text.lower().split("<script>", 1)[0] and 'src="http' not in page_text
    with Page(report) as page:
        page.open()
        seen = page.js("""() => ({
            cards: [...document.querySelectorAll('.card .big')].map(e => e.textContent),
            cardText: [...document.querySelectorAll('.card')].map(e => e.innerText),
            count: document.getElementById('count').textContent,
            rows: document.querySelectorAll('#episodes tbody tr').length,
            charts: document.querySelectorAll('.chart .main-svg').length,
            comparison: document.getElementById('comparison-table').innerText,
            groups: document.querySelectorAll('#groups-table tbody tr').length,
        })""")
        total = noisy["episodes"] + ref["episodes"]
        assert seen["cards"] == [pct(noisy["successes"] / noisy["episodes"]), pct(ref["successes"] / ref["episodes"])]
        for k, v in noisy["pass"].items():
            assert f"pass@{k}\n{pct(v)}" in seen["cardText"][0] or f"pass@{k}\t{pct(v)}" in seen["cardText"][0], (
                k, v, seen["cardText"][0])  # fmt: skip
        assert seen["count"].startswith(f"{total} of {total} episodes match")
        assert seen["rows"] == min(100, total) and seen["charts"] >= 6
        assert "reference.jsonl" in seen["comparison"] and seen["groups"] == 12
        # Filters change the list.
        failures = noisy["episodes"] - noisy["successes"] + ref["episodes"] - ref["successes"]
        count = page.js("""() => { const s = document.getElementById('f-outcome'); s.value = 'failure';
            s.dispatchEvent(new Event('change')); return {n: window.aworldReport.filtered(),
            rows: document.querySelectorAll('#episodes tbody tr').length}; }""")  # fmt: skip
        assert count == {"n": failures, "rows": min(100, failures)}
        task = noisy["rows"][0]["task_id"]
        count = page.js(f"""() => {{ document.getElementById('f-outcome').value = '';
            const t = document.getElementById('f-task'); t.value = {json.dumps(task)};
            t.dispatchEvent(new Event('input')); return window.aworldReport.filtered(); }}""")  # fmt: skip
        assert count == sum(r["task_id"] == task for r in noisy["rows"] + ref["rows"])
        # An episode opens (a click on its row) with its tool calls, thinking and results.
        i = next(i for i, r in enumerate(noisy["rows"]) if r["turns"] and r["turns"][0]["tool_calls"])
        calls = sum(len(t["tool_calls"]) for t in noisy["rows"][i]["turns"])
        opened = page.js(f"""() => {{ document.getElementById('f-task').value = '';
            document.getElementById('f-task').dispatchEvent(new Event('input'));
            document.querySelector('#episodes tbody tr[data-i="{i}"]').click();
            return {{title: document.getElementById('detail-title').textContent,
                     calls: [...document.querySelectorAll('#transcript .call b')].map(e => e.textContent),
                     results: document.querySelectorAll('#transcript .result.tool').length,
                     thinking: document.querySelectorAll('#transcript details.thinking').length,
                     turns: document.querySelectorAll('#transcript .turn[data-turn]').length}}; }}""")  # fmt: skip
        record = noisy["rows"][i]
        assert opened["title"] == f"Episode #{i}: {record['task_id']} (sample {record['sample']})"
        assert opened["calls"] == [f"call {c['name']}" for t in record["turns"] for c in t["tool_calls"]]
        assert len(opened["calls"]) == calls and opened["results"] == calls
        assert opened["turns"] == record["num_turns"] and opened["thinking"] >= 1
        # The GRPO group: its G samples side by side with their rewards.
        group = page.js("""() => { document.getElementById('tab-group').click();
            return [...document.querySelectorAll('#group-view .sample .meta')].map(e => e.textContent); }""")
        siblings = sorted((r for r in noisy["rows"] if r["task_id"] == record["task_id"]), key=lambda r: r["sample"])
        assert group == [f"reward {r['reward']:.3f}, {r['num_turns']} turns, {r['termination']}" for r in siblings]
        errors, console = page.console_errors()
        assert errors == 0, console
        shot = page.screenshot(tmp_path / "report.png")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_browser_screenshots_of_a_run_are_shown(tmp_path):
    out = tmp_path / "browser.jsonl"
    collect("AWorld/Browser-v0", "reference", episodes=2, concurrency=1, sink=out, progress=False,
            screenshots=screenshots_folder(out), env_kwargs={"render_mode": "rgb_array"})  # fmt: skip
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    shots = sum(bool(t.get("screenshot")) for r in rows for t in r["turns"]) + sum(
        bool(r.get("screenshot")) for r in rows
    )
    assert shots >= 2
    build([out], tmp_path / "browser.html")
    with Page(tmp_path / "browser.html") as page:
        page.open("#episode-0")
        images = page.js("""() => [...document.querySelectorAll('#transcript img.shot')].map(
            i => ({data: i.src.startsWith('data:image/png;base64,'), width: i.naturalWidth}))""")
        want = sum(bool(t.get("screenshot")) for t in rows[0]["turns"]) + bool(rows[0].get("screenshot"))
        assert len(images) == want and all(im["data"] and im["width"] > 100 for im in images), images
        assert page.console_errors()[0] == 0


class Flaky(CodeReferencePolicy):
    """The reference solution for HumanEval/n with n % 3 == 0; n % 3 == 1 only ever tests (the turn limit ends it);
    n % 3 == 2 fails in the policy on its second turn (policy_error)."""

    name = "flaky"

    def decide(self, env):
        n = int(str(env.task.id).rsplit("/", 1)[1])
        if n % 3 == 1:
            return '<tool_call>\n{"name": "run_python", "arguments": {"code": "print(1)"}}\n</tool_call>'
        if n % 3 == 2 and env.turn == 1:
            raise PolicyError("the model endpoint went away")
        return super().decide(env)


def test_charts_name_terminations_order_tasks_naturally_and_keep_titles_clear(tmp_path):
    paths = [tmp_path / "reference.jsonl", tmp_path / "flaky.jsonl"]
    collect("AWorld/Code-v0", "reference", episodes=12, concurrency=4, sink=paths[0], progress=False)
    collect("AWorld/Code-v0", Flaky(), episodes=24, group_size=2, concurrency=4, sink=paths[1], progress=False,
            env_kwargs={"max_episode_steps": 3})  # fmt: skip
    rows = [[json.loads(line) for line in p.read_text().splitlines()] for p in paths]
    ids = [f"HumanEval/{n}" for n in range(12)]  # as text, HumanEval/10 and /11 would come before /2
    assert sorted({r["task_id"] for r in rows[0]}, key=natural_key) == ids
    counts = [Counter(r["termination"] for r in run) for run in rows]
    assert counts[1] == {"answer": 8, "turn_limit": 8, "policy_error": 8}, counts
    total = counts[0] + counts[1]
    kinds = sorted(total, key=lambda k: (-total[k], k))  # most episodes first
    build(paths, tmp_path / "code.html")
    with Page(tmp_path / "code.html") as page:
        page.open()
        seen = page.js("""() => {
            const charts = [...document.querySelectorAll('.chart')];
            const chart = t => charts.find(c => c.dataset.title.startsWith(t));
            const ticks = c => [...c.querySelectorAll('.xtick text')].map(e => e.textContent);
            const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
            const terms = chart('Terminations');
            return {
                termTicks: ticks(terms), termBars: terms.data.map(t => ({name: t.name, x: t.x, y: t.y})),
                barTexts: [...terms.querySelectorAll('text.bartext')].map(e => e.textContent),
                taskTicks: ticks(chart('Success rate by task')),
                groups: [...document.querySelectorAll('#groups-table tbody tr')].map(r => r.dataset.task),
                listed: [...document.querySelectorAll('#episodes tbody tr')].map(
                    r => [...r.children].slice(1, 4).map(td => td.textContent)),
                boxes: charts.map(c => ({title: c.dataset.title, text: c.querySelector('.gtitle').textContent,
                    gtitle: box(c.querySelector('.gtitle')), modebar: box(c.querySelector('.modebar'))})),
            };
        }""")  # fmt: skip
        # Terminations: the kinds on the axis, one bar per run, the counts on the bars.
        assert seen["termTicks"] == kinds, seen["termTicks"]
        assert seen["termBars"] == [{"name": p.name, "x": kinds, "y": [c[k] for k in kinds]}
                                    for p, c in zip(paths, counts, strict=True)]  # fmt: skip
        assert sorted(seen["barTexts"]) == sorted(str(c[k]) for c in counts for k in kinds if c[k])
        # Task ids in natural order: the chart (run 0 solves all, so no task is harder), the groups, the list.
        assert seen["taskTicks"] == ids
        assert seen["groups"] == ids  # no group has mixed outcomes, so none goes first
        want = [["reference.jsonl", t, "0"] for t in ids] + [["flaky.jsonl", t, str(s)] for t in ids for s in (0, 1)]
        assert seen["listed"] == want
        # The page's own natural order is stats.natural_key's.
        mixed = ["a10b1", "task-7", "HumanEval/100", "2", "a2b10", "HumanEval/9", "task-07", "10", "HumanEval/10",
                 "1", "a2b3", "HumanEval/0", "task-8", "HumanEval/11", "HumanEval/2"]  # fmt: skip
        assert page.js(f"() => {json.dumps(mixed)}.sort(window.aworldReport.natural)") == sorted(mixed, key=natural_key)
        # Every chart's title is drawn and clear of the mode bar (which shows always where hover is unavailable).
        assert len(seen["boxes"]) == 6, seen["boxes"]  # by task, terminations, pass@k, turns, reward, parse health
        for b in seen["boxes"]:
            (l1, t1, r1, b1), (l2, t2, r2, b2) = b["gtitle"], b["modebar"]
            assert b["text"] == b["title"] and r1 > l1 and b1 > t1 and r2 > l2 and b2 > t2, b
            assert r1 <= l2 or r2 <= l1 or b1 <= t2 or b2 <= t1, b  # the boxes do not intersect
        assert page.console_errors()[0] == 0
        page.call("browser_resize", width=1400, height=2600)
        page.screenshot(tmp_path / "code.png")
