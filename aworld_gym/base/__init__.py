"""The types every layer shares: a parsed tool call and the typed errors.

``aworld_gym.base`` imports nothing of aworld_gym (not ``core``, not ``mcp``): ``mcp`` and ``core`` both build on it.
"""

from aworld_gym.base.calls import ToolCall
from aworld_gym.base.errors import (
    AWorldGymError,
    ConfigError,
    EnvCrash,
    PolicyError,
    PromptOverflowError,
    SandboxError,
    ServerError,
    TaskError,
)

__all__ = [
    "AWorldGymError",
    "ConfigError",
    "EnvCrash",
    "PolicyError",
    "PromptOverflowError",
    "SandboxError",
    "ServerError",
    "TaskError",
    "ToolCall",
]
