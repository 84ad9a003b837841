"""The registry below rollout: reference policies and worker shares declared with an id, read by rollout."""

import pytest

import aworld_gym
from aworld_gym.base.errors import ConfigError
from aworld_gym.core import registry
from aworld_gym.envs.browser import browsers
from aworld_gym.rollout.policies import make_policy
from tests.helpers import registered_ids


@pytest.fixture(autouse=True)
def no_active(monkeypatch):
    monkeypatch.delenv(browsers.ACTIVE_ENV, raising=False)


def test_each_id_gets_its_own_share_and_an_unknown_env_every_declared_one():
    per_worker = str(16 * browsers.ACTIVE_PER_CPU // 3)  # 16 CPUs of browser slots over 3 workers
    assert registry.worker_environ("AWorld/Browser-v0", 3, 16) == {browsers.ACTIVE_ENV: per_worker}
    assert registry.worker_environ("AWorld/Code-v0", 3, 16) == {}  # no per-process gate: nothing set
    # a factory's name or a warm pool: the engine cannot know the env, so every declared share
    assert registry.worker_environ("make_my_env", 3, 16) == {browsers.ACTIVE_ENV: per_worker}
    assert registry.worker_environ(None, 3, 16) == {browsers.ACTIVE_ENV: per_worker}


def test_register_declares_the_reference_policy_and_share_and_replaces_them():
    class Units:
        def __init__(self, latency_s: float = 0.0) -> None:
            self.latency_s = latency_s

    with registered_ids("Lab/Reg-v0"):
        aworld_gym.register("Lab/Reg-v0", "aworld_gym.core.env:MCPEnv", reference_policy=Units,
                            worker_share=lambda n, cpus: {"LAB": str(n)})  # fmt: skip
        assert aworld_gym.reference_policy("Lab/Reg-v0") is Units is registry.REFERENCE_POLICIES["Lab/Reg-v0"]
        assert make_policy("reference", "Lab/Reg-v0", latency_s=0.5).latency_s == 0.5
        assert registry.worker_environ("Lab/Reg-v0", 4) == {"LAB": "4"}
        assert registry.worker_environ("unknown", 4, 16) == {"LAB": "4", browsers.ACTIVE_ENV: "16"}  # 64 slots / 4
        aworld_gym.register("Lab/Reg-v0", "aworld_gym.core.env:MCPEnv")  # re-registered without them
        assert registry.worker_environ("Lab/Reg-v0", 4) == {}
        with pytest.raises(ConfigError, match="Lab/Reg-v0 has no reference policy"):
            make_policy("reference", "Lab/Reg-v0")


def test_a_builtin_reference_policy_is_loaded_from_its_string():
    from aworld_gym.envs.code.reference import CodeReferencePolicy

    assert registry.reference_policy("AWorld/Code-v0") == "aworld_gym.envs.code.reference:CodeReferencePolicy"
    assert isinstance(make_policy("reference", "AWorld/Code-v0"), CodeReferencePolicy)
