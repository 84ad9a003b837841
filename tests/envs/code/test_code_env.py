"""AWorld/Code-v0 end to end: HumanEval in the sandbox, scoring, the reference policy, bad submissions."""

import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import aworld_gym  # noqa: F401
from aworld_gym.base.errors import ConfigError, TaskError
from aworld_gym.core.task import Task
from aworld_gym.envs.code.reference import CodeReferencePolicy
from aworld_gym.envs.code.scorer import build_program, extract_code
from aworld_gym.envs.code.tasks import humaneval_tasks, solution_of
from aworld_gym.rollout.collect import collect


@pytest.fixture(scope="module")
def env():
    e = gym.make("AWorld/Code-v0", server="inprocess")
    yield e
    e.close()


def answer(code):
    return f"<answer>\n```python\n{code}\n```\n</answer>"


def test_humaneval_ships_164_problems():
    src = humaneval_tasks()
    assert len(src) == 164 and src[0].id == "HumanEval/0"
    assert {"entry_point", "test", "canonical_solution"} <= set(src[0].metadata)


def test_check_env():
    e = gym.make("AWorld/Code-v0", server="inprocess")
    check_env(e.unwrapped, skip_render_check=True)
    e.close()


def test_prompt_and_tools(env):
    obs, info = env.reset(options={"task_id": "HumanEval/0"})
    assert "def has_close_elements" in obs and "<answer>" in obs
    assert [t["function"]["name"] for t in info["tools"]] == ["run_python"]
    assert "canonical" not in obs and "check(" not in obs  # hidden tests stay hidden


def test_reference_policy_solves_all_164():
    """Through the tool interface, with the shared server, 4 episodes at a time."""
    s = collect("AWorld/Code-v0", CodeReferencePolicy, episodes=164, concurrency=4, progress=False)
    assert (s.recorded, s.successes) == (164, 164), (s.terminations, s.first_errors)


def test_wrong_hanging_and_crashing_solutions_score_zero(env):
    env.reset(options={"task_id": "HumanEval/0"})
    obs, r, term, _, info = env.step(answer("def has_close_elements(numbers, threshold):\n    return False"))
    assert (r, term, info["score"]) == (0.0, True, 0.0), obs
    assert "AssertionError" in env.unwrapped.last_verdict.reason
    env.reset(options={"task_id": "HumanEval/0"})
    _, r, *_ = env.step(answer("def has_close_elements(numbers, threshold):\n    while True:\n        pass"))
    hung = env.unwrapped.last_verdict.result  # the wall clock or the CPU limit (both 10 s here) stops it first
    assert r == 0.0 and (hung.timed_out or hung.signal == "SIGXCPU"), hung.render()
    env.reset(options={"task_id": "HumanEval/0"})
    _, r, *_ = env.step(answer("import os\nos.kill(os.getpid(), 9)"))
    assert r == 0.0
    env.reset(options={"task_id": "HumanEval/0"})
    _, r, *_ = env.step(answer("this is not python"))
    assert r == 0.0
    env.reset(options={"task_id": "HumanEval/0"})  # the env is still healthy
    _, r, *_ = env.step(answer(solution_of(env.unwrapped.task)))
    assert r == 1.0


def test_submission_formats(env):
    task = env.unwrapped.tasks.get("HumanEval/2")
    body = task.metadata["canonical_solution"]
    full = solution_of(task)
    for text in (full, f"```python\n{full}```", f"Here you go:\n```py\n{full}```\nDone.", body):
        program = build_program(text, task)
        assert program.rstrip().endswith("check(truncate_number)")
    assert extract_code("```python\na = 1\n```\ntext\n```python\nb = 2\n```") == "b = 2\n"
    env.reset(options={"task_id": "HumanEval/2"})
    assert env.step(f"<answer>{body}</answer>")[1] == 1.0  # a bare completion body works too


def test_user_tasks_in_humaneval_shape(tmp_path):
    rows = [
        {
            "task_id": "mine/double",
            "prompt": "def double(x):\n    '''Return 2*x.'''\n",
            "entry_point": "double",
            "test": "def check(candidate):\n    assert candidate(3) == 6\n",
            "canonical_solution": "    return 2 * x\n",
        }
    ]
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    e = gym.make("AWorld/Code-v0", tasks=str(path), server="inprocess")
    e.reset(seed=0)
    assert e.step(answer("def double(x):\n    return x + x"))[1] == 1.0
    e.reset(seed=0)
    assert e.step(answer("def double(x):\n    return x"))[1] == 0.0
    e.close()
    with pytest.raises(TaskError, match="entry_point"):
        gym.make("AWorld/Code-v0", tasks=[{"task_id": "x", "prompt": "def f(): pass"}], server="inprocess")
    with pytest.raises(ConfigError, match="defines its own"):
        gym.make("AWorld/Code-v0", mcp_config={"mcpServers": {}})


def test_tool_use_then_answer_multi_turn(env):
    env.reset(options={"task_id": "HumanEval/0"})
    call = {"name": "run_python", "arguments": {"code": "print(sum(range(10)))"}}
    obs, r, term, trunc, info = env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
    assert "45" in obs and not term and info["tool_results"][0]["error"] is None
    obs, r, term, trunc, info = env.step("I am not sure.")
    assert "no tool call and no final answer" in info["action_error"]


def test_scoring_never_runs_in_our_process(env, tmp_path):
    marker = tmp_path / "pwned"
    env.reset(options={"task_id": "HumanEval/0"})
    code = f"open({str(marker)!r}, 'w').write('x')\ndef has_close_elements(a, b):\n    return False"
    env.step(answer(code))
    assert not marker.exists()


def test_task_without_reference_solution_fails_the_policy_cleanly():
    e = gym.make(
        "AWorld/Code-v0",
        tasks=[{"task_id": "t", "prompt": "def f():\n", "entry_point": "f", "test": "def check(c): pass"}],
        server="inprocess",
    )
    from aworld_gym.rollout.driver import run_episode

    rec = run_episode(e, CodeReferencePolicy(), env_id="AWorld/Code-v0", seed=0)
    assert rec["termination"] == "policy_error" and "no canonical_solution" in rec["error"]
    e.close()
    assert isinstance(Task("a", "b"), Task)


def test_every_canonical_solution_builds_in_every_submission_format():
    """Full function, fenced block, body completion with or without its first indentation: all parse."""
    for task in humaneval_tasks():
        body, full = task.metadata["canonical_solution"], solution_of(task)
        for text in (body, body.strip(), full, f"```python\n{full}```"):
            compile(build_program(text, task), task.id, "exec")  # parse only; nothing runs here
