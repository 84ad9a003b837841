"""The ``aworld-gym rollout`` command as ``make run`` uses it."""

import json
import subprocess
import sys

import pytest

from aworld_gym.rollout.collect import collect
from aworld_gym.rollout.policies import make_policy
from aworld_gym.rollout.sinks import JSONLSink


def cli(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "aworld_gym.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def test_rollout_prints_summary_and_writes_one_line_per_episode(tmp_path):
    out = tmp_path / "traj.jsonl"
    summary = tmp_path / "summary.json"
    p = cli("rollout", "--env", "AWorld/Code-v0", "--policy", "reference", "--episodes", "6", "--concurrency", "3",
            "--out", str(out), "--summary-json", str(summary), "--policy-latency", "0.05")  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "success rate  100.0% (6/6)" in p.stdout and "episodes/s" in p.stdout and str(out) in p.stdout
    assert "ep/s" in p.stderr or "ep]" in p.stderr  # the progress bar
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 6
    assert sorted(r["task_id"] for r in records) == [f"HumanEval/{i}" for i in range(6)]
    assert sorted(r["seed"] for r in records) == list(range(6))
    r = records[0]
    assert r["env_id"] == "AWorld/Code-v0" and r["termination"] == "answer" and r["reward"] == 1.0
    assert r["reward_components"] == {"task": 1.0} and r["num_turns"] == 2
    first = r["turns"][0]
    assert first["tool_calls"][0]["name"] == "run_python" and "code" in first["tool_calls"][0]["arguments"]
    assert first["tool_results"][0]["text"].startswith("exit code 0")
    assert first["policy_s"] >= 0.05  # the stand-in model latency
    assert set(r["timings"]) == {"reset_s", "policy_s", "env_s", "total_s"}
    s = json.loads(summary.read_text())
    assert s["recorded"] == 6 and s["success_rate"] == 1.0


def test_rollout_in_worker_processes(tmp_path):
    """``--processes``: the same records from worker processes (Code-v0: a sandboxed run per episode)."""
    out = tmp_path / "traj.jsonl"
    p = cli("rollout", "--env", "AWorld/Code-v0", "--policy", "reference", "--episodes", "6", "--concurrency", "4",
            "--processes", "--out", str(out), "--no-progress")  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "(process)" in p.stdout and "success rate  100.0% (6/6)" in p.stdout
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["task_id"] for r in records) == [f"HumanEval/{i}" for i in range(6)]


def test_trajectories_load_with_datasets(tmp_path):
    datasets = pytest.importorskip("datasets")
    path = tmp_path / "t.jsonl"
    s = collect("AWorld/Code-v0", make_policy("reference", "AWorld/Code-v0"), episodes=3, concurrency=1,
                env_kwargs={"server": "inprocess"}, sink=JSONLSink(path), progress=False)  # fmt: skip
    ds = datasets.load_dataset("json", data_files=str(path), split="train")
    assert ds.num_rows == 3 and set(ds["termination"]) == {"answer"}, s.first_errors


def test_bad_arguments_are_clear_errors():
    p = cli("rollout", "--env", "AWorld/Code-v0", "--policy", "gpt-9", "--episodes", "1")
    assert p.returncode == 2 and "invalid choice: 'gpt-9'" in p.stderr
    p = cli("rollout", "--env", "AWorld/Nope-v0", "--policy", "reference", "--episodes", "1")
    assert p.returncode == 2 and "Environment `Nope` doesn't exist in namespace AWorld." in p.stderr
    p = cli("envs")
    assert p.returncode == 0 and "AWorld/Code-v0" in p.stdout


def test_the_printed_report_command_runs_from_a_shell_without_the_venv(monkeypatch, tmp_path):
    """``make run`` runs ``.venv/bin/aworld-gym`` from a shell whose PATH has no venv: the ``report`` command it prints
    must name this very executable (issue 46: a bare ``aworld-gym`` there was "command not found")."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from aworld_gym.cli import own_command

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)
    command = own_command()
    here = Path(sys.executable).parent / "aworld-gym"
    if here.exists():
        assert command == here.as_posix()
    out = subprocess.run(f"{command} --help", shell=True, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0 and "report" in out.stdout
    monkeypatch.setenv("PATH", f"{here.parent}:/usr/bin:/bin")
    if here.exists() and shutil.which("aworld-gym") == str(here):
        assert own_command() == "aworld-gym"  # the venv is active: the bare name is this executable
