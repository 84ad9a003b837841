"""The typed errors, re-exported from :mod:`aworld_gym.base.errors` (where they live: ``mcp`` uses them too).

``from aworld_gym.core.errors import ConfigError`` keeps working; the classes are the same objects.
"""

from __future__ import annotations

from aworld_gym.base.errors import (
    AWorldGymError,
    ConfigError,
    EnvCrash,
    PolicyError,
    SandboxError,
    ServerError,
    TaskError,
    ToolError,
)

__all__ = [
    "AWorldGymError",
    "ConfigError",
    "EnvCrash",
    "PolicyError",
    "SandboxError",
    "ServerError",
    "TaskError",
    "ToolError",
]
