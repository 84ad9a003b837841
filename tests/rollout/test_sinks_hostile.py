"""Sinks and --resume lose nothing, and no single value ends a run (issue 44: sinks, resume, odd values)."""

import errno
import json
import math
import os
import resource
import subprocess
import sys

import pytest

from aworld_gym.base.errors import PolicyError
from aworld_gym.cli import main
from aworld_gym.rollout import sinks
from aworld_gym.rollout.collect import collect
from aworld_gym.rollout.policies.plan import PlanPolicy
from aworld_gym.rollout.sinks import (
    CorruptOutput,
    JSONLSink,
    OutputBusy,
    OutputWriteError,
    SinkError,
    iter_records,
    open_sink,
)
from aworld_gym.rollout.sinks.record_json import CUT, MARKS
from aworld_gym.rollout.sinks.sink_files import write_all
from tests.helpers import demo_env_kwargs, plan_tasks

ENV = "AWorld/MCP-v0"
SUFFIXES = [".jsonl", ".parquet"]


def _strict(line: bytes) -> dict:
    """A line as a strict parser reads it: valid UTF-8, no NaN/Infinity tokens."""

    def refuse(token: str) -> None:
        raise ValueError(f"not strict JSON: {token}")

    return json.loads(line.decode("utf-8"), parse_constant=refuse)


class SurrogatePolicy(PlanPolicy):
    """A model whose reply holds a lone surrogate: in the answer (add-0) or in the error it raises (add-1)."""

    def decide(self, env):
        if env.task.id == "add-0":
            return "<think>\ud800</think><answer>6\udfff</answer>"
        if env.task.id == "add-1":
            raise PolicyError("the endpoint sent \ud83d and stopped")
        return super().decide(env)


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_a_lone_surrogate_in_a_model_reply_is_recorded_and_reads_back(tmp_path, suffix):
    """It used to end the run with UnicodeEncodeError in the sink and no episode recorded."""
    out = tmp_path / f"s{suffix}"
    s = collect(ENV, SurrogatePolicy, episodes=3, concurrency=3, env_kwargs=demo_env_kwargs(3), sink=out,
                progress=False)  # fmt: skip
    assert s.recorded == 3
    back = {r["task_id"]: r for r in iter_records(out)}
    assert back["add-0"]["answer"] == "6\udfff" and "\ud800" in back["add-0"]["turns"][0]["action"]
    assert back["add-1"]["termination"] == "policy_error" and "\ud83d" in back["add-1"]["error"]
    assert back["add-2"]["score"] == 1.0
    if suffix == ".jsonl":
        assert [_strict(line)["task_id"] for line in out.read_bytes().splitlines()]  # valid UTF-8, every line
    s.render().encode("utf-8")  # the summary prints (its first error holds the surrogate, escaped)
    assert "\\ud83d" in s.first_errors["policy_error"]


def test_parquet_keys_records_by_their_own_task_id_even_when_it_holds_a_surrogate(tmp_path):
    """A task id that Parquet's text column cannot hold is kept in its extra column; two samples of it are two
    records, and a resume knows both (the writer used to raise UnicodeEncodeError)."""
    out = tmp_path / "ids.parquet"
    sink = open_sink(out)
    for sample in (0, 1):
        sink.write({"task_id": "t\ud800", "sample": sample, "turns": []})
    sink.close()
    assert sorted((r["task_id"], r["sample"]) for r in iter_records(out)) == [("t\ud800", 0), ("t\ud800", 1)]
    again = open_sink(out, resume=True)
    assert again.done_keys() == {("t\ud800", 0), ("t\ud800", 1)}
    again.close()


def test_resume_refuses_what_is_not_a_regular_file(tmp_path):
    """A FIFO as the output of a resumed run used to hang the read for good."""
    for name in ("pipe.jsonl", "pipe.parquet"):
        fifo = tmp_path / name
        os.mkfifo(fifo)
        with pytest.raises(SinkError, match="not a regular file"):
            open_sink(fifo, resume=True)


def _odd_record() -> dict:
    deep: list = []
    for _ in range(10_000):
        deep = [deep]
    return {"task_id": "odd", "sample": 0, "reward": math.nan, "score": math.inf, "turns": [{"reward": -math.inf}],
            "answer": "x\ud800", "seed": 7, "big": 3**9000, "deep": deep, "keys": {(1, 2): "tuple key"},
            "plain": "NaN"}  # fmt: skip


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_nan_infinity_huge_ints_and_deep_nesting_are_stored_and_read_back(tmp_path, suffix):
    """NaN/Infinity are written as strict JSON (null plus a mark) and come back as floats; an int past str()'s
    limit comes back whole; a value nested 10,000 deep is cut at 100 levels with a mark. The JSONL writer used to
    write ``NaN`` (not JSON to strict readers) and raised RecursionError on the deep value, losing the episode."""
    out = tmp_path / f"odd{suffix}"
    sink = open_sink(out)
    sink.write(_odd_record())
    sink.write({"task_id": "plain", "sample": 0, "reward": 1.0, "status": "ok"})
    sink.close()
    back = {r["task_id"]: r for r in iter_records(out)}
    odd = back["odd"]
    assert math.isnan(odd["reward"]) and odd["score"] == math.inf and odd["turns"][0]["reward"] == -math.inf
    assert odd["answer"] == "x\ud800" and odd["big"] == 3**9000 and odd["plain"] == "NaN" and odd["seed"] == 7
    assert odd["keys"] == {"(1, 2)": "tuple key"}
    level, depth = odd["deep"], 0
    while isinstance(level, list):
        level, depth = level[0], depth + 1
    assert level == CUT and depth == 99  # the record is level 0, "deep" level 1
    assert odd[MARKS] == {"cut": [["deep", *[0] * 99]]}  # what was cut is marked; nothing else is left over
    plain = {k: v for k, v in back["plain"].items() if v is not None}  # Parquet: the other columns are null
    assert plain == {"task_id": "plain", "sample": 0, "reward": 1.0, "status": "ok"}
    if suffix == ".jsonl":
        lines = [_strict(line) for line in out.read_bytes().splitlines()]
        assert lines[0]["reward"] is None and lines[0][MARKS]["nonfinite"][0] == [["reward"], "NaN"]


def test_a_second_writer_on_the_same_output_is_refused_before_it_touches_the_file(tmp_path):
    """Two runs on one --out used to tear records or record episodes twice (the second one truncated the first's
    file); now the second is refused, naming the file and the first writer's pid, in this process or another."""
    for suffix in SUFFIXES:
        out = tmp_path / f"busy{suffix}"
        first = open_sink(out)
        first.write({"task_id": "a", "sample": 0})
        for resume in (False, True):
            with pytest.raises(OutputBusy, match=f"{out.name}.*process {os.getpid()}"):
                open_sink(out, resume=resume)
        first.write({"task_id": "b", "sample": 0})
        first.close()
        assert sorted(r["task_id"] for r in iter_records(out)) == ["a", "b"]
        assert not out.with_name(out.name + ".lock").exists()  # released and removed at close
        again = open_sink(out, resume=True)  # the lock is free again
        assert again.done_keys() == {("a", 0), ("b", 0)}
        again.close()
    out = tmp_path / "other.jsonl"
    hold = ("import sys; from aworld_gym.rollout.sinks import open_sink; s = open_sink(sys.argv[1]); "
            "print('ready', flush=True); sys.stdin.read()")  # fmt: skip
    other = subprocess.Popen([sys.executable, "-c", hold, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)  # fmt: skip
    try:
        assert other.stdout.readline().strip() == "ready"
        with pytest.raises(OutputBusy, match=f"process {other.pid}"):
            open_sink(out)
    finally:
        other.communicate("", timeout=30)
    open_sink(out).close()  # the lock died with its writer


def test_resume_after_a_crash_cut_inside_a_multibyte_character(tmp_path):
    """The cut line ends inside 'é' (one byte of two): resume used to fail decoding the file; now the torn tail is
    dropped, how many bytes is said, and the file is whole lines again."""
    out = tmp_path / "cut.jsonl"
    good = json.dumps({"task_id": "a", "sample": 0, "answer": "é"}, ensure_ascii=False).encode() + b"\n"
    torn = '{"task_id": "b", "sample": 0, "answer": "é'.encode()[:-1]
    out.write_bytes(good + torn)
    skipped: list[int] = []
    assert [r["task_id"] for r in iter_records(out, skipped=skipped)] == ["a"] and skipped == [2]
    sink = JSONLSink(out, resume=True)
    assert sink.done_keys() == {("a", 0)}
    assert sink.notes == [f"{out}: line 2, cut by a crash, was dropped ({len(torn)} bytes)"]
    sink.write({"task_id": "b", "sample": 0, "answer": "é"})
    sink.close()
    assert [_strict(line)["task_id"] for line in out.read_bytes().splitlines()] == ["a", "b"]


def test_a_whole_last_record_without_its_newline_is_kept(tmp_path):
    out = tmp_path / "nonl.jsonl"
    out.write_text('{"task_id": "a", "sample": 0}\n{"task_id": "b", "sample": 0}')
    sink = JSONLSink(out, resume=True)
    assert sink.done_keys() == {("a", 0), ("b", 0)} and sink.notes == []
    sink.write({"task_id": "c", "sample": 0})
    sink.close()
    assert [r["task_id"] for r in iter_records(out)] == ["a", "b", "c"]


JUNK = ["null", "[1, 2]", "7", "}{ garbage", "[" * 10_000 + "]" * 10_000, '{"task_id": "x", "sample": "two"}',
        "\xff\xfe not utf-8"]  # fmt: skip


def _junk_file(path):
    lines = [b'{"task_id": "add-0", "sample": 0, "reward": 1.0}']
    lines += [j.encode("latin-1") if j.startswith("\xff") else j.encode() for j in JUNK]
    lines.append(b'{"task_id": "add-1", "sample": 0, "reward": 1.0}')
    path.write_bytes(b"\n".join(lines) + b"\n")


def test_junk_lines_are_skipped_and_reported_by_resume_and_iter_records(tmp_path):
    """``null``, ``[1, 2]``, ``7``, garbage, a line nested 10,000 deep, a record without a usable key, invalid
    UTF-8: resume used to stop with a traceback (AttributeError, RecursionError, UnicodeDecodeError); now each is
    skipped, counted with its line number, kept in the file, and the run says so."""
    out = tmp_path / "junk.jsonl"
    _junk_file(out)
    skipped: list[int] = []
    assert [r["task_id"] for r in iter_records(out, skipped=skipped)] == ["add-0", "x", "add-1"]
    assert skipped == [2, 3, 4, 5, 6, 8]  # "x" is a record (the report reads it); resume cannot key it
    s = collect(ENV, PlanPolicy, episodes=3, concurrency=2, env_kwargs=demo_env_kwargs(3), sink=out, resume=True,
                progress=False)  # fmt: skip
    assert s.skipped == 2 and s.recorded == 1
    assert s.notes == [f"{out}: skipped 7 line(s) that are not records (line 2, 3, 4, 5, 6, 7, 8); they are kept in "
                       "the file"]  # fmt: skip
    assert f"warning       {s.notes[0]}" in s.render().splitlines()
    assert [r["task_id"] for r in iter_records(out)] == ["add-0", "x", "add-1", "add-2"]
    assert out.read_bytes().count(b"\n") == 10  # the junk is kept: the user decides what it was


def test_a_corrupt_parquet_file_is_refused_on_resume_and_kept(tmp_path):
    """It used to be read as empty and replaced by this run's episodes alone."""
    out = tmp_path / "bad.parquet"
    out.write_bytes(b"PAR1 this is not a parquet file PAR1")
    journal = out.with_name(out.name + ".partial.jsonl")
    journal.write_text('{"task_id": "j", "sample": 0}\n')
    with pytest.raises(CorruptOutput, match=r"cannot resume .*bad\.parquet.* kept as it is: move it away"):
        open_sink(out, resume=True)
    assert out.read_bytes() == b"PAR1 this is not a parquet file PAR1" and journal.exists()
    assert not out.with_name("bad.parquet.lock").exists()
    with pytest.raises(CorruptOutput, match="not a readable Parquet file"):
        list(iter_records(out))
    assert (
        main(["rollout", "--env", "AWorld/GAIA-v0", "--episodes", "1", "--out", str(out), "--resume", "--no-progress"])
        == 2
    )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_a_full_device_fails_once_with_one_clear_error(tmp_path):
    out = tmp_path / "full.jsonl"
    out.symlink_to("/dev/full")
    sink = JSONLSink(out)
    with pytest.raises(OutputWriteError, match=r"cannot write .*full\.jsonl.*No space left on device \(ENOSPC\)"):
        sink.write({"task_id": "a", "sample": 0})
    with pytest.raises(OutputWriteError):  # the same error again, not a second kind
        sink.write({"task_id": "b", "sample": 0})
    sink.close()
    sink.close()


def _limit_file_size(limit: int):
    def limit_it() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # writes past it fail: EFBIG, as a full disk would

    return limit_it


def test_a_full_disk_ends_the_run_with_one_line_and_what_was_written_stays_readable(tmp_path):
    """A real CLI run whose output cannot grow past 3 kB (RLIMIT_FSIZE): it used to end with two tracebacks and a
    torn last line; now one line on stderr, exit code 2, whole records in the file, and a resumed run carries on."""
    out = tmp_path / "run.jsonl"
    # -B everywhere: under the limit Python would leave .pyc files cut at 3 kB in the shared tree
    server = {"command": sys.executable, "args": ["-B", "-m", "aworld_gym.mcp.demo_server"]}
    kwargs = json.dumps({"mcp_config": {"mcpServers": {"demo": server}}, "tasks": plan_tasks(6)})
    args = [sys.executable, "-B", "-m", "aworld_gym.cli", "rollout", "--env", ENV, "--env-kwargs", kwargs, "--episodes", "6",
            "--concurrency", "2", "--out", str(out), "--no-progress"]  # fmt: skip
    p = subprocess.run(args, capture_output=True, text=True, timeout=240, preexec_fn=_limit_file_size(3_000))
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and p.stderr.count("aworld-gym: error:") == 1, p.stderr
    assert "File too large (EFBIG)" in p.stderr and "--resume" in p.stderr
    data = out.read_bytes()
    assert data.endswith(b"\n") and 0 < data.count(b"\n") < 6
    assert all(_strict(line)["task_id"] for line in data.splitlines())
    s = collect(ENV, PlanPolicy, episodes=6, concurrency=2, env_kwargs=demo_env_kwargs(6), sink=out, resume=True,
                progress=False)  # fmt: skip
    assert s.skipped == data.count(b"\n") and s.notes == []
    assert len({(r["task_id"], r["sample"]) for r in iter_records(out)}) == 6


class _FullAfter:
    """``write_all`` that fails with ENOSPC after ``n`` writes (the one choke point every sink writes through)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, fd: int, data: bytes) -> None:
        if self.n <= 0:
            os.write(fd, data[: len(data) // 2])  # half a line reaches the disk first
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.n -= 1
        write_all(fd, data)


def test_a_full_disk_under_a_parquet_run_keeps_the_journal_for_resume(tmp_path, monkeypatch):
    out = tmp_path / "run.parquet"
    monkeypatch.setattr(sinks, "write_all", _FullAfter(2))
    with pytest.raises(OutputWriteError, match="No space left on device"):
        collect(ENV, PlanPolicy, episodes=5, concurrency=1, env_kwargs=demo_env_kwargs(5), sink=out, progress=False)
    monkeypatch.undo()
    journal = out.with_name(out.name + ".partial.jsonl")
    assert not out.exists() and journal.read_bytes().count(b"\n") == 2 and journal.read_bytes().endswith(b"\n")
    s = collect(ENV, PlanPolicy, episodes=5, concurrency=2, env_kwargs=demo_env_kwargs(5), sink=out, resume=True,
                progress=False)  # fmt: skip
    assert s.skipped == 2 and s.recorded == 3
    assert sorted(r["task_id"] for r in iter_records(out)) == [f"add-{i}" for i in range(5)]


def test_a_parquet_file_that_cannot_be_written_keeps_the_journal(tmp_path):
    out = tmp_path / "x.parquet"
    out.with_name("x.parquet.tmp").mkdir()  # the file cannot be made (as on a full disk)
    sink = open_sink(out)
    sink.write({"task_id": "a", "sample": 0})
    with pytest.raises(OutputWriteError, match=r"the 1 records are kept in .*x\.parquet\.partial\.jsonl"):
        sink.close()
    sink.close()  # once
    assert [r["task_id"] for r in iter_records(sink.journal_path)] == ["a"]


@pytest.mark.parametrize("name", ["folder", "folder.parquet"])
def test_out_naming_a_folder_is_one_clear_line(tmp_path, capsys, name):
    """It used to end with an IsADirectoryError traceback."""
    folder = tmp_path / name
    folder.mkdir()
    assert main(["rollout", "--env", "AWorld/GAIA-v0", "--episodes", "1", "--out", str(folder), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("aworld-gym: error: the output") and "is a folder: name a file in it" in err
    assert err.count("\n") == 1


def test_the_summary_json_stays_strict_json_with_a_nan_reward():
    """``--summary-json`` used to write ``NaN`` (``json.dumps`` of a NaN mean reward), which strict readers refuse."""
    from aworld_gym.rollout.collect import Summary

    s = Summary(ENV, episodes=2)
    s.add({"task_id": "a", "sample": 0, "reward": math.nan, "termination": "answer", "error": "x\ud800"})
    doc = _strict(s.to_json().encode("utf-8"))
    assert doc["mean_reward"] is None and ["mean_reward"] in [p for p, _ in doc[MARKS]["nonfinite"]]
    assert doc["recorded"] == 1


def test_a_record_that_cannot_be_encoded_leaves_a_minimal_marked_record(tmp_path, monkeypatch):
    """The last resort (the careful encoding itself failing, isolated here by a stand-in encoder): the episode's ids,
    ending and error are kept with a mark saying why, instead of the episode being lost."""
    real = sinks.encode_record

    def fails_on_turns(record):
        if "turns" in record:
            raise MemoryError("a 3 GB transcript")
        return real(record)

    monkeypatch.setattr(sinks, "encode_record", fails_on_turns)
    out = tmp_path / "min.jsonl"
    sink = JSONLSink(out)
    sink.write({"task_id": "a", "sample": 2, "status": "void", "termination": "env_crash", "error": "boom",
                "turns": [{"action": "x"}]})  # fmt: skip
    sink.close()
    (back,) = iter_records(out)
    assert back == {"task_id": "a", "sample": 2, "status": "void", "termination": "env_crash", "error": "boom",
                    MARKS: {"unstorable": "MemoryError: a 3 GB transcript"}}  # fmt: skip
