"""Parse health: whether the model still calls tools, and whether its calls parse, per episode and over a run.

The field's most reported training failure is a model that stops calling tools (a run that reached 0.93 reward
without one call) or whose calls stop parsing; the records say so turn by turn, this module says it at a glance and
while the run goes. From each record (:func:`episode_health`), over its model turns:

- ``tool_turns``: turns with at least one tool call;
- ``parse_failures`` by kind (the env's format errors: ``unclosed_tag``, ``invalid_json``, ``tool_call_and_answer``,
  ``too_many_calls``, ``too_many_arguments``, ``stray_close_tag``, ``nested_tags``, ``not_text``, ``other``);
- ``unknown_tools`` and ``bad_arguments``: calls that named no tool, or did not fit its schema;
- ``empty``: turns with no text at all;
- ``answer_without_tool_call``: the episode answered without ever calling a tool.

:class:`ParseHealth` sums them over a run (``collect``'s summary, ``aworld-gym report``) and keeps a sliding window
of the last ``window`` episodes: when the share of episodes with no tool call, or of turns that failed to parse,
crosses its threshold it says so loudly, once per crossing (a :class:`ParseHealthWarning` and a log line).
"""

from __future__ import annotations

import logging
import re
import warnings
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ALARMS",
    "EpisodeHealth",
    "ParseHealth",
    "ParseHealthWarning",
    "episode_health",
    "error_kinds",
    "health_metrics",
    "info_turn",
]

logger = logging.getLogger(__name__)

ALARMS = ("no_tool_call", "parse_failures")  # the alarms ParseHealth raises, by name
FORMAT_ERROR = "Format error: "  # how the env's observation opens on a turn with format errors (core.running)

# the env's format errors (aworld_gym.core.actions), by kind: each match of a pattern is one error of its kind
_INVALID_JSON = (
    r'invalid JSON|nested too deeply|expected a JSON object|block is empty|missing "name"|"arguments" (?:is|must)'
)
_KINDS = (
    ("unclosed_tag", re.compile(r"never closed")),
    ("nested_tags", re.compile(r"cannot be nested")),
    ("stray_close_tag", re.compile(r"without a matching")),
    ("tool_call_and_answer", re.compile(r"either tool calls or a final answer")),
    ("too_many_calls", re.compile(r"tool calls in one reply")),
    ("too_many_arguments", re.compile(r"arguments; at most \d+ are accepted")),
    ("invalid_json", re.compile(_INVALID_JSON)),
    ("not_text", re.compile(r"must be a string")),
)


class ParseHealthWarning(UserWarning):
    """A run's model stopped calling tools, or its calls stopped parsing (over the last episodes of the run)."""


def error_kinds(text: str) -> Counter[str]:
    """The format errors in the text of a turn's format-error line, by kind (``other``: one that none names)."""
    found = Counter({kind: n for kind, pattern in _KINDS if (n := len(pattern.findall(text)))})
    return found or Counter({"other": 1})


@dataclass
class EpisodeHealth:
    """One episode's parse health (see the module)."""

    turns: int = 0
    tool_turns: int = 0
    parse_failures: Counter[str] = field(default_factory=Counter)
    failed_turns: int = 0
    unknown_tools: int = 0
    bad_arguments: int = 0
    empty: int = 0
    answered: bool = False

    @property
    def answer_without_tool_call(self) -> bool:
        return self.answered and self.tool_turns == 0


def info_turn(info: Mapping[str, Any]) -> dict[str, Any]:
    """A turn as :func:`episode_health` reads it, from a step's ``info`` (what a face sees that drives the env's
    steps itself, RLlib's): its tool calls and results, and its parse errors (``info["parse_errors"]``)."""
    errors = info.get("parse_errors") or []
    return {"tool_calls": info.get("tool_calls"), "tool_results": info.get("tool_results"), "action": "-",
            "observation": FORMAT_ERROR + "; ".join(map(str, errors)) if errors else ""}  # fmt: skip


def episode_health(record: Mapping[str, Any]) -> EpisodeHealth:
    """The parse health of one trajectory record."""
    health = EpisodeHealth(answered=record.get("answer") is not None)
    for turn in record.get("turns") or []:
        if not isinstance(turn, Mapping):
            continue
        health.turns += 1
        health.tool_turns += bool(turn.get("tool_calls"))
        health.empty += not str(turn.get("action") or "").strip()
        observation = str(turn.get("observation") or "")
        if observation.startswith(FORMAT_ERROR):
            health.failed_turns += 1
            health.parse_failures.update(error_kinds(observation.split("\n", 1)[0]))
        for result in turn.get("tool_results") or []:
            kind = result.get("error") if isinstance(result, Mapping) else None
            health.unknown_tools += kind == "unknown_tool"
            health.bad_arguments += kind in ("bad_arguments", "invalid_arguments")
    return health


@dataclass
class ParseHealth:
    """A run's parse health, and its alarm over the last ``window`` episodes.

    Args:
        window: the episodes the alarm looks at.
        no_tool_call: the alarm's share of episodes (of the window) with no tool call at all.
        parse_failures: the alarm's share of turns (of the window's) whose text failed to parse.
        min_episodes: the alarm waits for this many episodes (a window's worth by default, at most 200).
        alarm: ``False`` turns the alarm off (the counts stay).
        quiet: the alarm is only kept (``alarms``), neither warned nor logged (``aworld-gym report`` reading a run).

    ``timeline()`` gives the run's course: the shares of up to ``points`` consecutive slices of its episodes.
    """

    window: int = 200
    no_tool_call: float = 0.95
    parse_failures: float = 0.2
    min_episodes: int | None = None
    alarm: bool = True
    quiet: bool = False
    episodes: int = 0
    turns: int = 0
    tool_turns: int = 0
    failed_turns: int = 0
    failures_by_kind: Counter[str] = field(default_factory=Counter)
    unknown_tools: int = 0
    bad_arguments: int = 0
    empty: int = 0
    no_tool_episodes: int = 0
    answers_without_tool_call: int = 0
    alarms: list[str] = field(default_factory=list)
    _recent: deque[EpisodeHealth] = field(default_factory=deque, repr=False)
    _raised: set[str] = field(default_factory=set, repr=False)
    # per episode, in order: (called a tool at all, turns, turns that failed to parse), for timeline()
    _course: list[tuple[bool, int, int]] = field(default_factory=list, repr=False)

    def add(self, record: Mapping[str, Any]) -> EpisodeHealth:
        """Count one record in; returns its health. May raise the alarm (a warning, once per crossing)."""
        health = episode_health(record)
        self.episodes += 1
        self.turns += health.turns
        self.tool_turns += health.tool_turns
        self.failed_turns += health.failed_turns
        self.failures_by_kind.update(health.parse_failures)
        self.unknown_tools += health.unknown_tools
        self.bad_arguments += health.bad_arguments
        self.empty += health.empty
        self.no_tool_episodes += health.tool_turns == 0
        self.answers_without_tool_call += health.answer_without_tool_call
        self._course.append((health.tool_turns > 0, health.turns, health.failed_turns))
        if self.alarm:
            self._recent.append(health)
            if len(self._recent) > self.window:
                self._recent.popleft()
            self._check()
        return health

    def _check(self) -> None:
        n = len(self._recent)
        if n < (self.min_episodes if self.min_episodes is not None else min(self.window, 200)):
            return
        no_tool = sum(h.tool_turns == 0 for h in self._recent) / n
        turns = sum(h.turns for h in self._recent)
        failed = sum(h.failed_turns for h in self._recent) / turns if turns else 0.0
        self._say("no_tool_call", no_tool >= self.no_tool_call,
                  f"no tool call in {100 * no_tool:.0f}% of the last {n} episodes (alarm at "
                  f"{100 * self.no_tool_call:.0f}%): the model has stopped using its tools")  # fmt: skip
        self._say("parse_failures", failed > self.parse_failures,
                  f"{100 * failed:.0f}% of the turns of the last {n} episodes failed to parse (alarm above "
                  f"{100 * self.parse_failures:.0f}%): the model's tool calls are malformed")  # fmt: skip

    def _say(self, name: str, crossed: bool, message: str) -> None:
        if not crossed:
            self._raised.discard(name)  # back under: the next crossing is said again
            return
        if name in self._raised:
            return
        self._raised.add(name)
        text = f"parse health, after {self.episodes} episodes: {message}"
        self.alarms.append(text)
        if not self.quiet:
            logger.warning(text)
            warnings.warn(text, ParseHealthWarning, stacklevel=2)

    @property
    def raised(self) -> frozenset[str]:
        """The alarms over their threshold now (``no_tool_call``, ``parse_failures``)."""
        return frozenset(self._raised)

    def timeline(self, points: int = 50) -> dict[str, list[Any]]:
        """The run's course in up to ``points`` consecutive slices of its episodes: the last episode of each
        (1-based), the share of its episodes that called a tool, and of its turns that failed to parse."""
        n = len(self._course)
        size = max(1, -(-n // points))
        ends, tools, failed = [], [], []
        for start in range(0, n, size):
            part = self._course[start : start + size]
            turns = sum(t for _, t, _ in part)
            ends.append(start + len(part))
            tools.append(sum(called for called, _, _ in part) / len(part))
            failed.append(sum(f for _, _, f in part) / turns if turns else 0.0)
        return {"episodes": ends, "tool_call_episodes": tools, "parse_failure_turns": failed}

    def shares(self) -> dict[str, float]:
        """The run's shares: turns with a tool call, turns that failed to parse, episodes with no tool call,
        episodes that answered without one."""
        t, e = self.turns or 1, self.episodes or 1
        return {"tool_call_turns": self.tool_turns / t, "parse_failure_turns": self.failed_turns / t,
                "no_tool_call_episodes": self.no_tool_episodes / e,
                "answered_without_tool_call_episodes": self.answers_without_tool_call / e}  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {"episodes": self.episodes, "turns": self.turns, "tool_turns": self.tool_turns,
                "failed_turns": self.failed_turns, "failures_by_kind": dict(sorted(self.failures_by_kind.items())),
                "unknown_tools": self.unknown_tools, "bad_arguments": self.bad_arguments, "empty": self.empty,
                "no_tool_episodes": self.no_tool_episodes,
                "answers_without_tool_call": self.answers_without_tool_call, **self.shares(),
                "alarms": list(self.alarms)}  # fmt: skip

    def render(self) -> str:
        """One line: the shares and the counts that matter."""
        s = self.shares()
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.failures_by_kind.items()))
        return (f"{100 * s['tool_call_turns']:.0f}% of turns call a tool; {100 * s['parse_failure_turns']:.0f}% "
                f"fail to parse{f' ({kinds})' if kinds else ''}; {self.unknown_tools} unknown tool names, "
                f"{self.bad_arguments} bad arguments, {self.empty} empty replies; "
                f"{self.answers_without_tool_call} answers without a tool call")  # fmt: skip


def health_metrics(episodes: Any) -> dict[str, float]:
    """What trainer faces log beside ``void/rate``: ``parse/tool_call_turns``, ``parse/failure_turns``,
    ``parse/no_tool_call_episodes`` (shares) and ``parse/unknown_tools`` (calls), over trajectories or records."""
    health = ParseHealth(alarm=False)
    for episode in episodes:
        record = episode if isinstance(episode, Mapping) else {"turns": episode.turns, "answer": episode.answer}
        health.add(record)
    shares = health.shares()
    return {"parse/tool_call_turns": shares["tool_call_turns"], "parse/failure_turns": shares["parse_failure_turns"],
            "parse/no_tool_call_episodes": shares["no_tool_call_episodes"],
            "parse/unknown_tools": float(health.unknown_tools)}  # fmt: skip
