"""aworld-gym: MCP tool environments as Gymnasium environments for LLM-agent RL.

``import aworld_gym`` registers the ``AWorld/*`` ids and imports nothing heavy (no torch, ray, trl, playwright).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from aworld_gym.base.version import __version__
from aworld_gym.core import registry as _registry
from aworld_gym.core.registry import REFERENCE_POLICIES, reference_policy

if TYPE_CHECKING:  # what the lazy exports below resolve to, for type checkers and IDEs (never imported at run time)
    from aworld_gym.core.env import MCPEnv
    from aworld_gym.core.episode import TaskState
    from aworld_gym.core.faces import AsyncFaceError, AsyncWrapper, async_face
    from aworld_gym.core.judge import LLMJudge
    from aworld_gym.core.resources import LocalServer
    from aworld_gym.core.rewards import Hook, reward_hook
    from aworld_gym.core.task import Task
    from aworld_gym.core.trajectory import Trajectory
    from aworld_gym.mcp.hub import ToolHub
    from aworld_gym.rollout.collect import Summary, collect
    from aworld_gym.rollout.driver import arun_episode, run_episode
    from aworld_gym.rollout.engines import AsyncEngine
    from aworld_gym.rollout.engines.ray_engine import RayEngine
    from aworld_gym.rollout.stream import astream, astream_groups, stream, stream_groups
    from aworld_gym.wrappers.reward_shaping import RewardShaping

__all__ = [
    "ENV_IDS",
    "REFERENCE_POLICIES",
    "AsyncEngine",
    "AsyncFaceError",
    "AsyncWrapper",
    "Hook",
    "LLMJudge",
    "LocalServer",
    "MCPEnv",
    "RayEngine",
    "RewardShaping",
    "Summary",
    "Task",
    "TaskState",
    "ToolHub",
    "Trajectory",
    "__version__",
    "arun_episode",
    "astream",
    "astream_groups",
    "async_face",
    "collect",
    "reference_policy",
    "register",
    "register_envs",
    "reward_hook",
    "run_episode",
    "stream",
    "stream_groups",
]

# Lazy re-exports (name -> module), imported on first use: they keep `import aworld_gym` light.
_LAZY: dict[str, str] = {
    "MCPEnv": "aworld_gym.core.env",
    "Task": "aworld_gym.core.task",
    "ToolHub": "aworld_gym.mcp.hub",
    "RewardShaping": "aworld_gym.wrappers.reward_shaping",
    "Hook": "aworld_gym.core.rewards",
    "reward_hook": "aworld_gym.core.rewards",
    "LocalServer": "aworld_gym.core.resources",
    "TaskState": "aworld_gym.core.episode",
    "LLMJudge": "aworld_gym.core.judge",
    "AsyncFaceError": "aworld_gym.core.faces",
    "AsyncWrapper": "aworld_gym.core.faces",
    "async_face": "aworld_gym.core.faces",
    "Trajectory": "aworld_gym.core.trajectory",
    # the rollout surface
    "collect": "aworld_gym.rollout.collect",
    "Summary": "aworld_gym.rollout.collect",
    "stream": "aworld_gym.rollout.stream",
    "stream_groups": "aworld_gym.rollout.stream",
    "astream": "aworld_gym.rollout.stream",
    "astream_groups": "aworld_gym.rollout.stream",
    "AsyncEngine": "aworld_gym.rollout.engines",
    "RayEngine": "aworld_gym.rollout.engines.ray_engine",
    "run_episode": "aworld_gym.rollout.driver",
    "arun_episode": "aworld_gym.rollout.driver",
}

# id -> (entry point, default max_episode_steps). Every id involves tools: nondeterministic.
ENV_IDS: dict[str, tuple[str, int]] = {}


def register(
    env_id: str,
    entry_point: str | Callable[..., Any],
    *,
    max_episode_steps: int | None = 20,
    reference_policy: str | Callable[..., Any] | None = None,
    worker_share: str | Callable[..., Any] | None = None,
    tool_names: str | Sequence[str] | None = None,
    needs: Sequence[str] | None = None,
    **kwargs: Any,
) -> str:
    """Register an AWorld-style env with Gymnasium: its id, entry point, default turn limit and reference policy.

    Args:
        env_id: the id for ``gym.make`` (``"MyLab/Lookup-v0"``).
        entry_point: ``"package.module:EnvClass"`` or a callable returning the env.
        max_episode_steps: the default turn limit (``gym.make(..., max_episode_steps=N)`` overrides it); the env
            ends that turn itself with ``truncation_reason="turn_limit"``.
        reference_policy: a scripted solver for ``aworld-gym rollout --policy reference`` and
            ``make_policy("reference", env_id)``: a ``"module:Class"`` string or a factory taking ``latency_s``.
        worker_share: for an env whose admission gate is per process, ``(processes, cpus) -> {variable: value}``:
            the environment of one of ``processes`` worker processes on a machine of ``cpus`` CPUs, so that the
            process and Ray engines' workers share the machine's slots (a ``"module:function"`` string or the
            function; see :mod:`aworld_gym.core.registry`).
        tool_names: the names of the env's tools, for ``aworld-gym envs`` (which starts no server): a sequence or a
            ``"module:attr"`` string naming one. Without it, the names of a ``tools=`` default kwarg's functions.
        needs: the keyword arguments ``gym.make`` needs for this id, for ``aworld-gym envs`` (``"a | b"``: either);
            the entry point's parameters without a default are added.
        **kwargs: default keyword arguments of the env (``gym.register``'s ``kwargs``).

    The env reads its id's ``max_episode_steps`` from the registry at reset and ends that turn itself on both faces
    (Gymnasium's ``TimeLimit`` stays as it is). The spec has no additional wrapper: Gymnasium refuses one in
    ``gym.make_vec(..., vectorization_mode="vector_entry_point")``. Re-registering an id replaces it. Returns the id.
    """
    import gymnasium as gym

    if env_id in gym.registry:
        del gym.registry[env_id]
    gym.register(
        id=env_id,
        entry_point=entry_point,
        max_episode_steps=max_episode_steps,
        nondeterministic=True,
        disable_env_checker=False,
        vector_entry_point=_vector_entry_point(env_id),
        kwargs=dict(kwargs),
    )
    names = tool_names if tool_names is None or isinstance(tool_names, str) else tuple(tool_names)
    _registry.declare(env_id, reference_policy=reference_policy, worker_share=worker_share, tool_names=names,
                      needs=tuple(needs) if needs else None)  # fmt: skip
    return env_id


_BUILTIN = (
    ("AWorld/MCP-v0", "aworld_gym.core.env:MCPEnv", 20, "aworld_gym.rollout.policies.plan:PlanPolicy", None),
    ("AWorld/Code-v0", "aworld_gym.envs.code.env:CodeEnv", 8, "aworld_gym.envs.code.reference:CodeReferencePolicy",
     None),
    ("AWorld/GAIA-v0", "aworld_gym.envs.gaia.env:GAIAEnv", 20, "aworld_gym.envs.gaia.reference:GAIAReferencePolicy",
     None),
    ("AWorld/Browser-v0", "aworld_gym.envs.browser.env:BrowserEnv", 20,
     "aworld_gym.envs.browser.reference:BrowserReferencePolicy", "aworld_gym.envs.browser.browsers:active_share"),
)  # fmt: skip
# what `aworld-gym envs` shows of the built-in ids without starting their servers (tests/test_cli_envs.py checks the
# tool names against the envs' real tools with their default kwargs)
_DESCRIBED: dict[str, dict[str, Any]] = {
    "AWorld/MCP-v0": {"needs": ("tasks", "mcp_config | servers | tools")},
    "AWorld/Code-v0": {"tool_names": ("run_python",)},
    "AWorld/GAIA-v0": {"tool_names": ("read_file", "list_files", "describe_image", "transcribe_audio", "web_search",
                                      "fetch_url", "run_python", "run_shell")},
    "AWorld/Browser-v0": {"tool_names": "aworld_gym.envs.browser.env:AGENT_TOOLS"},
}  # fmt: skip


def register_envs() -> list[str]:
    """Register every built-in AWorld id with Gymnasium (idempotent); returns the ids."""
    import gymnasium as gym

    for env_id, entry_point, max_steps, policy, share in _BUILTIN:
        ENV_IDS[env_id] = (entry_point, max_steps)
        described = _DESCRIBED.get(env_id, {})
        if env_id not in gym.registry:
            register(env_id, entry_point, max_episode_steps=max_steps, reference_policy=policy, worker_share=share,
                     **described)  # fmt: skip
        elif env_id not in _registry.DECLARED:  # registered with gym.register directly: ours beside it
            _registry.declare(env_id, reference_policy=policy, worker_share=share, **described)
    return list(ENV_IDS)


class _VectorEntry:
    """RayVectorEnv with the id bound, imported only when a vector env is made (no Ray at import); picklable."""

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id

    def __call__(self, num_envs: int = 1, **kwargs: Any) -> Any:
        from aworld_gym.rollout.engines.ray_vector import RayVectorEnv

        return RayVectorEnv(num_envs=num_envs, env_id=self.env_id, **kwargs)


def _vector_entry_point(env_id: str) -> Any:
    return _VectorEntry(env_id)


register_envs()


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'aworld_gym' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup does not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
