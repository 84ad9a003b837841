"""The in-process collector: concurrency, GRPO groups, sinks, resume, and faults recorded as data."""

import asyncio
import functools
import json
import subprocess
import sys
import time

import pytest

from aworld_gym.base.errors import last_line
from aworld_gym.core.trajectory import Source, TokenData, Trajectory
from aworld_gym.rollout.collect import collect, error_of, plan_jobs
from aworld_gym.rollout.policies.plan import PlanPolicy
from aworld_gym.rollout.sinks import JSONLSink, iter_records, open_sink
from tests.helpers import demo_env_kwargs

ENV = "AWorld/MCP-v0"


def test_plan_jobs_groups_and_samples():
    jobs = plan_jobs(n_tasks=3, episodes=10, group_size=4, seed=5, task_order="cycle")
    assert [(j.task_index, j.sample) for j in jobs] == [
        (0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3), (2, 0), (2, 1)
    ]  # fmt: skip
    assert [j.seed for j in jobs] == list(range(5, 15))
    again = plan_jobs(n_tasks=2, episodes=6, group_size=1, seed=0, task_order="cycle")
    assert [(j.task_index, j.sample) for j in again] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    sampled = plan_jobs(n_tasks=50, episodes=8, group_size=2, seed=1, task_order="sample")
    assert sampled == plan_jobs(n_tasks=50, episodes=8, group_size=2, seed=1, task_order="sample")
    assert all(a.task_index == b.task_index for a, b in zip(sampled[::2], sampled[1::2], strict=True))


class Meeting(PlanPolicy):
    """PlanPolicy whose first turn waits until ``n`` episodes are at their first turn at once (60 s at most, then no
    episode waits any more): shows concurrency without a clock."""

    def __init__(self, n: int, state: dict, latency_s: float = 0.0) -> None:
        super().__init__(latency_s)
        self.n, self.state = n, state

    async def aact(self, env, observation, info):
        if env.turn == 0 and not self.state["broken"]:
            self.state["arrived"] += 1
            deadline = time.monotonic() + 60
            while self.state["arrived"] < self.n and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            self.state["broken"] = self.state["arrived"] < self.n
        return await super().aact(env, observation, info)


def test_episodes_run_concurrently_not_in_lock_step(tmp_path):
    """16 episodes of 2 turns with 0.25 s per turn, all 16 at their first turn at once: sequential ones never meet."""
    state = {"arrived": 0, "broken": False}
    s = collect(ENV, functools.partial(Meeting, 16, state, latency_s=0.25), episodes=16, concurrency=16,
                env_kwargs=demo_env_kwargs(16), sink=tmp_path / "t.jsonl", progress=False)  # fmt: skip
    assert (s.recorded, s.successes, s.mean_turns) == (16, 16, 2.0)
    assert state == {"arrived": 16, "broken": False}, state


def test_group_size_runs_g_samples_of_one_task(tmp_path):
    out = tmp_path / "g.jsonl"
    s = collect(ENV, PlanPolicy, episodes=12, concurrency=5, group_size=4, env_kwargs=demo_env_kwargs(3),
                sink=out, progress=False)  # fmt: skip
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert s.recorded == 12 and len(rows) == 12
    groups: dict = {}
    for r in rows:
        groups.setdefault(r["task_id"], []).append(r["sample"])
    assert {k: sorted(v) for k, v in groups.items()} == {f"add-{i}": [0, 1, 2, 3] for i in range(3)}


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_resume_skips_finished_pairs_and_never_writes_twice(tmp_path, suffix):
    datasets = pytest.importorskip("datasets")
    out = tmp_path / f"r{suffix}"
    first = collect(ENV, PlanPolicy, episodes=5, concurrency=2, env_kwargs=demo_env_kwargs(4), sink=out, progress=False)
    assert first.recorded == 5
    second = collect(ENV, PlanPolicy, episodes=9, concurrency=3, env_kwargs=demo_env_kwargs(4), sink=out,
                     resume=True, progress=False)  # fmt: skip
    assert (second.recorded, second.skipped) == (4, 5)
    third = collect(ENV, PlanPolicy, episodes=9, concurrency=3, env_kwargs=demo_env_kwargs(4), sink=out,
                    resume=True, progress=False)  # fmt: skip
    assert (third.recorded, third.skipped) == (0, 9)
    kind = "json" if suffix == ".jsonl" else "parquet"
    ds = datasets.load_dataset(kind, data_files=str(out), split="train")
    keys = list(zip(ds["task_id"], ds["sample"], strict=True))
    assert len(keys) == 9 and len(set(keys)) == 9


def test_parquet_journal_survives_a_crash(tmp_path):
    out = tmp_path / "c.parquet"
    crash = (
        "import os, sys; from aworld_gym.rollout.sinks import ParquetSink; sink = ParquetSink(sys.argv[1]); "
        "sink.write({'task_id': 'a', 'sample': 0, 'reward': 1.0, 'turns': [{'action': 'x'}]}); os._exit(0)"
    )
    # the process dies after one episode: no close(); the journal holds the episode (and its lock died with it)
    subprocess.run([sys.executable, "-c", crash, str(out)], check=True, timeout=60)
    journal = out.with_name(out.name + ".partial.jsonl")
    assert journal.exists() and not out.exists()
    resumed = open_sink(out, resume=True)
    assert resumed.done_keys() == {("a", 0)}
    resumed.write({"task_id": "a", "sample": 0, "reward": 1.0})  # never twice
    resumed.write({"task_id": "b", "sample": 0, "reward": 0.0})
    resumed.close()
    import pyarrow.parquet as pq

    table = pq.read_table(out).to_pylist()
    assert sorted((r["task_id"], r["sample"]) for r in table) == [("a", 0), ("b", 0)]
    assert json.loads(next(r for r in table if r["task_id"] == "a")["turns"]) == [{"action": "x"}]
    assert not journal.exists() and not out.with_name("c.parquet.lock").exists()


def _full_record(**over):
    """A record with every kind of key ``to_record`` writes: token data, a loss weight of 0, a group, a screenshot,
    group hook fields and a key of the driver's (``cut_sampled``) that no column names."""
    traj = Trajectory("AWorld/MCP-v0", task_id="t", task_meta={"level": 2}, prompt="p", seed=3, sample=1, group="g0")
    traj.turns.append({"turn": 1, "action": "a", "reward": 0.0, "tool_calls": [{"name": "add", "arguments": {}}]})
    traj.ledger.add({"task": 0.0}, source=Source.OUTER)
    traj.end("env_crash", error="Traceback: boom")
    traj.tokens = TokenData([1, 2], [3, 4, 5], [-0.1, -0.2, 0.0], [1, 1, 0], model_turns=1, env_turns=1)
    traj.weight, traj.screenshot, traj.group_complete = 0.0, "shots/1.png", True
    traj.group_reward_components = {"rank": 0.5}
    traj.extra["cut_sampled"] = {"completion_ids": [7, 8], "finish_reason": "length"}
    return {**traj.to_record(), **over}


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_every_key_of_a_record_reads_back_from_either_format(tmp_path, suffix):
    full = _full_record()
    bare = Trajectory("AWorld/MCP-v0", task_id="u", sample=0).to_record()  # no tokens, prompt, screenshot, extra
    out = tmp_path / f"all{suffix}"
    sink = open_sink(out)
    sink.write(bare)  # first: Parquet's columns must not come from the first row only
    sink.write(full)
    sink.close()
    back = {r["task_id"]: r for r in iter_records(out)}
    assert back == {"t": json.loads(json.dumps(full)), "u": json.loads(json.dumps(bare))}
    assert back["t"]["weight"] == 0.0 and back["t"]["status"] == "void" and back["t"]["tokens"]["mask"] == [1, 1, 0]
    assert Trajectory.from_record(back["t"]).to_record() == back["t"]


def test_parquet_keeps_values_their_column_cannot_hold_and_a_key_named_like_its_extra_column(tmp_path):
    odd = {"task_id": "x", "sample": 0, "turns": [], "answer": 42, "seed": 2**70, "score": True, "reward": 1,
           "terminated": "yes", "extra_json": {"k": 1}, "cut_sampled": None}  # fmt: skip
    sink = open_sink(tmp_path / "odd.parquet")
    sink.write(odd)
    sink.close()
    (back,) = iter_records(tmp_path / "odd.parquet")
    assert {k: back[k] for k in odd} == odd  # 42 is not "42", a seed past int64 does not fail the file


def test_runs_read_together_with_datasets_whatever_their_null_columns(tmp_path):
    """Column types are fixed: a column null in a whole run (no token data, no cut replies, no groups) is not typed
    ``null`` in that file, which ``datasets`` could not read together with a file where it holds values."""
    datasets = pytest.importorskip("datasets")
    import pyarrow.parquet as pq

    files = []
    for name, record in (("bare", Trajectory("AWorld/MCP-v0", task_id="u").to_record()), ("full", _full_record())):
        sink = open_sink(tmp_path / f"{name}.parquet")
        sink.write(record)
        sink.close()
        files.append(str(sink.path))
    assert pq.read_schema(files[0]) == pq.read_schema(files[1])
    ds = datasets.load_dataset("parquet", data_files=files, split="train")
    assert sorted(ds["task_id"]) == ["t", "u"] and sorted(ds["weight"]) == [0.0, 1.0]


def test_a_parquet_file_from_before_the_new_columns_still_reads_and_resumes(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    old_columns = ("episode_id", "env_id", "task_id", "seed", "sample", "policy", "started_at", "num_turns",
                   "reward", "score", "answer", "terminated", "truncated", "termination", "error", "prompt",
                   "turns", "reward_components", "timings", "metrics", "reward_errors", "task_meta")  # fmt: skip
    old = {k: None for k in old_columns} | {"task_id": "old", "sample": 0, "termination": "env_crash",
                                                "terminated": False, "turns": "[]", "reward": 0.0}  # fmt: skip
    out = tmp_path / "old.parquet"
    pq.write_table(pa.Table.from_pylist([old]), out)
    sink = open_sink(out, resume=True)
    assert sink.done_keys() == {("old", 0)}
    sink.write(_full_record())
    sink.close()
    back = {r["task_id"]: r for r in iter_records(out)}
    assert back["old"]["status"] == "void"  # derived from the ending, as to_record does
    assert "weight" not in back["old"] and "tokens" not in back["old"]  # not known then: not made up
    assert back["t"]["weight"] == 0.0 and back["t"]["cut_sampled"]["finish_reason"] == "length"


def test_jsonl_resume_drops_a_line_cut_by_a_crash(tmp_path):
    out = tmp_path / "cut.jsonl"
    out.write_text('{"task_id": "a", "sample": 0}\n{"task_id": "b", "sam')
    sink = JSONLSink(out, resume=True)
    assert sink.done_keys() == {("a", 0)}
    sink.write({"task_id": "b", "sample": 0})
    sink.close()
    assert [json.loads(x)["task_id"] for x in out.read_text().splitlines()] == ["a", "b"]


class FailingPolicy(PlanPolicy):
    """Raises on task add-1, hangs on task add-2, otherwise follows the plan."""

    async def aact(self, env, observation, info):
        if env.task.id == "add-1":
            raise RuntimeError("endpoint returned garbage")
        if env.task.id == "add-2":
            import asyncio

            await asyncio.sleep(30)
        return await super().aact(env, observation, info)


def test_faults_are_recorded_and_counted(tmp_path):
    """A failing policy, a hung policy and a tool server killed mid-episode: every episode is recorded."""
    out = tmp_path / "f.jsonl"
    s = collect(ENV, FailingPolicy, episodes=8, concurrency=4, policy_timeout_s=1.0,
                env_kwargs=demo_env_kwargs(8, transport="stdio", crash_every=4), sink=out, progress=False)  # fmt: skip
    rows = {json.loads(x)["task_id"]: json.loads(x) for x in out.read_text().splitlines()}
    assert len(rows) == 8 and s.recorded == 8
    assert rows["add-1"]["termination"] == "policy_error" and "garbage" in rows["add-1"]["error"]
    assert rows["add-2"]["termination"] == "policy_error" and "TimeoutError" in rows["add-2"]["error"]
    assert rows["add-3"]["termination"] == "env_crash" and rows["add-3"]["truncated"]
    assert rows["add-7"]["termination"] == "env_crash"
    assert rows["add-4"]["termination"] == "answer" and rows["add-4"]["score"] == 1.0  # restarted server works
    assert s.failures == {"env_crash": 2, "policy_error": 2} and s.successes == 4
    assert "failures      env_crash 2, policy_error 2" in s.render()
    # why, at a glance: the first error of each kind (its last line)
    assert set(s.first_errors) == {"env_crash", "policy_error"} and "garbage" in s.first_errors["policy_error"]
    assert f"  first policy_error: {s.first_errors['policy_error']}" in s.render().splitlines()


def test_one_line_errors_take_the_last_non_empty_line_and_survive_blank_errors():
    """Every one-line error (run summary, report, trainer infos, browser fleet) goes through ``last_line``: a
    traceback gives its exception line, a whitespace-only error gives "" (it raised IndexError before)."""
    tb = "Traceback (most recent call last):\n  File 'x', line 1\nValueError: bad\n\n"
    assert last_line(tb) == "ValueError: bad" and last_line("x" * 400) == "x" * 300 and last_line("abc", 2) == "ab"
    assert last_line(" \n\t ") == last_line(None) == ""
    assert error_of({"error": "  \n ", "termination": "policy_error"}) == ""
    crashed = {"error": "\n", "termination": "env_crash",
               "turns": [{"tool_results": [{"error": "server_died", "text": "the server exited\n  (code -9)"}]}]}  # fmt: skip
    assert error_of(crashed) == "(code -9)"
    scoring = {"error": None, "termination": "env_crash", "turns": [{"tool_results": []}, {"tool_results": [],
               "action_error": "the tool infrastructure failed: FileNotFoundError: [Errno 2] No such file"}]}  # fmt: skip
    assert error_of(scoring) == "the tool infrastructure failed: FileNotFoundError: [Errno 2] No such file"


def test_screenshot_failures_are_noted_and_the_episode_goes_on(tmp_path):
    import numpy as np

    from aworld_gym.core.trajectory import Trajectory
    from aworld_gym.rollout.sinks.screenshots import Screenshots

    class Env:
        render_mode = "rgb_array"

    rec = Trajectory("AWorld/Browser-v0")
    assert Screenshots.open(tmp_path, rec, object()) is None  # no rgb_array: off
    shots = Screenshots.open(tmp_path, rec, Env())
    shots.save(0, np.zeros((4, 4, 3), dtype=np.uint8))
    assert (tmp_path / rec.episode_id / "000.png").read_bytes()[:4] == b"\x89PNG"
    assert rec.screenshot == str(tmp_path / rec.episode_id / "000.png")
    rec.turns.append({})
    shots.save(1, RuntimeError("browser gone"))
    assert rec.turns[-1] == {"screenshot_error": "RuntimeError: browser gone"}
    rec.turns.append({})
    shots.save(2, "not an image")
    assert "screenshot" not in rec.turns[-1] and "screenshot_error" in rec.turns[-1]


def test_a_policy_by_name_and_a_failing_policy_factory(tmp_path):
    """``collect(env_id, "reference")`` builds the env's reference policy; a factory that raises ends the run with
    its error (it used to leave the run waiting forever for the records of the workers that died)."""
    from aworld_gym.base.errors import ConfigError
    from aworld_gym.rollout.collect import collect

    summary = collect("AWorld/GAIA-v0", "reference", episodes=4, concurrency=2, progress=False)
    assert summary.recorded == 4 and summary.successes == 4

    def broken():
        raise ValueError("no model here")

    with pytest.raises(RuntimeError, match="an episode worker failed: ValueError: no model here"):
        collect("AWorld/GAIA-v0", broken, episodes=4, concurrency=2, progress=False)
    with pytest.raises(ConfigError, match="unknown policy 'nope'"):
        collect("AWorld/GAIA-v0", "nope", episodes=1, progress=False)


def test_the_summary_gives_pass_at_k_overall_and_per_level():
    from aworld_gym.rollout.collect import Summary

    s = Summary("AWorld/GAIA-v0", episodes=8)
    outcomes = {("a", "1"): [1, 0, 0, 0], ("b", "2"): [1, 1, 1, 0]}
    for (task, level), oks in outcomes.items():
        for i, ok in enumerate(oks):
            s.add({"task_id": task, "sample": i, "score": float(ok), "reward": float(ok), "termination": "answer",
                   "task_meta": {"level": level}})  # fmt: skip
    p = s.pass_at_k()
    assert p["overall"]["pass@1"]["value"] == pytest.approx((0.25 + 0.75) / 2)
    assert p["overall"]["pass@2"]["value"] == pytest.approx((0.5 + 1.0) / 2)  # 1 - C(3,2)/C(4,2) = 0.5 for a
    assert p["overall"]["pass@4"]["value"] == 1.0
    assert p["by_level"]["1"]["pass@2"]["value"] == pytest.approx(0.5)
    text = s.render()
    assert "pass@1 50.0%, pass@2 75.0%, pass@4 100.0% (2 tasks)" in text and "level 2" in text
    assert s.to_dict()["pass_at_k"] == p


class InterruptedAt(PlanPolicy):
    """Ctrl-C (a KeyboardInterrupt) at the first turn of the second episode of task ``task``."""

    def __init__(self, task: str) -> None:
        super().__init__()
        self.task, self.met = task, 0

    def decide(self, env):
        if env.task.id == self.task and env.turn == 0:
            self.met += 1
            if self.met == 2:
                raise KeyboardInterrupt
        return super().decide(env)


def test_an_interrupted_run_writes_the_groups_it_left_open_marked_cut_short(tmp_path):
    import gymnasium as gym

    from aworld_gym.core.rewards import Hook
    from aworld_gym.wrappers import RewardShaping

    sizes = []

    def hook(group):
        sizes.append(len(group))
        return [{"group_bonus": 1.0}] * len(group)

    def factory():
        return RewardShaping(gym.make(ENV, **demo_env_kwargs(2)), [Hook(hook, on="group")])

    out = tmp_path / "i.jsonl"
    with pytest.raises(KeyboardInterrupt):  # groups: add-0 twice, then add-1 twice (its second sample interrupted)
        collect(factory, InterruptedAt("add-1"), episodes=4, group_size=2, concurrency=1, sink=out, progress=False)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["task_id"], r["sample"], r["group_complete"]) for r in rows] == [
        ("add-0", 0, True), ("add-0", 1, True), ("add-1", 0, False)
    ]  # fmt: skip
    assert sizes == [2, 1] and rows[-1]["group_reward_components"] == {"group_bonus": 1.0}
