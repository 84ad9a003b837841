"""The report treats records as hostile (issue 44): a record cannot make it read a file (screenshots only from the
run's own folder, regular image files, bounded), NaN and infinite rewards are shown and the JSON stays valid, a
transcript over --max-mb is cut with a marker, malformed records are skipped and counted (terminal, JSON, HTML),
control bytes never reach the terminal raw nor end the page's <script> elements, and Trajectory.from_record accepts
any key."""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path

import pytest

from aworld_gym.cli import main
from aworld_gym.core.trajectory import Source, Trajectory
from aworld_gym.report.html import HERE, build
from aworld_gym.report.stats import NOT_A_RECORD
from aworld_gym.rollout.sinks.screenshots import screenshots_folder

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def record(task: str = "t", **kw) -> dict:
    rec = {"episode_id": task, "env_id": "AWorld/GAIA-v0", "task_id": task, "sample": 0, "policy": "p",
           "score": 1.0, "reward": 1.0, "reward_components": {"task": 1.0}, "num_turns": 1, "termination": "answer",
           "status": "ok", "task_meta": {"level": 1}, "answer": "42", "prompt": "q?",
           "turns": [{"turn": 1, "action": "<answer>42</answer>", "tool_results": [], "reward": 1.0}],
           "timings": {"total_s": 1.0}}  # fmt: skip
    rec.update(kw)
    return rec


def write(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def strict(text: str):
    """JSON as a browser's JSON.parse reads it: NaN and Infinity are not JSON."""

    def refuse(name: str):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def page_data(page: str) -> dict:
    return strict(re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1))


def transcript_of(page: str, i: int) -> dict:
    return strict(re.search(rf'<script type="application/json" id="t{i}">(.*?)</script>', page, re.S).group(1))


def test_screenshots_only_from_the_runs_own_folder_and_only_regular_images(tmp_path):
    run = tmp_path / "run.jsonl"
    shots = screenshots_folder(run) / "ep"
    shots.mkdir(parents=True)
    (shots / "001.png").write_bytes(PNG)
    secret = tmp_path / "id_rsa"  # outside the run's folder, even with an image's first bytes
    secret.write_bytes(PNG + b"SECRET-MARKER-0123456789")
    (shots / "link.png").symlink_to(secret)
    (shots / "notes.png").write_bytes(b"SECRET-MARKER-0123456789 not an image")
    (shots / "zero.png").symlink_to("/dev/zero")
    os.mkfifo(shots / "fifo.png")  # a FIFO nobody writes: opening it for reading must not block
    names = [str(shots / "001.png"), str(secret), str(shots / "link.png"), str(shots / ".." / ".." / "id_rsa"),
             str(shots / "notes.png"), "/dev/zero", str(shots / "zero.png"), str(shots / "fifo.png"), "/etc/passwd",
             "a\x00b"]  # fmt: skip
    records = [record(f"t{i}", screenshot=name) for i, name in enumerate(names)]
    made = build([write(run, records)], tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert transcript_of(page, 0)["screenshot"] == "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert [transcript_of(page, i)["screenshot"] for i in range(1, len(names))] == [None] * (len(names) - 1)
    assert made["bound"]["images_refused"] == len(names) - 1 and made["bound"]["images_linked"] == 0
    secret_b64 = base64.b64encode(secret.read_bytes()).decode()
    assert secret_b64 not in page and "SECRET-MARKER" not in page
    assert base64.b64encode(Path("/etc/passwd").read_bytes()).decode() not in page


def test_nan_and_infinite_rewards_are_shown_and_every_json_stays_valid(tmp_path, capsys):
    run = write(tmp_path / "run.jsonl", [record("a", reward=float("nan")), record("b", reward=float("inf")),
                                         record("c", reward=float("-inf"), score=float("nan"))])  # fmt: skip
    assert main(["report", str(run), "--json", str(tmp_path / "s.json"), "--html", str(tmp_path / "r.html")]) == 0
    doc = strict((tmp_path / "s.json").read_text())
    assert doc["runs"][0]["reward_mean"] == "NaN" and doc["runs"][0]["episodes"] == 3
    data = page_data((tmp_path / "r.html").read_text(encoding="utf-8"))
    assert [e["reward"] for e in data["episodes"]] == ["NaN", "inf", "-inf"]
    assert data["episodes"][2]["score"] == "NaN" and data["runs"][0]["reward_mean"] == "NaN"
    assert re.search(r"(?m)^mean reward +NaN +$", capsys.readouterr().out)  # the table shows it as text


def test_a_transcript_over_max_mb_is_cut_with_a_marker(tmp_path):
    turns = [{"turn": i, "action": f"turn {i} " + "x" * 3000, "tool_results": []} for i in range(1, 61)]
    run = write(tmp_path / "run.jsonl", [record("big", turns=turns, num_turns=60)])
    made = build([run], tmp_path / "r.html", max_mb=0.05)  # ~52 kB for a ~190 kB transcript
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert made["bound"]["cut"] == 1 and made["bound"]["embedded"] == 1
    t = transcript_of(page, 0)
    assert 10 < len(t["turns"]) < 20 and [x["turn"] for x in t["turns"]] == list(range(1, len(t["turns"]) + 1))
    assert t["cut"].startswith(f"[... {60 - len(t['turns'])} of this episode's 60 turns not embedded")
    blob = re.search(r'<script type="application/json" id="t0">(.*?)</script>', page, re.S).group(1)
    assert len(blob.encode()) <= 0.05 * 2**20


def test_malformed_records_are_skipped_and_counted_everywhere(tmp_path, capsys):
    bad = [
        record(reward="a lot"),
        record(score=[1]),
        record(turns={"0": {}}),
        record(turns=["not a turn"]),
        record(turns=[{"tool_results": {"name": "x"}}]),
        record(turns=[{"tool_calls": [1, 2]}]),
        record(status="great"),
        {k: v for k, v in record().items() if k != "task_id"},
        record(task_id={"nested": 1}),
        record(reward_components=["task", 1.0]),
        record(timings={"total_s": "soon"}),
        record(num_turns="three"),
        record(task_meta="level 1"),
        record(reward=10**400),  # past a float's range
        record(turns=[{"tool_results": [{"name": "t", "latency_s": "slow"}]}]),
    ]
    run = write(tmp_path / "run.jsonl", [record("good-1"), *bad, record("good-2")])
    junk = ["null", "[1, 2]", "7", "garbage {", '{"task_id": "deep", "answer": ' + "[" * 10_000 + "]" * 10_000 + "}"]
    with run.open("a") as f:
        f.write("\n".join(junk) + "\n")  # lines that are no record at all: skipped by iter_records, counted here
    bad += junk
    argv = ["report", str(run), "--json", str(tmp_path / "s.json"), "--html", str(tmp_path / "r.html")]
    assert main([*argv, "--by", "level"]) == 0
    out = capsys.readouterr().out
    assert f"skipped {len(bad)} malformed records" in out
    doc = strict((tmp_path / "s.json").read_text())
    assert doc["runs"][0]["episodes"] == 2 and doc["runs"][0]["malformed"]["records"] == len(bad)
    assert doc["runs"][0]["malformed"]["reasons"]["status unknown"] == 1
    assert doc["runs"][0]["malformed"]["reasons"][NOT_A_RECORD] == len(junk)
    data = page_data((tmp_path / "r.html").read_text(encoding="utf-8"))
    assert data["bound"]["malformed"] == len(bad) and [e["task"] for e in data["episodes"]] == ["good-1", "good-2"]


def test_control_bytes_are_escaped_on_the_terminal_and_in_the_page(tmp_path, capsys):
    hostile = record("t\x1b[2J", env_id="\x1b]0;pwned\x07", policy="p\r\x1b[31mred\u202e\udc80",
                     termination="answer\x1b[8m\x9b", answer="</script><script>alert(1)</script>\ud800",
                     turns=[{"turn": 1, "action": "</SCRIPT >\x1b[1m", "reward": 1.0,
                             "tool_results": [{"name": "tool\x07\x1b]8;;http://x\x07", "error": "e\x1b[5m",
                                               "latency_s": 0.1, "text": "</script>"}]}])  # fmt: skip
    run = write(tmp_path / "run.jsonl", [hostile])
    assert main(["report", str(run), "--html", str(tmp_path / "r.html")]) == 0
    out = capsys.readouterr().out
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e\ud800-\udfff]", out)
    assert "\\x1b]0;pwned\\x07" in out  # shown, escaped
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    data = "".join(re.findall(r'<script type="application/json" id="\w+">(.*?)</script>', page, re.S))
    assert "alert(1)" in data and not re.search("[\x00-\x1f\x7f-\x9f\u202e\ud800-\udfff]", data)
    # every <script> element the page opens is one the report wrote: 2 bundles, the data and 1 transcript
    assert len(re.findall(r"(?i)<script", page)) == len(re.findall(r"(?i)</script", page)) == 4
    t = transcript_of(page, 0)
    assert t["answer"] == "</script><script>alert(1)</script>\ud800" and t["turns"][0]["action"].startswith("</SCRIPT")
    viewer = (HERE / "viewer.js").read_text()
    assert "innerHTML" not in viewer and "insertAdjacentHTML" not in viewer and "document.write" not in viewer


def test_from_record_accepts_any_key_and_keeps_the_fields_its_own(tmp_path):
    traj = Trajectory("AWorld/MCP-v0", task_id="t")
    traj.ledger.add({"task": 1.0}, source=Source.OUTER)
    rec = traj.to_record()
    hostile = {**rec, "extra": {"reward": 99.0, "task_id": "other"}, "ledger": "not a ledger", "tokens": "junk",
               "cut_sampled": {"x": 1}}  # fmt: skip
    back = Trajectory.from_record(hostile)
    assert back.reward == 1.0 and back.task_id == "t" and back.tokens is None
    again = back.to_record()
    assert again["reward"] == 1.0 and again["task_id"] == "t"
    assert again["extra"] == {"reward": 99.0, "task_id": "other"} and again["ledger"] == "not a ledger"
    assert again["tokens"] == "junk" and again["cut_sampled"] == {"x": 1}
    assert Trajectory.from_record(again).to_record() == again


@pytest.mark.slow
def test_the_viewer_shows_hostile_records_as_text_in_a_real_browser(tmp_path):
    from tests.report_page import Page

    turns = [{"turn": i, "action": "y" * 3000, "tool_results": []} for i in range(1, 41)]
    attack = '<img src=x onerror="document.title=\'pwned\'"></script><script>document.title="pwned"</script>'
    records = [record("a", sample=0, reward=float("nan")), record("a", sample=1, reward=float("inf")),
               record("b", answer=attack, turns=turns, num_turns=40), record(reward="junk")]  # fmt: skip
    made = build([write(tmp_path / "run.jsonl", records)], tmp_path / "r.html", max_mb=0.05)
    assert made["bound"]["cut"] == 1 and made["bound"]["malformed"] == 1
    with Page(tmp_path / "r.html") as page:
        page.open("#episode-2")
        seen = page.js("""() => ({
            ready: !!window.aworldReport, title: document.title,
            rewards: [...document.querySelectorAll('#episodes tbody tr')].map(r => r.children[5].textContent),
            images: document.querySelectorAll('main img').length,
            answer: document.querySelector('#transcript').innerText,
            cut: (document.querySelector('#transcript .cut') || {}).textContent,
            note: document.getElementById('bound-note').textContent})""")
        assert seen["ready"] and seen["title"] != "pwned" and seen["images"] == 0
        assert seen["rewards"] == ["NaN", "inf", "1.000"]
        assert attack in seen["answer"] and "turns not embedded" in seen["cut"]
        assert "1 malformed record skipped" in seen["note"] and "1 transcript over the budget is cut" in seen["note"]
        assert page.console_errors()[0] == 0
