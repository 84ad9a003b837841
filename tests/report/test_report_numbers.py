"""The report's numbers against hand-computed ones: pass@k (the unbiased estimator), success, rewards per
component, terminations, tool calls and errors, latency quantiles, groups by level, the comparison of runs, and the
same summary from JSONL and Parquet."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aworld_gym.core.pass_at_k import pass_at_k
from aworld_gym.report.stats import compare, natural_key, quantile, summarize, summarize_records
from aworld_gym.rollout.sinks import open_sink


def test_pass_at_k_matches_the_combinatorial_definition():
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_quantiles_interpolate_like_numpy():
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == pytest.approx(2.5)
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.9) == pytest.approx(3.7)
    assert quantile([5.0], 0.9) == 5.0 and quantile([], 0.5) is None


NATURAL = ["1", "2", "10", "HumanEval/0", "HumanEval/2", "HumanEval/9", "HumanEval/10", "HumanEval/11",
           "HumanEval/100", "a2b3", "a2b10", "a10b1", "task-07", "task-7", "task-8"]  # fmt: skip


def test_task_ids_sort_naturally():
    assert sorted(reversed(NATURAL), key=natural_key) == NATURAL
    assert sorted(NATURAL) != NATURAL  # as text, HumanEval/10 comes before HumanEval/2
    ids = ["HumanEval/10", "HumanEval/2", "HumanEval/1", "HumanEval/11"]
    s = summarize_records([record(t, 0, True, level) for t, level in zip(ids, ["10", "2", "1", "2"], strict=True)],
                          by="level")  # fmt: skip
    assert list(s["per_task"]) == ["HumanEval/1", "HumanEval/2", "HumanEval/10", "HumanEval/11"]
    assert list(s["groups"]) == ["1", "2", "10"]


def record(task, sample, ok, level, turns=1, tool_errors=(), termination="answer", total_s=1.0):
    results = [{"name": "search", "error": None, "latency_s": 0.1, "text": "hit"}]
    results += [{"name": "read_file", "error": kind, "latency_s": 0.3, "text": "Error: no"} for kind in tool_errors]
    return {"episode_id": f"{task}-{sample}", "env_id": "AWorld/GAIA-v0", "task_id": task, "sample": sample,
            "policy": "p", "score": 1.0 if ok else 0.0, "reward": 1.0 if ok else -0.1,
            "reward_components": {"task": 1.0 if ok else 0.0, "format": -0.1 if not ok else 0.0},
            "num_turns": turns, "termination": termination, "task_meta": {"level": level},
            "turns": [{"turn": 1, "action": "<think>hm</think> x", "tool_results": results}],
            "timings": {"reset_s": 0.5, "policy_s": total_s / 2, "env_s": total_s / 4, "total_s": total_s}}  # fmt: skip


RUN = [
    # task a (level 1): 1 of 4 samples succeeds; task b (level 2): 3 of 4; task c (level 2): 0 of 4
    record("a", 0, True, 1, total_s=1.0), record("a", 1, False, 1, 2, ["tool_error"], total_s=2.0),
    record("a", 2, False, 1, total_s=3.0), record("a", 3, False, 1, 3, ["timeout", "tool_error"], "turn_limit", 4.0),
    record("b", 0, True, 2, total_s=5.0), record("b", 1, True, 2, total_s=6.0), record("b", 2, True, 2, total_s=7.0),
    record("b", 3, False, 2, termination="policy_error", total_s=8.0),
    record("c", 0, False, 2), record("c", 1, False, 2), record("c", 2, False, 2), record("c", 3, False, 2),
]  # fmt: skip


def test_summary_numbers_are_the_hand_computed_ones():
    s = summarize_records(RUN, by="level", name="run")
    assert s["episodes"] == 12 and s["tasks"] == 3 and s["successes"] == 4
    assert s["success_rate"] == pytest.approx(4 / 12)
    assert s["positive_score_rate"] == pytest.approx(4 / 12)  # scores are 1/0 here
    partial = summarize_records([dict(RUN[0], score=0.5), dict(RUN[1], score=-1.0), RUN[2]], name="miniwob")
    assert (partial["success_rate"], partial["positive_score_rate"]) == (0.0, pytest.approx(1 / 3))
    # pass@1 = mean of c/n = (1/4 + 3/4 + 0) / 3; pass@2 = (0.5 + 1 + 0) / 3; pass@4 = (1 + 1 + 0) / 3
    assert s["pass_at_k"]["pass@1"]["value"] == pytest.approx((0.25 + 0.75 + 0) / 3)
    assert s["pass_at_k"]["pass@2"]["value"] == pytest.approx((0.5 + 1.0 + 0) / 3)
    assert s["pass_at_k"]["pass@4"]["value"] == pytest.approx(2 / 3)
    assert set(s["pass_at_k"]) == {"pass@1", "pass@2", "pass@4"}
    assert s["reward_mean"] == pytest.approx((4 * 1.0 - 8 * 0.1) / 12)
    assert s["reward_components"]["task"]["mean"] == pytest.approx(4 / 12)
    assert s["reward_components"]["format"]["mean"] == pytest.approx(-0.8 / 12)
    assert s["terminations"] == {"answer": 10, "turn_limit": 1, "policy_error": 1}
    assert s["turns"]["mean"] == pytest.approx((10 + 2 + 3) / 12) and s["turns"]["max"] == 3
    tools = s["tools"]
    assert tools["search"]["calls"] == 12 and tools["search"]["errors"] == 0
    assert tools["read_file"]["calls"] == 3 and tools["read_file"]["errors"] == 3
    assert tools["read_file"]["error_kinds"] == {"timeout": 1, "tool_error": 2}
    totals = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 1.0, 1.0, 1.0, 1.0]
    assert s["latency"]["total_s"]["p50"] == pytest.approx(2.5)  # sorted: 1,1,1,1,1,2,3,4,5,6,7,8 -> (2+3)/2
    assert s["latency"]["total_s"]["p90"] == pytest.approx(
        sorted(totals)[9] + 0.9 * (sorted(totals)[10] - sorted(totals)[9])
    )
    assert s["latency"]["reset_s"]["p50"] == 0.5
    g1, g2 = s["groups"]["1"], s["groups"]["2"]
    assert g1["episodes"] == 4 and g1["success_rate"] == pytest.approx(0.25)
    assert g1["pass_at_k"]["pass@4"]["value"] == 1.0
    assert g2["episodes"] == 8 and g2["success_rate"] == pytest.approx(3 / 8)
    assert g2["pass_at_k"]["pass@2"]["value"] == pytest.approx((1.0 + 0.0) / 2)


def test_jsonl_and_parquet_give_the_same_summary(tmp_path):
    for name in ("run.jsonl", "run.parquet"):
        sink = open_sink(tmp_path / name)
        for r in RUN:
            sink.write(r)
        sink.close()
    a = summarize(tmp_path / "run.jsonl", by="level")
    b = summarize(tmp_path / "run.parquet", by="level")
    assert {k: v for k, v in a.items() if k != "run"} == {k: v for k, v in b.items() if k != "run"}


def test_comparison_on_common_tasks():
    better = [dict(r, score=1.0, task_id=r["task_id"]) for r in RUN if r["task_id"] != "b"]
    better.append(record("d", 0, True, 3))
    c = compare([summarize_records(RUN, name="base"), summarize_records(better, name="new")])
    assert c["common_tasks"] == 2  # a and c
    base, new = c["runs"]
    assert base["success_rate"] == pytest.approx(1 / 8) and new["success_rate"] == 1.0
    assert new["delta"] == pytest.approx(1.0 - 1 / 8)
    assert (new["solved"], new["gained"], new["lost"]) == (2, 1, 0)  # c is newly solved


def test_cli_report_tables_json_and_a_clear_error_for_a_missing_file(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RUN) + '{"torn": ')
    cli = [str(Path(sys.executable).parent / "aworld-gym"), "report"]
    out = subprocess.run([*cli, str(path), "--by", "level", "--json", str(tmp_path / "r.json")],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    # The rows themselves (the columns' widths follow the longest label, here "reward: format").
    assert re.search(r"^success rate +33\.3% +4/12 \(score 1\)$", out.stdout, re.M), out.stdout
    assert re.search(r"^pass@4 +66\.7% +over 3 tasks$", out.stdout, re.M), out.stdout
    assert re.search(r"^by level$", out.stdout, re.M), out.stdout
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["runs"][0]["episodes"] == 12  # the torn last line is skipped
    bad = subprocess.run([*cli, str(tmp_path / "nope.jsonl")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no trajectory file" in bad.stderr and "Traceback" not in bad.stderr
