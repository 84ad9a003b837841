"""A model endpoint that fails at random (429, 500, a non-JSON 200, a dropped connection, a hang): the transient
faults are retried, every episode is recorded exactly once, every valid answer the endpoint served became exactly
one turn, and what could not be recovered ends its episode as a readable ``policy_error``."""

from __future__ import annotations

import functools
from collections import Counter

import pytest

from aworld_gym.rollout.engines import AsyncEngine
from aworld_gym.rollout.policies.openai_policy import OpenAIPolicy
from aworld_gym.rollout.stream import stream
from tests.fake_openai import FakeOpenAI
from tests.helpers import demo_env_kwargs

EPISODES = 60


@pytest.mark.slow
def test_random_endpoint_faults_lose_no_episode_and_no_answer():
    with FakeOpenAI() as fake:
        fake.chaos, fake.chaos_hang_s = 0.3, 3.0
        policy = functools.partial(OpenAIPolicy, model="m", base_url=fake.url, api_key="k", retries=3,
                                   backoff_s=0.01, timeout_s=1.0)  # fmt: skip
        records = list(stream("AWorld/MCP-v0", policy, episodes=EPISODES, group_size=2, engine=AsyncEngine(8),
                              env_kwargs=demo_env_kwargs(6)))  # fmt: skip
        served, injected = fake.served, dict(fake.injected)
    keys = Counter((r["task_id"], r["sample"]) for r in records)
    assert len(keys) == EPISODES and set(keys.values()) == {1}
    assert set(injected) == {"429", "500", "garbage", "drop", "hang"}, injected  # every fault kind was hit
    assert sum(r["num_turns"] for r in records) == served  # each valid answer is one turn, none lost or reused
    ends = Counter(r["termination"] for r in records)
    assert set(ends) <= {"answer", "policy_error"}, ends
    assert ends["answer"] >= EPISODES // 2  # retries recover most transient faults
    for r in records:
        if r["termination"] == "policy_error":
            last = r["error"].strip().splitlines()[-1]
            assert len(last) < 400 and "\x00" not in last, last
