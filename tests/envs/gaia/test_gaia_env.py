"""AWorld/GAIA-v0: the loader on GAIA's layout, the bundled sample set, episodes, the test split, extras."""

import json
import sys

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import aworld_gym  # noqa: F401
from aworld_gym.base.errors import ConfigError, TaskError
from aworld_gym.envs.gaia.loader import load_gaia, write_submission
from aworld_gym.envs.gaia.reference import GAIAReferencePolicy
from aworld_gym.envs.gaia.sample import TASKS, ensure_sample
from aworld_gym.rollout.collect import collect

ROWS = [
    {"task_id": "t1", "Question": "What is in the file?", "Level": 1, "Final answer": "blue",
     "file_name": "colour.txt", "Annotator Metadata": {"Steps": "read it"}},
    {"task_id": "t2", "Question": "2 + 2?", "Level": "2", "Final answer": "4", "file_name": ""},
    {"task_id": "t3", "Question": "Capital of France?", "Level": 3, "Final answer": "Paris", "file_name": ""},
]  # fmt: skip


def make_snapshot(root, rows=ROWS, split="validation", parquet=False):
    folder = root / "2023" / split
    folder.mkdir(parents=True)
    (folder / "colour.txt").write_text("The colour is blue.\n")
    if parquet:
        import pyarrow as pa
        import pyarrow.parquet as pq

        clean = [
            {**r, "Level": int(r["Level"]), "Annotator Metadata": json.dumps(r.get("Annotator Metadata"))} for r in rows
        ]
        pq.write_table(pa.Table.from_pylist(clean), folder / "metadata.parquet")
    else:
        (folder / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


@pytest.mark.parametrize("parquet", [False, True])
def test_loader_reads_both_layouts_from_any_level_of_the_tree(tmp_path, parquet):
    if parquet:
        pytest.importorskip("pyarrow")
    root = make_snapshot(tmp_path / "GAIA", parquet=parquet)
    for where in (root, root / "2023", root / "2023" / "validation"):
        src = load_gaia(where)
        assert src.ids == ["t1", "t2", "t3"]
    t1 = src.get("t1")
    assert t1.answer == "blue" and t1.metadata["level"] == 1
    assert t1.files == (str((root / "2023/validation/colour.txt").resolve()),)
    assert [t.id for t in load_gaia(root, level=2)] == ["t2"]


def test_loader_errors_say_what_is_expected(tmp_path):
    with pytest.raises(TaskError, match="does not exist"):
        load_gaia(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskError, match=r"2023/<split>/metadata.jsonl"):
        load_gaia(tmp_path / "empty")
    root = make_snapshot(tmp_path / "g")
    (root / "2023/validation/colour.txt").unlink()
    with pytest.raises(TaskError, match=r"attachment 'colour\.txt' is missing"):
        load_gaia(root)
    with pytest.raises(TaskError, match="split must be one of"):
        load_gaia(root, split="train")
    with pytest.raises(TaskError, match="level must be"):
        load_gaia(root, level=4)
    bad = make_snapshot(tmp_path / "b", rows=[{"task_id": "x", "Question": "q", "Level": "high"}])
    with pytest.raises(TaskError, match="Level 'high'"):
        load_gaia(bad)


def test_sample_set_covers_the_styles():
    root = ensure_sample()
    src = load_gaia(root)
    assert len(src) == len(TASKS) == 35  # 3 of them need a tool the env offers only when asked (needs)
    assert sum(t.metadata.get("needs") is not None for t in src) == 3
    assert {t.metadata["level"] for t in src} == {1, 2, 3}
    kinds = {t.metadata["file_name"].rsplit(".", 1)[-1] for t in src if t.metadata["file_name"]}
    assert kinds == {"xlsx", "csv", "pdf", "docx", "pptx", "json", "py", "png", "txt", "zip", "db", "wav"}
    assert any("," in t.answer for t in src) and any(t.answer.endswith(" kg") for t in src)
    assert sum(not t.files for t in src) >= 7  # search-only questions


def test_reference_policy_solves_every_sample_task_and_its_recorded_calls_replay_with_no_server(tmp_path, monkeypatch):
    """The sample set solved against its live tools, every call recorded (issue 49); then replayed strictly: the same
    observations and rewards, and the shared Python server the env holds is never started (each run's settings give
    it a server of its own: the live run's starts, the replay's does not)."""
    from aworld_gym.sandbox.shared import SharedPythonServer

    started, command = [], SharedPythonServer.command

    def spy(self, port):  # the server process is about to start
        started.append(self.args[self.args.index("--memory-mb") + 1])
        return command(self, port)

    monkeypatch.setattr(SharedPythonServer, "command", spy)
    cache = {"store": str(tmp_path / "tools.sqlite"), "mode": "replay"}

    def run(name: str, **kwargs) -> tuple:
        out = tmp_path / f"{name}.jsonl"
        s = collect("AWorld/GAIA-v0", GAIAReferencePolicy, episodes=32, concurrency=3, progress=False, sink=str(out),
                    env_kwargs={"tool_cache": cache, **kwargs})  # fmt: skip
        records = sorted((json.loads(line) for line in out.read_text().splitlines()), key=lambda r: r["task_id"])
        return s, [([t["observation"] for t in r["turns"]], r["reward"]) for r in records]

    live, seen = run("live", memory_mb=1537)
    assert (live.recorded, live.successes) == (32, 32), live.terminations
    assert "1537" in started
    cache["mode"] = "replay-strict"
    replayed, seen_again = run("replayed", memory_mb=1536)
    assert (replayed.recorded, replayed.successes) == (32, 32), replayed.first_errors
    assert seen_again == seen
    assert "1536" not in started, started


def test_episode_prompt_tools_and_final_answer_forms():
    env = gym.make("AWorld/GAIA-v0", python_server="inprocess")
    obs, info = env.reset(options={"task_id": "sample-p02"})
    assert "bundled sample set" in info["dataset"] and info["level"] == 1
    assert "Attached file: annual_report.pdf" in obs and "/sandbox/files/annual_report.pdf" in obs
    assert {t["function"]["name"] for t in info["tools"]} >= {"read_file", "run_python", "web_search", "fetch_url"}
    assert "comma separated list" in info["system_prompt"]
    obs, r, term, trunc, info = env.step(
        '<tool_call>{"name": "read_file", "arguments": {"path": "annual_report.pdf"}}</tool_call>'
    )
    assert "Tallinn" in obs and r == 0.0 and not term
    _, r, term, _, info = env.step("It is in Estonia.\nFINAL ANSWER: tallinn")
    assert (r, term, info["score"], info["answer"]) == (1.0, True, 1.0, "tallinn")
    env.reset(options={"task_id": "sample-s04"})  # a list answer, scored element-wise
    assert env.step("<answer>chair; lamp ; shelf</answer>")[1] == 1.0
    env.reset(options={"task_id": "sample-s04"})
    assert env.step("<answer>Chair, Lamp</answer>")[1] == 0.0
    env.close()


def test_check_env():
    env = gym.make("AWorld/GAIA-v0", python_server="inprocess")
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_test_split_records_answers_without_reward(tmp_path):
    rows = [{**r, "Final answer": "?"} for r in ROWS]
    root = make_snapshot(tmp_path / "g", rows=rows, split="test")
    with pytest.warns(UserWarning, match="no search tool"):
        env = gym.make("AWorld/GAIA-v0", data_dir=str(root), split="test", python_server="inprocess")
    obs, info = env.reset(options={"task_id": "t3"})
    assert info["dataset"].startswith("GAIA test")
    _, r, term, _, info = env.step("<answer>Paris</answer>")
    assert (r, term, info["score"], info["answer"]) == (0.0, True, None, "Paris")
    env.close()
    out = write_submission({"t3": "Paris", "t1": None}, tmp_path / "sub.jsonl")
    assert [json.loads(x) for x in out.read_text().splitlines()] == [
        {"task_id": "t3", "model_answer": "Paris"},
        {"task_id": "t1", "model_answer": ""},
    ]
    recs = [{"task_id": "t2", "answer": "4"}, {"task_id": "t1", "turns": [{"answer": None}, {"answer": "blue"}]}]
    out = write_submission(recs, tmp_path / "sub2.jsonl")
    assert [json.loads(x)["model_answer"] for x in out.read_text().splitlines()] == ["4", "blue"]
    # Several samples per task: the submission says which one it takes.
    group = [{"task_id": "t1", "sample": 1, "answer": "right", "score": 1.0, "reward": 1.0},
             {"task_id": "t1", "sample": 0, "answer": "wrong", "score": 0.0, "reward": 0.0},
             {"task_id": "t1", "sample": 2, "answer": "also right", "score": 1.0, "reward": 1.0},
             {"task_id": "t2", "sample": 0, "answer": "only", "score": None}]  # fmt: skip
    with pytest.raises(ValueError, match="several samples; say which one to submit"):
        write_submission(group, tmp_path / "sub3.jsonl")

    def submitted(pick):
        out = write_submission(group, tmp_path / f"{pick}.jsonl", pick=pick)
        return {(r := json.loads(x))["task_id"]: r["model_answer"] for x in out.read_text().splitlines()}

    assert submitted("first") == {"t1": "wrong", "t2": "only"}  # the lowest sample: what pass@1 measures
    assert submitted("best") == {"t1": "right", "t2": "only"}  # the highest score; a tie goes to the lower sample


def test_extra_servers_from_mcp_config_and_clashes(tmp_path):
    calc = {"command": sys.executable, "args": ["-m", "aworld_gym.mcp.demo_server"]}
    env = gym.make("AWorld/GAIA-v0", mcp_config={"mcpServers": {"calc": calc}}, python_server="inprocess",
                   allow_tools=["read_file", "multiply", "run_python"])  # fmt: skip
    _, info = env.reset(options={"task_id": "sample-j02"})
    assert sorted(t["function"]["name"] for t in info["tools"]) == ["multiply", "read_file", "run_python"]
    obs, *_ = env.step('<tool_call>{"name": "multiply", "arguments": {"a": 3, "b": 768}}</tool_call>')
    assert "2304" in obs
    assert env.step("<answer>2304</answer>")[1] == 1.0
    env.close()
    with pytest.raises(ConfigError, match="clash"):
        gym.make("AWorld/GAIA-v0", mcp_config={"mcpServers": {"files": calc}}, python_server="inprocess")
    with pytest.raises(ConfigError, match="only the validation split"):
        gym.make("AWorld/GAIA-v0", split="test")
