"""Nothing of Gymnasium is patched: ``import aworld_gym`` and running its envs on both faces leave every Gymnasium
class as it was and write no field of a Gymnasium wrapper; other Gymnasium envs in the process behave exactly as
without the import; a user's own Gymnasium wrapper still runs on the async face (through ``collect``)."""

import asyncio
import json
import subprocess
import sys
import threading
import warnings

import gymnasium as gym
import pytest
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker, TimeLimit

from aworld_gym.core.faces import AsyncFaceError, async_face
from aworld_gym.mcp.demo_server import build_server
from aworld_gym.rollout.collect import collect
from aworld_gym.rollout.policies.plan import PlanPolicy
from tests.helpers import ROOT, TASKS, demo_env_kwargs

# Every class Gymnasium defines, as (module, name) -> {attribute: id(value)}: taken before `import aworld_gym`, then
# after it and after an AWorld env ran on both faces, wrapped in Gymnasium's wrappers and a user's own.
SNAPSHOT = """
import gymnasium, gymnasium.wrappers, gymnasium.vector, gymnasium.envs.registration, gymnasium.utils.env_checker
import gymnasium.utils.passive_env_checker, gymnasium.wrappers.vector, gymnasium.spaces, inspect, json, sys

def classes():
    out = {}
    for name, mod in sorted(sys.modules.items()):
        if name == "gymnasium" or name.startswith("gymnasium."):
            for cname, cls in vars(mod).items():
                if inspect.isclass(cls) and cls.__module__.startswith("gymnasium"):
                    # __slotnames__: copyreg's cache, set by any copy of a spec (Gymnasium's own TimeLimit.spec too)
                    out[f"{cls.__module__}:{cls.__qualname__}"] = {
                        k: id(v) for k, v in vars(cls).items() if k != "__slotnames__"}
    return out

before = classes()
time_limit_reset = gymnasium.wrappers.TimeLimit.reset
import asyncio, aworld_gym
from aworld_gym.mcp.demo_server import build_server
from tests.helpers import TASKS

class Doubled(gymnasium.RewardWrapper):
    def reward(self, reward):
        return 2 * reward

def make():
    return gymnasium.make("AWorld/MCP-v0", mcp_config={"mcpServers": {"demo": build_server}}, tasks=TASKS)

env = aworld_gym.async_face(Doubled(make()))
env.reset(options={"task_id": "add"}); env.step("<answer>5</answer>"); env.close()

async def run():
    env = aworld_gym.async_face(gymnasium.wrappers.RecordEpisodeStatistics(Doubled(make())))
    await env.areset(options={"task_id": "add"}); await env.astep("<answer>5</answer>"); await env.aclose()

asyncio.run(run())
after = classes()
changed = sorted(k for k in before if after.get(k) != before[k])
print(json.dumps({"changed": changed, "astep": hasattr(gymnasium.Wrapper, "astep"),
                  "areset": hasattr(gymnasium.Wrapper, "areset"), "aclose": hasattr(gymnasium.Wrapper, "aclose"),
                  "time_limit_reset": gymnasium.wrappers.TimeLimit.reset is time_limit_reset}))
"""


def run_python(code: str, *args: str) -> str:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_no_gymnasium_class_changes_at_import_or_while_envs_run():
    seen = json.loads(run_python(SNAPSHOT))
    assert seen == {"changed": [], "astep": False, "areset": False, "aclose": False, "time_limit_reset": True}


def public_state(env) -> list[dict]:
    """The instance fields of every Gymnasium wrapper in the stack (their private bookkeeping included)."""
    out, layer = [], env
    while isinstance(layer, gym.Wrapper):
        if type(layer).__module__.startswith("gymnasium"):
            out.append({k: v for k, v in vars(layer).items() if k != "env"})
        layer = layer.env
    return out


def test_the_async_face_writes_no_field_of_a_gymnasium_wrapper():
    env = gym.make("AWorld/MCP-v0", mcp_config={"mcpServers": {"demo": build_server}}, tasks=TASKS,
                   max_episode_steps=2)  # fmt: skip
    kinds = [type(w) for w in (env, env.env, env.env.env)]
    assert kinds == [TimeLimit, OrderEnforcing, PassiveEnvChecker]
    env = async_face(env)
    before = public_state(env)
    assert before[0]["_elapsed_steps"] is None and before[1]["_has_reset"] is False

    async def run():
        await env.areset(options={"task_id": "add"})
        rows = [await env.astep('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 1}}</tool_call>')]
        rows.append(await env.astep('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 1}}</tool_call>'))
        await env.aclose()
        return rows

    rows = asyncio.run(run())
    assert [r[3] for r in rows] == [False, True] and rows[1][4]["truncation_reason"] == "turn_limit"
    assert public_state(env) == before  # counted, checked and closed on our side


CARTPOLE = """
import json, sys, asyncio
import gymnasium as gym
if sys.argv[1] != "without":
    import aworld_gym

def actions(n):
    space = gym.spaces.Discrete(2, seed=3)
    return [int(space.sample()) for _ in range(n)]

def sync_run(env):
    rows = []
    for episode in range(3):
        obs, _ = env.reset(seed=episode)
        rows.append({"reset": obs.tolist()})
        for a in actions(20):
            obs, r, te, tr, _ = env.step(a)
            rows.append({"obs": obs.tolist(), "r": float(r), "te": te, "tr": tr})
            if te or tr:
                break
    env.close()
    return rows

async def async_run(env):
    rows = []
    for episode in range(3):
        obs, _ = await env.areset(seed=episode)
        rows.append({"reset": obs.tolist()})
        for a in actions(20):
            obs, r, te, tr, _ = await env.astep(a)
            rows.append({"obs": obs.tolist(), "r": float(r), "te": te, "tr": tr})
            if te or tr:
                break
    await env.aclose()
    return rows

make = lambda: gym.make("CartPole-v1", max_episode_steps=7)
if sys.argv[1] == "async":
    rows = asyncio.run(async_run(aworld_gym.async_face(make())))
else:
    rows = sync_run(make())
print(json.dumps(rows))
"""


def test_cartpole_behaves_exactly_as_without_the_import():
    without, with_import, on_async_face = (json.loads(run_python(CARTPOLE, m)) for m in ("without", "with", "async"))
    assert with_import == without
    assert on_async_face == without  # Gymnasium's TimeLimit/OrderEnforcing/PassiveEnvChecker on the async face
    assert sum(1 for row in without if row.get("tr")) >= 1  # a TimeLimit truncation was in the run
    assert len(without) > 10


class Plus(gym.RewardWrapper):
    """A user's own reward wrapper (Gymnasium's base step, its own reward())."""

    def reward(self, reward):
        return 10 * reward + 1


def test_a_users_reward_wrapper_runs_through_collect():
    kwargs = demo_env_kwargs(3)
    plain = collect(lambda: gym.make("AWorld/MCP-v0", **kwargs), PlanPolicy, episodes=3, progress=False)
    wrapped = collect(lambda: Plus(gym.make("AWorld/MCP-v0", **kwargs)), PlanPolicy, episodes=3, progress=False)
    assert plain.recorded == wrapped.recorded == 3 and plain.successes == 3
    # every turn r -> 10 r + 1
    assert wrapped.total_reward == 10 * plain.total_reward + plain.total_turns
    assert plain.total_reward == 3.0 and plain.total_turns == 6


class LockedGuard:
    """A guard holding a lock: a gym.make keyword that Gymnasium's spec copy cannot deep-copy."""

    def __init__(self):
        self.lock = threading.Lock()

    def __call__(self, tool, arguments):
        return None


def test_a_keyword_gymnasium_cannot_copy_still_makes_the_env_and_runs_it_on_both_faces():
    """TimeLimit's public view of its limit is its spec, which Gymnasium cannot make here (the keyword does not
    deep-copy); the async face reads the limit off the wrapper instead (issue 48: the spec copied every keyword, a
    run's task list included, into each env), so both faces truncate at 2."""

    def make():
        return gym.make("AWorld/MCP-v0", mcp_config={"mcpServers": {"demo": build_server}}, tasks=TASKS,
                        guard=LockedGuard(), max_episode_steps=2)  # fmt: skip

    async def run_async(env):
        await env.areset(options={"task_id": "add"})
        try:
            return [(await env.astep("no call"))[3] for _ in range(2)]
        finally:
            await env.aclose()

    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        env, other = make(), make()
        assert env.spec is None  # TimeLimit's spec could not be made
        env.reset(options={"task_id": "add"})
        assert [env.step("no call")[3] for _ in range(2)] == [False, True]  # Gymnasium's own TimeLimit
        face = async_face(other)
        assert asyncio.run(run_async(face)) == [False, True]  # the async equivalent, with the same limit
    env.close()


def test_a_time_limit_without_its_steps_or_a_spec_is_refused_on_the_async_face_by_name():
    """Where the wrapper's limit cannot be read at all (no ``_max_episode_steps``, no spec), the async face refuses
    it before an episode, saying why."""
    env = gym.make("AWorld/MCP-v0", mcp_config={"mcpServers": {"demo": build_server}}, tasks=TASKS,
                   guard=LockedGuard(), max_episode_steps=2)  # fmt: skip
    try:
        assert isinstance(env, TimeLimit) and env.spec is None
        del env._max_episode_steps  # a TimeLimit of another make, without the attribute
        with pytest.raises(AsyncFaceError, match="could not be deep-copied"):
            async_face(env)
    finally:
        env.close()
