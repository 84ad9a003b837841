"""OpenEnv's wire format for AWorld envs (openenv-core 0.3): the action, observation and state models whose JSON
schemas ``/schema`` serves, the observation as sent, a reset's fields, and the error a message gets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class AWorldAction(BaseModel):
    """One model turn (OpenEnv's ``Action``: ``metadata`` plus this env's fields)."""

    model_config = ConfigDict(extra="forbid")
    metadata: dict[str, Any] = Field(default_factory=dict)
    text: str = Field(description="the model's raw output for this turn: <tool_call>{...}</tool_call> or <answer>...")


class AWorldObservation(BaseModel):
    """What the env answered (OpenEnv's ``Observation``: ``done``, ``reward``, ``metadata`` plus this env's fields;
    on the wire ``done`` and ``reward`` sit beside the observation, and ``metadata`` is not sent)."""

    model_config = ConfigDict(extra="forbid")
    done: bool = False
    reward: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    text: str = Field("", description="the env's observation: the task on reset, the tool responses after a step")
    messages: list[dict[str, Any]] = Field(default_factory=list, description="the chat messages the env added")
    tools: list[dict[str, Any]] = Field(default_factory=list, description="the tools' JSON schemas (on reset)")
    task_id: str | None = None
    turn: int = 0
    status: str | None = Field(None, description="once done: ok, failed, or void (infrastructure's fault: mask it)")
    termination: str | None = None
    reward_components: dict[str, float] = Field(default_factory=dict)
    score: float | None = None
    error: str | None = None


class AWorldState(BaseModel):
    """The session's episode (OpenEnv's ``State``: ``episode_id``, ``step_count``, more fields allowed)."""

    model_config = ConfigDict(extra="allow")
    episode_id: str | None = None
    step_count: int = 0
    env_id: str = ""
    task_id: str | None = None
    status: str | None = None
    termination: str | None = None
    reward: float = 0.0


class SessionError(Exception):
    """A message this session cannot act on (answered as an error frame; the socket stays open)."""

    def __init__(self, message: str, code: str = "EXECUTION_ERROR") -> None:
        super().__init__(message)
        self.code = code


def wire(obs: AWorldObservation) -> dict[str, Any]:
    """An observation as OpenEnv sends it: ``{"observation": fields, "reward": r, "done": d}``."""
    return {"observation": obs.model_dump(exclude={"reward", "done", "metadata"}), "reward": obs.reward,
            "done": obs.done}  # fmt: skip


def reset_options(data: Mapping[str, Any]) -> tuple[int | None, dict[str, Any] | None, str | None]:
    """``(seed, options, episode_id)`` from a reset message's data: ``seed``, ``episode_id``, the task as
    ``task_id`` / ``task_index`` / ``task``, or ``options`` (``reset``'s, passed as they are)."""
    seed = data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise SessionError(f"seed must be a non-negative integer, got {seed!r}", "VALIDATION_ERROR")
    options = dict(data.get("options") or {})
    for key in ("task_id", "task_index", "task"):
        if key in data:
            options[key] = data[key]
    unknown = set(data) - {"seed", "episode_id", "options", "task_id", "task_index", "task"}
    if unknown:
        raise SessionError(f"unknown reset field(s) {sorted(unknown)}: seed, episode_id, task_id, task_index, task, "
                           "options are known", "VALIDATION_ERROR")  # fmt: skip
    episode_id = data.get("episode_id")
    return seed, options or None, str(episode_id) if episode_id is not None else None
