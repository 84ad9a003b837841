"""Typed errors, one per boundary.

Everything that can go wrong inside an episode (bad model output, a failing tool, a dead server) becomes an
observation, never an exception out of ``step()``. These classes are for what must raise: bad configuration,
unusable task data, a server that cannot be started at all. Each message says what to change.
"""

from __future__ import annotations


class AWorldGymError(Exception):
    """Base class of every error raised by aworld-gym."""


class ConfigError(AWorldGymError, ValueError):
    """An environment, server or policy was configured wrongly (the message says what to change)."""


class PromptOverflowError(ConfigError):
    """Every prompt of a training batch overflowed the model's context before the model's first token (the batch
    would train on nothing); the message names the numbers and the largest completion budget that fits."""


class TaskError(AWorldGymError, ValueError):
    """Task data is missing or malformed."""


class ServerError(AWorldGymError):
    """An MCP server could not be started, or died and could not be restarted."""


class EnvCrash(AWorldGymError):
    """The environment's infrastructure failed mid-episode: a reset or step ran past its bound on a face the trainer
    drives (``aworld_gym.rollout.text_episode``); the episode ends void, with ``env_error``."""


class PolicyError(AWorldGymError):
    """A policy (model endpoint, scripted policy) failed to produce an action."""


class SandboxError(AWorldGymError):
    """The code sandbox could not run an execution (not: the code failed, which is a normal result)."""


def last_line(text: object, limit: int = 300) -> str:
    """The last non-empty line of an error (a traceback's last line names the exception), stripped and cut to ``limit``
    characters: how a summary, a log line or a report says in one line why something failed. ``""`` for no text,
    or only whitespace."""
    lines = str(text or "").strip().splitlines()
    return lines[-1].strip()[:limit] if lines else ""
