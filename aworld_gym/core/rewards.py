"""Rewards as a rubric: weighted components, sync or async, per step, at episode end and per GRPO group.

A reward hook is a callable returning a float or a ``{component: value}`` dict (or an awaitable of one). Where it
runs is its ``on``:

- ``"step"``: ``hook(ctx: StepContext)`` after every step;
- ``"episode"``: ``hook(ctx: EpisodeContext)`` once, on the step that ends the episode (it sees the whole turn log);
- ``"group"``: ``hook(records: list[dict]) -> list[float | dict]`` (one per episode) on a complete GRPO group, by
  whoever holds the whole group (the collector, the TRL and verl adapters).

Wrap a callable in :class:`Hook` (or decorate it with :func:`reward_hook`) to give it a ``weight`` (each value is
multiplied by it; weight 0 makes it a logged metric, ``info["metrics"]``, that does not count), a name and its
``on``. A plain callable is a step hook of weight 1. ``info["reward_components"]`` holds the weighted
components and always sums to the reward. A hook that raises is a recorded ``info["reward_errors"]`` entry (its
components are missing), never a crash of the run; ``strict=True`` envs re-raise instead.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from aworld_gym.base.errors import ConfigError
from aworld_gym.core.trajectory import Termination

if TYPE_CHECKING:
    from aworld_gym.core.actions import ParsedAction
    from aworld_gym.core.task import Task
    from aworld_gym.mcp.results import ToolResult

__all__ = [
    "AnswerLengthPenalty",
    "CallCost",
    "EpisodeContext",
    "FormatPenalty",
    "Hook",
    "PassRateBonus",
    "RewardHook",
    "Rubric",
    "Scores",
    "StepContext",
    "TaskScore",
    "ToolErrorPenalty",
    "apply_hooks",
    "default_hooks",
    "reward_hook",
]


@dataclass
class StepContext:
    """Everything a step hook may look at for one step (``results[i].structured`` holds MCP structuredContent)."""

    task: Task
    turn: int
    action: str
    parsed: ParsedAction
    results: list[ToolResult] = field(default_factory=list)
    answer: str | None = None
    score: float | None = None
    action_error: str | None = None
    terminated: bool = False
    truncated: bool = False
    truncation_reason: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class EpisodeContext:
    """What an episode hook sees: the task, the env's whole turn log and the last step.

    Attributes:
        task: the episode's task.
        turns: the env's turn log (one dict per turn: action, tool calls and results, observation, reward...).
        last: the context of the step that ended the episode.
        reward: the episode's reward so far (every step's reward, before episode hooks).
        components: the episode's reward components so far, summed over its steps.
    """

    task: Task
    turns: list[dict[str, Any]]
    last: StepContext
    reward: float = 0.0
    components: dict[str, float] = field(default_factory=dict)

    @property
    def score(self) -> float | None:
        return self.last.score

    @property
    def answer(self) -> str | None:
        return self.last.answer

    @property
    def terminated(self) -> bool:
        return self.last.terminated

    @property
    def truncation_reason(self) -> str | None:
        return self.last.truncation_reason


RewardHook = Callable[..., Any]
Stage = Literal["step", "episode", "group"]
_STAGES = ("step", "episode", "group")


@dataclass
class Hook:
    """A reward hook with its weight, name and stage.

    Args:
        fn: the hook (sync or async).
        weight: multiplies every value the hook returns; 0 records the values as metrics only.
        name: the component name for a hook that returns a bare float (default: ``fn.name`` or its ``__name__``).
        on: ``"step"``, ``"episode"`` or ``"group"``.
    """

    fn: Callable[..., Any]
    weight: float = 1.0
    name: str | None = None
    on: Stage = "step"

    def __post_init__(self) -> None:
        if self.on not in _STAGES:
            raise ConfigError(f"a reward hook's on= must be one of {_STAGES}, got {self.on!r}")
        if not callable(self.fn):
            raise ConfigError(f"a reward hook must be callable, got {type(self.fn).__name__}")
        self.name = self.name or getattr(self.fn, "name", None) or getattr(self.fn, "__name__", None) or "hook"


def reward_hook(
    fn: Callable[..., Any] | None = None, *, weight: float = 1.0, name: str | None = None, on: Stage = "step"
) -> Any:
    """Make ``fn`` a :class:`Hook` (usable as ``@reward_hook`` or ``@reward_hook(weight=0.5, on="episode")``)."""
    if fn is None:
        return lambda f: Hook(f, weight, name, on)
    return Hook(fn, weight, name, on)


def as_hook(hook: Any) -> Hook:
    """A :class:`Hook` from a hook or a plain callable (its ``on`` attribute, if any, says where it runs)."""
    if isinstance(hook, Hook):
        return hook
    return Hook(hook, on=getattr(hook, "on", "step"))


def resolve_hooks(hooks: Iterable[Any]) -> list[Hook]:
    """Hooks from a list whose entries may also be import paths, ``"package.module:name"`` naming a hook or a list of
    hooks (so that env kwargs with hooks stay JSON: the CLI's ``--env-kwargs``, ``serve-env``, Ray)."""
    out: list[Hook] = []
    for hook in hooks:
        if isinstance(hook, str):
            hook = _import(hook)
            if isinstance(hook, list | tuple):
                out.extend(as_hook(h) for h in hook)
                continue
        out.append(as_hook(hook))
    return out


def _import(path: str) -> Any:
    import importlib

    module, _, name = path.partition(":")
    if not module or not name:
        raise ConfigError(f"a reward hook given as text is 'package.module:name', got {path!r}")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"reward hook {path!r} cannot be imported: {exc}") from exc


@dataclass
class Scores:
    """What one stage's hooks gave: weighted components (they sum to the reward), weight-0 metrics, errors."""

    components: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return float(sum(self.components.values()))

    def add(self, hook: Hook, value: Any) -> None:
        if type(value) is dict and not value:
            return  # the common "nothing this step"
        items = value.items() if isinstance(value, Mapping) else [(hook.name, value)]
        values = [(key, float(v)) for key, v in items]  # all or nothing: a bad value adds none of the hook's
        for key, v in values:
            if hook.weight == 0:
                self.metrics[key] = self.metrics.get(key, 0.0) + v
            else:
                self.components[key] = self.components.get(key, 0.0) + hook.weight * v

    def merge(self, other: Scores) -> None:
        for key, v in other.components.items():
            self.components[key] = self.components.get(key, 0.0) + v
        for key, v in other.metrics.items():
            self.metrics[key] = self.metrics.get(key, 0.0) + v
        self.errors.update(other.errors)


class Rubric:
    """An env's (or a wrapper's) reward hooks, split by stage.

    Args:
        hooks: hooks, :class:`Hook` objects, plain callables (step hooks of weight 1), or import paths
            (``"package.module:name"``, a hook or a list of hooks).
        strict: re-raise a hook's exception instead of recording it in ``errors``.
    """

    def __init__(self, hooks: Iterable[Any] = (), strict: bool = False) -> None:
        self.hooks = resolve_hooks(hooks)
        self.strict = strict
        self.step = [h for h in self.hooks if h.on == "step"]
        self.episode = [h for h in self.hooks if h.on == "episode"]
        self.group = [h for h in self.hooks if h.on == "group"]

    def score(self, hooks: Sequence[Hook], ctx: Any, run: Callable[[Awaitable[Any]], Any] | None = None) -> Scores:
        """Run ``hooks`` on ``ctx`` from sync code (an async hook's awaitable is run with ``run``)."""
        out = Scores()
        for hook in hooks:
            try:
                value = hook.fn(ctx)
                if type(value) is dict:
                    if value:
                        out.add(hook, value)
                    continue
                if inspect.isawaitable(value):
                    if run is None:
                        raise ConfigError(f"reward hook {hook.name!r} is async: run it on the async face")
                    value = run(value)
                out.add(hook, value)
            except Exception as exc:  # noqa: BLE001 - a failing reward hook is recorded, not raised
                self.record_failure(out, hook, exc)
        return out

    async def ascore(self, hooks: Sequence[Hook], ctx: Any) -> Scores:
        """Run ``hooks`` on ``ctx``, awaiting async ones (several async hooks of one stage run concurrently)."""
        import asyncio

        out = Scores()
        values: list[Any] = []
        for hook in hooks:
            try:
                values.append(hook.fn(ctx))
            except Exception as exc:  # noqa: BLE001 - a failing reward hook is recorded, not raised
                values.append(exc)
        pending = [(i, v) for i, v in enumerate(values) if inspect.isawaitable(v)]
        if pending:
            done = await asyncio.gather(*(v for _, v in pending), return_exceptions=True)
            for (i, _), v in zip(pending, done, strict=True):
                values[i] = v
        for hook, value in zip(hooks, values, strict=True):
            if isinstance(value, BaseException):
                if not isinstance(value, Exception):
                    raise value
                self.record_failure(out, hook, value)
                continue
            try:
                out.add(hook, value)
            except Exception as exc:  # noqa: BLE001 - a failing reward hook is recorded, not raised
                self.record_failure(out, hook, exc)
        return out

    def record_failure(self, out: Scores, hook: Hook, exc: Exception) -> None:
        """A hook that raised (or returned what is not a reward): re-raised when ``strict``, else recorded in
        ``out.errors`` under the hook's name."""
        if self.strict:
            raise exc
        out.errors[hook.name or "hook"] = f"{type(exc).__name__}: {exc}"[:1000]


# ----- built-in hooks -------------------------------------------------------------------------------------
class TaskScore:
    """The terminal task score (the env's scorer applied to the submitted answer), times ``weight``."""

    name = "task"

    def __init__(self, weight: float = 1.0) -> None:
        self.weight = weight

    def __call__(self, ctx: StepContext) -> dict[str, float]:
        if ctx.score is None:
            return {}
        return {self.name: self.weight * float(ctx.score)}


class FormatPenalty:
    """``penalty`` when the turn had a format error or neither a tool call nor an answer."""

    name = "format"

    def __init__(self, penalty: float = -0.1) -> None:
        self.penalty = penalty

    def __call__(self, ctx: StepContext) -> dict[str, float]:
        bad = bool(ctx.parsed.errors) or (not ctx.parsed.tool_calls and ctx.parsed.answer is None)
        return {self.name: self.penalty} if bad and ctx.truncation_reason != Termination.ENV_CRASH else {}


class ToolErrorPenalty:
    """``penalty`` per tool call that failed because of the model (unknown tool, bad arguments, tool error, refused)."""

    name = "tool_error"
    model_errors = frozenset(
        {"unknown_tool", "bad_arguments", "invalid_arguments", "too_large", "tool_error", "refused"}
    )

    def __init__(self, penalty: float = -0.05) -> None:
        self.penalty = penalty

    def __call__(self, ctx: StepContext) -> dict[str, float]:
        n = sum(1 for r in ctx.results if r.error in self.model_errors)
        return {self.name: self.penalty * n} if n else {}


class CallCost:
    """A cost per tool call and per second of tool latency (both given as non-positive numbers)."""

    name = "call_cost"

    def __init__(self, per_call: float = -0.01, per_second: float = 0.0) -> None:
        self.per_call = per_call
        self.per_second = per_second

    def __call__(self, ctx: StepContext) -> dict[str, float]:
        if not ctx.results:
            return {}
        cost = self.per_call * len(ctx.results) + self.per_second * sum(r.latency_s for r in ctx.results)
        return {self.name: cost}


class AnswerLengthPenalty:
    """``per_char`` times the characters of the answer beyond ``free_chars``."""

    name = "answer_length"

    def __init__(self, free_chars: int = 200, per_char: float = -0.001) -> None:
        self.free_chars = free_chars
        self.per_char = per_char

    def __call__(self, ctx: StepContext) -> dict[str, float]:
        if ctx.answer is None or len(ctx.answer) <= self.free_chars:
            return {}
        return {self.name: self.per_char * (len(ctx.answer) - self.free_chars)}


class PassRateBonus:
    """Group hook: a solved episode (score >= ``threshold``) gets ``bonus * (1 - pass rate of its group)``, so that
    solving a task most samples fail pays more; the others get 0."""

    name = "pass_rate_bonus"
    on = "group"

    def __init__(self, bonus: float = 0.5, threshold: float = 1.0) -> None:
        self.bonus = bonus
        self.threshold = threshold

    def __call__(self, records: Sequence[Mapping[str, Any]]) -> list[dict[str, float]]:
        solved = [r.get("score") is not None and float(r["score"]) >= self.threshold - 1e-9 for r in records]
        rate = sum(solved) / len(records) if records else 0.0
        return [{self.name: self.bonus * (1.0 - rate) if s else 0.0} for s in solved]


def default_hooks() -> list[Any]:
    """Task score, format penalty and tool-error penalty."""
    return [TaskScore(), FormatPenalty(), ToolErrorPenalty()]


def apply_hooks(hooks: Iterable[Any], ctx: StepContext) -> dict[str, float]:
    """Run sync step hooks on ``ctx``: the weighted components (a bare float is named after its hook). Raises what a
    hook raises."""
    return Rubric(hooks, strict=True).score([as_hook(h) for h in hooks], ctx).components
