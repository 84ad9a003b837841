"""The tool-choice environment (no model): disjoint splits, the right-tool rule, hooks by import path, and the
learning criterion's false-pass probability."""

from __future__ import annotations

import json
import random

import gymnasium as gym
import pytest

import aworld_gym  # noqa: F401
from aworld_gym.base.errors import ConfigError
from aworld_gym.core.rewards import resolve_hooks
from aworld_gym.fixtures.toy import (
    demo_actions,
    learning_criterion,
    lookup_table,
    tool_choice_env_kwargs,
    tool_choice_tasks,
    wordings,
)


def test_the_splits_share_no_operand_key_or_wording_and_need_their_tool():
    splits = {name: tool_choice_tasks(name) for name in ("train", "validation", "test")}
    assert {k: len(v) for k, v in splits.items()} == {"train": 144, "validation": 72, "test": 72}
    for a, b in [("train", "validation"), ("train", "test"), ("validation", "test")]:
        assert not {t["id"] for t in splits[a]} & {t["id"] for t in splits[b]}
        for op in ("add", "multiply", "lookup"):
            numbers = [set(t["reference"]["turns"][0][0]["arguments"].values()) for t in (*splits[a], *splits[b])
                       if t["tool"] == op]  # fmt: skip
            side = {s: set().union(*(set(t["reference"]["turns"][0][0]["arguments"].values())
                                     for t in splits[s] if t["tool"] == op)) for s in (a, b)}  # fmt: skip
            assert numbers and side[a] and side[b] and not side[a] & side[b], (a, b, op)  # other operands, keys
            assert not set(wordings(a, op)) & set(wordings(b, op)), (a, b, op)  # other templates
    for split, tasks in splits.items():  # each task's prompt is one of its split's wordings, with its numbers
        for t in tasks:
            args = t["reference"]["turns"][0][0]["arguments"]
            assert t["prompt"] in {w.format(**args) for w in wordings(split, t["tool"])}, t
    test = splits["test"]  # every test wording of every tool is asked, and no test task is a train task swapped
    assert {t["prompt"].split(" ")[0] for t in test} == {"Tell", "Say"}
    train_pairs = {frozenset(t["reference"]["turns"][0][0]["arguments"].values()) for t in splits["train"]}
    assert not train_pairs & {frozenset(t["reference"]["turns"][0][0]["arguments"].values()) for t in test}
    # the lookup values depend on the seed: they cannot be learned by heart across task sets
    assert lookup_table(0) != lookup_table(1)
    assert tool_choice_tasks("train", seed=1) != splits["train"]
    for bad in ("heldout", "dev"):
        with pytest.raises(ValueError, match="split"):
            tool_choice_tasks(bad)


def test_a_right_answer_scores_only_with_the_tasks_own_tool_call():
    kwargs = tool_choice_env_kwargs("validation")
    json.dumps({k: v for k, v in kwargs.items() if k != "mcp_config"})  # the hooks are an import path: JSON
    env = gym.make("AWorld/MCP-v0", **kwargs)
    try:
        for task in env.unwrapped.tasks[::7]:
            item = {"answer": task.answer, "reference": task.metadata["reference"]}
            env.reset(options={"task_id": task.id})
            call, answer = demo_actions(item, wrong_tool=False)
            env.step(call)
            _, reward, terminated, _, info = env.step(answer)
            assert terminated and reward == 1.0 and info["reward_components"] == {"task": 1.0}, task.id
            env.reset(options={"task_id": task.id})  # the right answer with no tool call: nothing
            _, reward, _, _, info = env.step(f"<answer>{task.answer}</answer>")
            assert reward == 0.0 and info["reward_components"] == {"task": 1.0, "no_tool": -1.0}
            env.reset(options={"task_id": task.id})  # the wrong tool: its result is a wrong answer
            call, answer = demo_actions(item, wrong_tool=True)
            env.step(call)
            assert env.step(answer)[1] == 0.0
        add = next(t for t in env.unwrapped.tasks if t.metadata["tool"] == "add")
        a, b = add.metadata["reference"]["turns"][0][0]["arguments"].values()
        env.reset(options={"task_id": add.id})  # the right tool on other numbers, then the right answer: nothing
        env.step(f'<tool_call>{{"name": "add", "arguments": {{"a": {a + 1}, "b": {b - 1}}}}}</tool_call>')
        assert env.step(f"<answer>{a + b}</answer>")[1] == 0.0
    finally:
        env.close()


def test_reward_hooks_by_import_path():
    hooks = resolve_hooks(["aworld_gym.fixtures.toy:TOOL_CHOICE_HOOKS"])
    assert [h.on for h in hooks] == ["step", "step", "step", "episode"]
    assert resolve_hooks(["aworld_gym.fixtures.toy:right_tool"])[0].fn.__name__ == "right_tool"
    for bad in ("no_colon", "aworld_gym.fixtures.toy:missing", "no.such.module:x"):
        with pytest.raises(ConfigError):
            resolve_hooks([bad])


def test_the_criterion_passes_a_run_that_did_not_learn_at_most_one_time_in_a_hundred():
    assert learning_criterion([True] * 49 + [False] * 95, [True] * 78 + [False] * 66)[0]
    assert not learning_criterion([True] * 49 + [False] * 95, [True] * 52 + [False] * 92)[0]
    assert not learning_criterion([True] * 60 + [False] * 84, [True] * 50 + [False] * 94)[0]  # one-sided
    # No learning: before and after are the same Bernoulli; the false-pass rate stays under alpha at any rate.
    rng = random.Random(0)
    for rate in (0.05, 0.3, 0.5, 0.8):
        runs = 2000
        passes = sum(
            learning_criterion([rng.random() < rate for _ in range(144)], [rng.random() < rate for _ in range(144)])[0]
            for _ in range(runs)
        )
        assert passes / runs <= 0.01, (rate, passes)
