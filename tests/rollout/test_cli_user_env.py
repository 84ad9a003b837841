"""The CLI on a user's own env (issue 46): Gymnasium's ``module:Id``, ``--import``, the id's registered reference
policy, Gymnasium's "Did you mean", counts checked before any file, a run where no episode could run, help with
defaults and ``aworld-gym envs``."""

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LAB = textwrap.dedent('''
    import aworld_gym
    from aworld_gym import MCPEnv
    from aworld_gym.rollout.policies import ScriptedPolicy


    def convert(value: float, unit: str, to: str) -> float:
        """Convert an amount from one unit to another.

        Args:
            value: the amount.
            unit: its unit.
            to: the unit wanted.
        """
        return round(value * {("km", "mi"): 0.621371, ("kg", "lb"): 2.204623}[(unit, to)], 3)


    TASKS = [
        {"id": "run", "prompt": "How many miles is 10 km?", "answer": "6.214", "call": [10, "km", "mi"]},
        {"id": "bag", "prompt": "How many pounds is 5 kg?", "answer": "11.023", "call": [5, "kg", "lb"]},
    ]


    class ConverterEnv(MCPEnv):
        def __init__(self, **kwargs):
            super().__init__(tasks=TASKS, tools=[convert], **kwargs)


    class BrokenEnv(ConverterEnv):
        def prepare_episode(self, task):
            raise RuntimeError("the lab's server is down")


    class ConverterReference(ScriptedPolicy):
        def decide(self, env):
            if env.turn == 0:
                value, unit, to = env.task.metadata["call"]
                args = f'{{"value": {value}, "unit": "{unit}", "to": "{to}"}}'
                return f'<tool_call>{{"name": "convert", "arguments": {args}}}</tool_call>'
            return f"<answer>{env.turns[-1]['tool_results'][0]['text']}</answer>"


    aworld_gym.register("Lab/Converter-v0", ConverterEnv, max_episode_steps=4, reference_policy=ConverterReference)
    aworld_gym.register("Lab/Broken-v0", BrokenEnv, max_episode_steps=4, reference_policy=ConverterReference)
    aworld_gym.register("Lab/Bare-v0", "aworld_gym.core.env:MCPEnv", tools=[convert], needs=["tasks"])
''')


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    (tmp_path / "mylab.py").write_text(LAB)
    return tmp_path


def cli(folder: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(folder)])}
    return subprocess.run([sys.executable, "-m", "aworld_gym.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=folder, env=env)  # fmt: skip


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("form", ["module:Id", "--import"])
def test_the_cli_runs_a_users_registered_env_with_its_reference_policy(lab, form):
    out = lab / "converter.jsonl"
    env = (
        ["--env", "mylab:Lab/Converter-v0"]
        if form == "module:Id"
        else ["--import", "mylab", "--env", "Lab/Converter-v0"]
    )
    p = cli(lab, "rollout", *env, "--episodes", "4", "--concurrency", "2", "--out", str(out), "--no-progress")
    assert p.returncode == 0, p.stderr
    assert "aworld-gym rollout: Lab/Converter-v0, policy=reference, 4 episodes" in p.stdout
    assert "success rate  100.0% (4/4)" in p.stdout
    recs = records(out)
    assert sorted(r["task_id"] for r in recs) == ["bag", "bag", "run", "run"]
    assert {r["env_id"] for r in recs} == {"Lab/Converter-v0"} and {r["reward"] for r in recs} == {1.0}
    assert {r["turns"][0]["tool_results"][0]["text"] for r in recs} == {"6.214", "11.023"}


def test_worker_processes_import_the_users_module_too(lab):
    out = lab / "converter.jsonl"
    p = cli(lab, "rollout", "--import", "mylab", "--env", "Lab/Converter-v0", "--episodes", "2", "--processes",
            "--concurrency", "2", "--out", str(out), "--no-progress")  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "(process)" in p.stdout and "success rate  100.0% (2/2)" in p.stdout


def test_collect_takes_module_id_and_a_policy_name(lab, monkeypatch):
    from aworld_gym.rollout.collect import collect

    monkeypatch.syspath_prepend(str(lab))
    s = collect("mylab:Lab/Converter-v0", "reference", episodes=2, concurrency=1, progress=False)
    assert (s.env_id, s.recorded, s.successes, s.mean_reward) == ("Lab/Converter-v0", 2, 2, 1.0)


def test_an_unknown_id_gets_gymnasiums_did_you_mean(lab):
    p = cli(lab, "rollout", "--env", "AWorld/Cod-v0", "--episodes", "1", "--out", str(lab / "x.jsonl"))
    assert p.returncode == 2 and not (lab / "x.jsonl").exists()
    assert (
        p.stderr.strip()
        == "aworld-gym: error: Environment `Cod` doesn't exist in namespace AWorld. Did you mean: `Code`?"
    )
    p = cli(lab, "rollout", "--env", "mylab:Lab/Convertor-v0", "--episodes", "1")
    assert p.returncode == 2
    assert p.stderr.strip() == ("aworld-gym: error: Environment `Convertor` doesn't exist in namespace Lab. "
                                "Did you mean: `Converter`?")  # fmt: skip
    p = cli(lab, "rollout", "--env", "nolab:Lab/Converter-v0", "--episodes", "1")
    assert p.returncode == 2 and "No module named 'nolab'" in p.stderr
    assert "Check whether 'nolab' contains env registration and can be imported." in p.stderr


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [("--episodes", "0", "--episodes must be at least 1, got 0"),
     ("--episodes", "-3", "--episodes must be at least 1, got -3"),
     ("--concurrency", "0", "--concurrency must be at least 1, got 0"),
     ("--group-size", "0", "--group-size must be at least 1, got 0"),
     ("--max-turns", "0", "--max-turns must be at least 1, got 0"),
     ("--policy-latency", "-1", "--policy-latency must be >= 0, got -1"),
     ("--policy-timeout", "0", "--policy-timeout must be > 0 seconds, got 0")],
)  # fmt: skip
def test_counts_are_checked_before_any_file_is_made(lab, flag, value, said):
    out = lab / "runs" / "x.jsonl"
    args = ["--episodes", "2", flag, value] if flag != "--episodes" else [flag, value]
    p = cli(lab, "rollout", "--env", "mylab:Lab/Converter-v0", *args, "--out", str(out), "--screenshots")
    assert (p.returncode, p.stderr.strip()) == (2, f"aworld-gym: error: {said}")
    assert not (lab / "runs").exists()


def test_collect_checks_counts_before_opening_the_sink(tmp_path):
    from aworld_gym.rollout.collect import collect

    out = tmp_path / "x.jsonl"
    with pytest.raises(ValueError, match=r"^episodes must be an integer of at least 1, got 0$"):
        collect("AWorld/Code-v0", "reference", episodes=0, sink=out, progress=False)
    with pytest.raises(ValueError, match=r"^group_size must be an integer of at least 1, got -1$"):
        collect("AWorld/Code-v0", "reference", episodes=2, group_size=-1, sink=out, progress=False)
    import gymnasium as gym

    with pytest.raises(gym.error.NameNotFound, match="Did you mean: `Code`"):
        collect("AWorld/Cod-v0", lambda: None, episodes=1, sink=out, progress=False)
    assert not out.exists()


def test_a_run_where_no_episode_could_run_exits_non_zero_with_the_reason(lab):
    out = lab / "broken.jsonl"
    p = cli(lab, "rollout", "--env", "mylab:Lab/Broken-v0", "--episodes", "3", "--out", str(out), "--no-progress")
    assert p.returncode == 1, p.stderr
    assert len(records(out)) == 3  # the void records are kept: they say what failed
    last = p.stderr.strip().splitlines()[-1]
    assert last == ("aworld-gym: error: no episode could run: all 3 were void (env_error 3); "
                    "first env_error: RuntimeError: the lab's server is down")  # fmt: skip


def test_a_refused_model_endpoint_is_said_as_such(lab):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    p = cli(lab, "rollout", "--env", "mylab:Lab/Converter-v0", "--policy", "openai", "--model", "m", "--base-url",
            url, "--episodes", "2", "--out", str(lab / "o.jsonl"), "--no-progress")  # fmt: skip
    assert p.returncode == 1, p.stderr
    assert p.stderr.strip().splitlines()[-1] == (
        "aworld-gym: error: no episode could run: all 2 were void (policy_error 2); first policy_error: "
        f"aworld_gym.base.errors.PolicyError: the model endpoint refused the connection: nothing listens at {url} "
        "(start the server, or "
        "fix --base-url / $LLM_BASE_URL)"
    )


def test_help_shows_defaults():
    from aworld_gym.cli import build_parser

    sub = build_parser()._subparsers._group_actions[0].choices  # the subcommands argparse keeps
    rollout = " ".join(sub["rollout"].format_help().split())
    for text in ("episodes in all (at least 1) (default: 32)", "episodes running at once (default: 8)",
                 "(GRPO groups) (default: 1)", "episode i resets with seed+i (default: 0)",
                 "(default: reference)", "(default: cycle)", "(default: runs/<env>-<time>.jsonl)"):  # fmt: skip
        assert text in rollout, text
    assert "(default: None)" not in rollout and "(default: False)" not in rollout
    serve = " ".join(sub["serve-env"].format_help().split())
    assert "(default: 8000)" in serve and "(default: 600.0)" in serve and "(default: 127.0.0.1)" in serve
    assert "(default: 40.0)" in " ".join(sub["report"].format_help().split())
    assert "(default: 8940)" in " ".join(sub["serve-python"].format_help().split())


def test_envs_shows_needs_tools_and_reference_policies(lab):
    p = cli(lab, "envs", "--import", "mylab")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[:3] == [
        "id                 turns  needs                                reference  tools",
        "AWorld/MCP-v0      20     tasks, mcp_config | servers | tools  yes        ?",
        "AWorld/Code-v0     8      -                                    yes        run_python",
    ]
    assert lines[4].startswith(
        "AWorld/Browser-v0  20     -                                    yes        browser_navigate, "
    )
    assert lines[5:8] == [
        "Lab/Bare-v0        20     tasks                                no         convert",
        "Lab/Broken-v0      4      -                                    yes        ?",
        "Lab/Converter-v0   4      -                                    yes        ?",
    ]
    assert (
        lines[-1] == "?: tools known once the env is made: --probe makes each env (starting its servers) to list them"
    )
    rows = json.loads(cli(lab, "envs", "--import", "mylab", "--json").stdout)
    assert rows[-1] == {"id": "Lab/Converter-v0", "max_turns": 4, "needs": [], "tools": None, "reference_policy": True}
    assert rows[1] == {"id": "AWorld/Code-v0", "max_turns": 8, "needs": [], "tools": ["run_python"],
                       "reference_policy": True}  # fmt: skip


def test_envs_probe_makes_the_env_for_its_real_tools(lab):
    from aworld_gym.cli import _probe_tools

    sys.path.insert(0, str(lab))
    try:
        import mylab  # noqa: F401 - registers Lab/*
    finally:
        sys.path.remove(str(lab))
    assert _probe_tools("Lab/Converter-v0") == ["convert"]
    assert (
        _probe_tools("Lab/Bare-v0")
        == "(not made: ConfigError: MCPEnv needs tasks=: a .jsonl path, a list of dicts, or a datasets.Dataset)"
    )


@pytest.mark.parametrize("env_id", ["AWorld/Code-v0", "AWorld/GAIA-v0"])
def test_declared_tool_names_are_the_envs_real_tools(env_id):
    """`aworld-gym envs` shows declared names without starting servers: they must be what the env really offers."""
    from aworld_gym.cli import _probe_tools
    from aworld_gym.core.registry import describe

    assert describe(env_id)["tools"] == _probe_tools(env_id)
