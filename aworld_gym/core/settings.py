"""An env's settings in four typed groups, and the flat keywords that map onto them.

``MCPEnv`` takes its settings as group objects or as the flat keywords ``gym.make`` passes through; both forms
reach the same fields::

    MCPEnv(config, tasks, limits=Limits(max_turns=3), tool_options=ToolOptions(timeout=5))
    gym.make("AWorld/MCP-v0", mcp_config=config, tasks=tasks, max_turns=3, tool_timeout=5)   # the same env

- :class:`Limits`: how long an episode may run and how much of it the model sees;
- :class:`~aworld_gym.mcp.options.ToolOptions`: what tool calls may do and how they run (``ToolHub`` takes it whole);
- :class:`Rewards`: how answers are scored and turns rewarded;
- :class:`Rendering`: what the model reads (system prompt, tool list) and how its text is parsed.

:data:`FLAT` is the one table from a flat keyword to its ``(group, field)``. Setting a field both ways (a flat
keyword and a group object whose field is not the default) is a :class:`ConfigError`, so is an unknown keyword (the
message suggests the closest valid name). A subclass env takes the user's settings with :meth:`Settings.take`, adds
its own with :meth:`Settings.with_defaults` (what the user did not set) and :meth:`Settings.fixed` (what the user may
not set), and hands the result to ``MCPEnv(settings=...)``. ``render_mode`` stays a keyword of its own: Gymnasium's.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from aworld_gym.base.errors import ConfigError
from aworld_gym.base.settings import Check, SettingsGroup, flag
from aworld_gym.core.actions import ActionParser, get_parser
from aworld_gym.core.prompts import TOOL_FORMATS
from aworld_gym.core.scoring import Scorer, get_scorer
from aworld_gym.mcp.config import count
from aworld_gym.mcp.options import ToolOptions

__all__ = ["FLAT", "GROUPS", "Limits", "Rendering", "Rewards", "Settings", "ToolOptions"]


@dataclass(frozen=True)
class Limits(SettingsGroup):
    """How long an episode may run and how much of it the model is shown.

    Attributes:
        max_turns: turn limit (``gym.make``'s ``max_episode_steps`` applies too: the smaller one wins); ``None``: none
            of the env's own.
        max_episode_chars: character budget over all actions and observations (truncates: ``token_budget``).
        max_tool_output_tokens: what the model is shown of each tool result is cut at this many tokens of
            ``tokenizer``, with a note.
        tokenizer: the policy model's tokenizer (an object with ``encode``/``decode``, or a local folder), needed by
            ``max_tool_output_tokens``.
        max_observation_chars: bound of the observation and action spaces.
        truncate_on_infra_error: end the episode (``tool_timeout`` / ``env_crash``) when a tool times out or its
            server dies; otherwise the model sees the error and goes on.
    """

    max_turns: int | None = None
    max_episode_chars: int | None = None
    max_tool_output_tokens: int | None = None
    tokenizer: Any = None
    max_observation_chars: int = 1_000_000
    truncate_on_infra_error: bool = True

    CHECKS: ClassVar[Mapping[str, Check]] = {}

    def check_together(self, where: str) -> None:
        if self.max_tool_output_tokens is not None and self.tokenizer is None:
            raise ConfigError(f"{where}: max_tool_output_tokens needs tokenizer= (the policy model's tokenizer or its "
                              "folder)")  # fmt: skip


@dataclass(frozen=True)
class Rewards(SettingsGroup):
    """How answers are scored and turns rewarded.

    Attributes:
        scorer: ``"exact"``, ``"contains"``, another registered name, or ``(answer, task) -> float``.
        hooks: reward hooks replacing the defaults (task score, format and tool-error penalties); ``None``: the
            defaults. See :mod:`aworld_gym.core.rewards` for weights, async hooks, episode and group hooks. Flat:
            ``reward_hooks``.
        strict: re-raise the env's own bugs (a task or reward hook that raises, a parser that fails) instead of
            recording them (``env_crash``, ``info["reward_errors"]``): for people writing envs.
    """

    scorer: str | Scorer | None = "exact"
    hooks: Sequence[Any] | None = None
    strict: bool = False

    CHECKS: ClassVar[Mapping[str, Check]] = {}


@dataclass(frozen=True)
class Rendering(SettingsGroup):
    """What the model reads and how its text is read back.

    Attributes:
        action_format: a registered parser name (``"hermes"``, the default) or an :class:`ActionParser`.
        system_prompt: the preamble of the system prompt (the tool list is appended); ``None``: none.
        tool_format: how the system prompt lists the tools: ``"full"`` (their JSON schemas, as Qwen3's chat template
            writes them) or ``"compact"`` (one line each: name, typed parameters, the first sentence of the
            description); ``info["tools"]`` always holds the full schemas.
    """

    action_format: str | ActionParser | None = None
    system_prompt: str | None = None
    tool_format: str = "full"

    CHECKS: ClassVar[Mapping[str, Check]] = {}


def _optional_count(value: Any, where: str, name: str) -> int | None:
    return None if value is None else count(value, f"{where}: {name}")


def _count(value: Any, where: str, name: str) -> int:
    return count(value, f"{where}: {name}")


def _resolving(resolve: Callable[[Any], Any]) -> Check:
    """A check that resolves the value once (a scorer's or a parser's name) and keeps it as given."""

    def check(value: Any, where: str, name: str) -> Any:
        try:
            resolve(value)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {name}: {exc}") from None
        return value

    return check


def _hooks(value: Any, where: str, name: str) -> tuple[Any, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ConfigError(f"{where}: {name} must be a list of reward hooks, got {type(value).__name__}")
    return tuple(value)


def _text(value: Any, where: str, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{where}: {name} must be text, got {type(value).__name__}")
    return value


def _tool_format(value: Any, where: str, name: str) -> str:
    if value not in TOOL_FORMATS:
        raise ConfigError(f"{where}: {name} must be one of {TOOL_FORMATS}, not {value!r}")
    return value


Limits.CHECKS = {
    "max_turns": _optional_count,
    "max_episode_chars": _optional_count,
    "max_tool_output_tokens": _optional_count,
    "max_observation_chars": _count,
    "truncate_on_infra_error": flag,
}
Rewards.CHECKS = {"scorer": _resolving(get_scorer), "hooks": _hooks, "strict": flag}
Rendering.CHECKS = {"action_format": _resolving(get_parser), "system_prompt": _text, "tool_format": _tool_format}

GROUPS: dict[str, type[SettingsGroup]] = {
    "limits": Limits,
    "tool_options": ToolOptions,
    "rewards": Rewards,
    "rendering": Rendering,
}

# Every flat keyword of MCPEnv (and gym.make) and the (group, field) it sets: the one place they are mapped.
FLAT: dict[str, tuple[str, str]] = {
    "max_turns": ("limits", "max_turns"),
    "max_episode_chars": ("limits", "max_episode_chars"),
    "max_tool_output_tokens": ("limits", "max_tool_output_tokens"),
    "tokenizer": ("limits", "tokenizer"),
    "max_observation_chars": ("limits", "max_observation_chars"),
    "truncate_on_infra_error": ("limits", "truncate_on_infra_error"),
    "allow_tools": ("tool_options", "allow"),
    "deny_tools": ("tool_options", "deny"),
    "guard": ("tool_options", "guard"),
    "hidden_arguments": ("tool_options", "hidden_arguments"),
    "sequential_calls": ("tool_options", "sequential"),
    "tool_timeout": ("tool_options", "timeout"),
    "max_tool_output_chars": ("tool_options", "max_output_chars"),
    "max_argument_chars": ("tool_options", "max_argument_chars"),
    "max_argument_depth": ("tool_options", "max_argument_depth"),
    "tool_images": ("tool_options", "images"),
    "elicitation": ("tool_options", "elicitation"),
    "sampling": ("tool_options", "sampling"),
    "roots": ("tool_options", "roots"),
    "tool_cache": ("tool_options", "cache"),
    "scorer": ("rewards", "scorer"),
    "reward_hooks": ("rewards", "hooks"),
    "strict": ("rewards", "strict"),
    "action_format": ("rendering", "action_format"),
    "system_prompt": ("rendering", "system_prompt"),
    "tool_format": ("rendering", "tool_format"),
}
_FLAT_OF = {place: name for name, place in FLAT.items()}  # (group, field) -> its flat keyword


@dataclass(frozen=True)
class Settings:
    """The four groups of one env, and which flat keywords the user set (``given``, for subclasses' defaults)."""

    limits: Limits = field(default_factory=Limits)
    tool_options: ToolOptions = field(default_factory=ToolOptions)
    rewards: Rewards = field(default_factory=Rewards)
    rendering: Rendering = field(default_factory=Rendering)
    given: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    @classmethod
    def take(cls, where: str, keywords: dict[str, Any]) -> Settings:
        """The settings in ``keywords``, taken out of it (group objects and flat keywords; the others stay).

        Args:
            where: who is being configured, as messages name it (``"MCPEnv"``, ``"AWorld/Code-v0"``).
            keywords: the keyword arguments; the ones this takes are removed from it.

        Raises:
            ConfigError: a group object of the wrong type, a field set both as a flat keyword and in its group
                object, or a value its check refuses (the message names the keyword as it was given).
        """
        values: dict[str, dict[str, Any]] = {name: {} for name in GROUPS}
        for name, group in GROUPS.items():
            obj = keywords.pop(name, None)
            if obj is None:
                continue
            if not isinstance(obj, group):
                raise ConfigError(f"{where}: {name}= must be a {group.__name__}, got {type(obj).__name__}")
            values[name] = obj.given()
        for flat in [k for k in keywords if k in FLAT]:
            name, attr = FLAT[flat]
            if attr in values[name]:
                raise ConfigError(f"{where}: {flat}= and {name}={GROUPS[name].__name__}({attr}=...) both set "
                                  f"{name}.{attr}; give it once")  # fmt: skip
            values[name][attr] = GROUPS[name].check(attr, keywords.pop(flat), where, flat)
        given = frozenset(_FLAT_OF.get((name, attr), attr) for name, fs in values.items() for attr in fs)
        groups = {name: GROUPS[name](**fs) for name, fs in values.items()}
        return cls(**groups, given=given)  # type: ignore[arg-type]

    def with_defaults(self, **flat: Any) -> Settings:
        """These settings with an env's own defaults (by flat keyword) for the ones the user did not set."""
        return self.replace(**{k: v for k, v in flat.items() if k not in self.given})

    def fixed(self, where: str, **flat: Any) -> Settings:
        """These settings with values an env defines itself (by flat keyword); the user setting one is an error."""
        for name in flat:
            if name in self.given:
                raise ConfigError(f"{where} defines its own {name!r}; use AWorld/MCP-v0 for custom setups")
        return self.replace(**flat)

    def replace(self, **flat: Any) -> Settings:
        """These settings with new values (by flat keyword), whoever set them (an env adding to the user's list)."""
        changes: dict[str, dict[str, Any]] = {}
        for key, value in flat.items():
            name, attr = FLAT[key]
            changes.setdefault(name, {})[attr] = value
        groups = {name: replace(getattr(self, name), **fs) for name, fs in changes.items()}
        return replace(self, **groups)


def unknown_keyword(where: str, name: str, known: Iterable[str]) -> ConfigError:
    """The error for a keyword nothing takes, with the closest valid name."""
    names = sorted(set(known))
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else "."
    return ConfigError(f"{where} got an unknown keyword {name!r}{hint} It takes: {', '.join(names)}.")
