"""Re-scoring a saved run (issue 49, item 5): the new score beside the old, reward and status following it, groups
and turns kept, on JSONL and Parquet, with a registered scorer, a module:function judge and from the command line."""

from __future__ import annotations

import json
import sys

import pytest

from aworld_gym.base.errors import ConfigError
from aworld_gym.cli import main
from aworld_gym.mcp.demo_server import build_server
from aworld_gym.report.rescore import rescore
from aworld_gym.rollout.collect import collect
from aworld_gym.rollout.policies import ScriptedPolicy
from aworld_gym.rollout.sinks import iter_records
from tests.helpers import TASKS

ANSWERS = {"add": "The sum is 5", "mul": "42", "echo": "bye"}  # exact: 0, 1, 0; contains: 1, 1, 0


class Answers(ScriptedPolicy):
    def decide(self, env):
        return f"<answer>{ANSWERS[env.task.id]}</answer>"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rescore")
    out = folder / "run.jsonl"
    collect("AWorld/MCP-v0", Answers(), episodes=6, group_size=2, concurrency=2, sink=str(out), progress=False,
            env_kwargs={"mcp_config": {"mcpServers": {"demo": build_server}}, "tasks": TASKS})  # fmt: skip
    (folder / "tasks.jsonl").write_text("\n".join(json.dumps(t) for t in TASKS))
    return out


def _by_episode(path) -> dict:
    return {r["episode_id"]: r for r in iter_records(path)}


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_run_scored_again_keeps_both_scores_and_follows_the_new_one(run, tmp_path, suffix):
    pytest.importorskip("pyarrow") if suffix == ".parquet" else None
    out = tmp_path / f"contains{suffix}"
    summary = rescore(run, out, "contains", run.parent / "tasks.jsonl")
    assert (summary.records, summary.rescored, summary.successes_before, summary.successes_after) == (6, 6, 2, 4)
    old, new = _by_episode(run), _by_episode(out)
    assert old.keys() == new.keys()
    for eid, before in old.items():
        after = new[eid]
        task = before["task_id"]
        expected = {"add": 1.0, "mul": 1.0, "echo": 0.0}[task]
        assert after["scores"] == {"original": before["score"], "contains": expected} and after["score"] == expected
        assert after["scorer"] == "contains" and after["status"] == ("ok" if expected else "failed")
        delta = expected - before["score"]
        assert after["reward"] == pytest.approx(before["reward"] + delta)
        assert after["reward_components"]["task"] == expected
        assert after["turns"][-1]["reward"] == pytest.approx(before["turns"][-1]["reward"] + delta)
        for key in ("group", "sample", "seed", "task_id", "answer", "termination", "num_turns"):
            assert after[key] == before[key]


def test_a_judge_from_a_module_is_added_beside_and_void_or_unanswered_episodes_are_left_alone(run, tmp_path,
                                                                                            monkeypatch):  # fmt: skip
    (tmp_path / "my_judge.py").write_text(
        "def judge(answer, task):\n    return 0.5 if task.answer in answer else 0.0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_judge", None)
    first = tmp_path / "contains.jsonl"
    rescore(run, first, "contains", run.parent / "tasks.jsonl")
    records = list(iter_records(first))
    void = {**records[0], "episode_id": "v", "status": "void", "termination": "env_crash", "answer": None,
            "seed": 990, "sample": 90, "group": "90"}  # fmt: skip
    unknown = {**records[1], "episode_id": "u", "task_id": "not-a-task", "seed": 991, "sample": 91, "group": "91"}
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join(json.dumps(r) for r in [*records, void, unknown]))
    second = tmp_path / "judged.jsonl"
    summary = rescore(mixed, second, "my_judge:judge", run.parent / "tasks.jsonl")
    assert (summary.rescored, summary.unscored, summary.missing_task) == (6, 1, ["not-a-task"])
    judged = _by_episode(second)
    add = next(r for r in judged.values() if r["task_id"] == "add")
    assert add["scores"] == {"original": 0.0, "contains": 1.0, "my_judge:judge": 0.5} and add["score"] == 0.5
    assert add["status"] == "failed"  # a score below 1 is not a success
    assert judged["v"]["scores"]["my_judge:judge"] is None and judged["v"]["status"] == "void"
    assert judged["v"]["score"] == void["score"] and judged["u"]["score"] == unknown["score"]
    with pytest.raises(ConfigError, match="cannot be loaded"):
        rescore(run, tmp_path / "x.jsonl", "my_judge:nothing", run.parent / "tasks.jsonl")
    with pytest.raises(ConfigError, match="another file"):
        rescore(run, run, "contains", run.parent / "tasks.jsonl")


def test_rescore_from_the_command_line_and_the_report_compares_the_two(run, tmp_path, capsys):
    out = tmp_path / "contains.jsonl"
    argv = ["rescore", str(run), "--scorer", "contains", "--tasks", str(run.parent / "tasks.jsonl"), "--out", str(out)]
    assert main(argv) == 0
    assert "successes 2 -> 4" in capsys.readouterr().out
    assert main(["rescore", str(run), "--scorer", "contains", "--out", str(out)]) == 2  # no tasks: said in one line
    assert main(["report", str(run), str(out)]) == 0
    text = capsys.readouterr().out
    assert "33.3%" in text and "66.7%" in text  # the two runs side by side: 2 of 6 solved, then 4 of 6
