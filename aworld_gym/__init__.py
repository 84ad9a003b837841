"""aworld-gym: MCP tool environments as Gymnasium environments for LLM-agent RL.

``import aworld_gym`` registers the ``AWorld/*`` ids and imports nothing heavy (no torch, ray, trl, playwright).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# id -> (entry point, default max_episode_steps). Every id involves tools, hence nondeterministic.
ENV_IDS: dict[str, tuple[str, int]] = {
    "AWorld/MCP-v0": ("aworld_gym.core.env:MCPEnv", 20),
    "AWorld/Code-v0": ("aworld_gym.envs.code.env:CodeEnv", 8),
    "AWorld/GAIA-v0": ("aworld_gym.envs.gaia.env:GAIAEnv", 20),
}


def register_envs() -> list[str]:
    """Register every AWorld id with Gymnasium (idempotent); returns the ids."""
    import gymnasium as gym
    from gymnasium.envs.registration import WrapperSpec

    label = WrapperSpec("TruncationReason", "aworld_gym.wrappers.limits:TruncationReason", kwargs={})
    for env_id, (entry_point, max_steps) in ENV_IDS.items():
        if env_id in gym.registry:
            continue
        gym.register(
            id=env_id,
            entry_point=entry_point,
            max_episode_steps=max_steps,
            nondeterministic=True,
            disable_env_checker=False,
            additional_wrappers=(label,),
        )
    return list(ENV_IDS)


register_envs()


def __getattr__(name: str) -> Any:
    # Lazy re-exports keep `import aworld_gym` light.
    lazy = {
        "MCPEnv": "aworld_gym.core.env",
        "Task": "aworld_gym.core.task",
        "ToolHub": "aworld_gym.mcp.hub",
        "RewardShaping": "aworld_gym.wrappers.reward_shaping",
    }
    if name in lazy:
        import importlib

        return getattr(importlib.import_module(lazy[name]), name)
    raise AttributeError(f"module 'aworld_gym' has no attribute {name!r}")
