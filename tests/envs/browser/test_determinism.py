"""The same seed and the same actions give byte-identical observations, run after run: no timestamped log or
snapshot file names, no per-run page-server origin or token (tested over every reference task, after every
step, in two envs that each start their own page server and browser context)."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest

import aworld_gym  # noqa: F401
from aworld_gym.envs.browser.reference import REFERENCE_TASKS, BrowserReferencePolicy
from tests.envs.browser.test_browser import pytestmark as needs_browser

pytestmark = [needs_browser, pytest.mark.slow]
RUN_DEPENDENT = re.compile(r"\d{4}-\d\d-\d\dT\d\d|127\.0\.0\.1|console-|\.yml\b")


def observations(env, task: str, seed: int) -> list[str]:
    policy = BrowserReferencePolicy()
    obs, info = env.reset(seed=seed, options={"task_id": task})
    seen = [obs]
    for _ in range(12):
        obs, _, terminated, truncated, info = env.step(policy.act(env.unwrapped, obs, info))
        seen.append(obs)
        if terminated or truncated:
            break
    return seen


def test_same_seed_same_actions_same_observations():
    runs = []
    for _ in range(2):
        env = gym.make("AWorld/Browser-v0", tasks=list(REFERENCE_TASKS))
        try:
            runs.append({task: observations(env, task, seed) for seed, task in enumerate(REFERENCE_TASKS)})
        finally:
            env.close()
    first, second = runs
    for task in REFERENCE_TASKS:
        assert len(first[task]) >= 2, task
        for i, (a, b) in enumerate(zip(first[task], second[task], strict=True)):
            assert a == b, f"{task}: observation {i} differs:\n{a[:600]}\n---\n{b[:600]}"
            assert not RUN_DEPENDENT.search(a), f"{task}: run-dependent text in observation {i}: {a[:600]}"
