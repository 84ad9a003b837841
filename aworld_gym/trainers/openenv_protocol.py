"""OpenEnv's wire format for AWorld envs (openenv-core 0.3): the action, observation and state models whose JSON
schemas ``/schema`` serves, the observation as sent, a reset's fields, and the error a message gets."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from aworld_gym.base.errors import TaskError
from aworld_gym.base.http_guard import cut
from aworld_gym.core.task import Task, confine_files


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


RESET_FIELDS = ("seed", "episode_id", "options", "task_id", "task_index", "task")
TASK_OPTIONS = ("task_id", "task_index", "task")
MAX_ID_CHARS = 256


@dataclass(frozen=True)
class ClientTasks:
    """Whether a client may bring its own ``task`` at reset, and the one folder its files may name.

    Attributes:
        allowed: a client ``task`` is refused unless the operator allows it (``--allow-client-tasks``).
        files_root: the folder a client task's files must lie in (``--client-files-root``); without one, a client
            task may name no files.
    """

    allowed: bool = False
    files_root: str | Path | None = None


def reset_options(data: Mapping[str, Any], client_tasks: ClientTasks | None = None,
                  ) -> tuple[int | None, dict[str, Any] | None, str | None]:  # fmt: skip
    """``(seed, options, episode_id)`` from a reset message's data: ``seed``, ``episode_id``, the task as
    ``task_id`` / ``task_index`` / ``task``, or ``options`` (holding only those three). Every value is checked (a
    wrong type or an oversized value is a ``VALIDATION_ERROR`` that repeats at most a cut of it); a client ``task``
    is refused unless ``client_tasks`` allows it, and then its files must lie inside its root."""
    unknown = [k for k in data if k not in RESET_FIELDS]
    if unknown:
        raise SessionError(f"unknown reset field(s) {', '.join(cut(k) for k in unknown[:5])}: seed, episode_id, "
                           "task_id, task_index, task, options are known", "VALIDATION_ERROR")  # fmt: skip
    seed = data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64):
        raise SessionError(f"seed must be an integer in [0, 2**64), got {cut(seed)}", "VALIDATION_ERROR")
    given = data.get("options")
    if given is not None and not isinstance(given, dict):
        raise SessionError(f"options must be an object, got {cut(given)}", "VALIDATION_ERROR")
    options = dict(given or {})
    unknown = [k for k in options if k not in TASK_OPTIONS]
    if unknown:
        raise SessionError(f"unknown option(s) {', '.join(cut(k) for k in unknown[:5])}: task_id, task_index, task "
                           "are known", "VALIDATION_ERROR")  # fmt: skip
    options.update({key: data[key] for key in TASK_OPTIONS if key in data})
    if "task_id" in options:
        options["task_id"] = _short_id("task_id", options["task_id"])
    index = options.get("task_index")
    if "task_index" in options and (isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 2**31):
        raise SessionError(f"task_index must be a non-negative integer, got {cut(index)}", "VALIDATION_ERROR")
    if "task" in options:
        options["task"] = client_task(options["task"], client_tasks or ClientTasks())
    episode_id = data.get("episode_id")
    return seed, options or None, None if episode_id is None else _short_id("episode_id", episode_id)


def client_task(row: Any, policy: ClientTasks) -> Task:
    """A client's own task, if ``policy`` allows one: its files confined to the policy's root."""
    if not policy.allowed:
        raise SessionError("a client task is refused: this server serves its own tasks (pick one with task_id or "
                           "task_index; the operator may allow client tasks with --allow-client-tasks)",
                           "VALIDATION_ERROR")  # fmt: skip
    if not isinstance(row, dict):
        raise SessionError(f"task must be an object, got {cut(row)}", "VALIDATION_ERROR")
    try:
        return confine_files(Task.from_dict(row), policy.files_root)
    except TaskError as exc:
        raise SessionError(f"invalid task: {str(exc)[:400]}", "VALIDATION_ERROR") from None


def _short_id(name: str, value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**18:
        return str(value)
    if isinstance(value, str) and len(value) <= MAX_ID_CHARS:
        return value
    raise SessionError(f"{name} must be a string of at most {MAX_ID_CHARS} characters, got {cut(value)}",
                       "VALIDATION_ERROR")  # fmt: skip
