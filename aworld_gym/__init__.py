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
    "AWorld/Browser-v0": ("aworld_gym.envs.browser.env:BrowserEnv", 20),
}


def register_envs() -> list[str]:
    """Register every AWorld id with Gymnasium (idempotent); returns the ids."""
    import gymnasium as gym

    for env_id, (entry_point, max_steps) in ENV_IDS.items():
        if env_id in gym.registry:
            continue
        gym.register(
            id=env_id,
            entry_point=entry_point,
            max_episode_steps=max_steps,
            nondeterministic=True,
            disable_env_checker=False,
            vector_entry_point=_vector_entry_point(env_id),
        )
    return list(ENV_IDS)


def _vector_entry_point(env_id: str) -> Any:
    """RayVectorEnv with the id bound, imported only when a vector env is made (no Ray at import)."""

    def make(num_envs: int = 1, **kwargs: Any) -> Any:
        from aworld_gym.rollout.ray_vector import RayVectorEnv

        return RayVectorEnv(num_envs=num_envs, env_id=env_id, **kwargs)

    return make


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
