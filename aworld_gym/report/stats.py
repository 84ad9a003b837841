"""The numbers of a run, computed in one streaming pass over its trajectory records.

Per run: episodes, success rate, pass@k (the unbiased estimator of Chen et al. 2021 over the tasks with at least k
samples; k = 1 and every power of two up to the samples per task), mean reward and score, mean reward per
component, turns, terminations by kind, tool calls and tool errors per tool, and latency per part of an episode
(reset, policy, env, total; p50/p90). Grouped by a task field (``by``: ``level``, or any key of a record's
``task_meta``) the same headline numbers per group. Only small per-episode numbers are kept, never transcripts.
A record the report cannot read (:func:`aworld_gym.report.records.problem`) is skipped and counted by reason
(``malformed`` in the summary); NaN and infinite rewards are numbers and stay in the means.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from aworld_gym.core.pass_at_k import pass_table
from aworld_gym.core.trajectory import FAILED, OK, VOID, status_of
from aworld_gym.report.records import problem
from aworld_gym.rollout.health import ParseHealth
from aworld_gym.rollout.jobs import is_success
from aworld_gym.rollout.sinks import iter_records

PARTS = ("reset_s", "policy_s", "env_s", "total_s")
NOT_A_RECORD = "not a record (a line or row that is no JSON object)"
DIGITS = re.compile(r"([0-9]+)")  # ASCII digits, as the viewer's /[0-9]+/


def natural_key(text: str) -> tuple[tuple[str | int, ...], str]:
    """A sort key that orders runs of digits by their number: ``HumanEval/2`` before ``HumanEval/10``.

    The text splits into alternating text and digit runs (text first, so like positions hold like types); equal
    numbers written differently (``7`` and ``07``) fall back to the text. The viewer's ``natural`` compares alike.
    """
    parts = DIGITS.split(text)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), text


def quantile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile with linear interpolation between closest ranks (numpy's default); None when empty."""
    if not values:
        return None
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def task_field(record: Mapping[str, Any], field: str) -> Any:
    """A record's value of a task field: ``task_meta[field]``, else a top-level key (``task_id``, ``env_id``)."""
    meta = record.get("task_meta") or {}
    value = meta.get(field) if isinstance(meta, Mapping) else None
    return value if value is not None else record.get(field)


class RunStats:
    """Accumulates the numbers of one run, a record at a time."""

    def __init__(self, name: str, by: str | None = None, alarm: Mapping[str, Any] | None = None) -> None:
        self.name, self.by = name, by
        self.episodes = 0
        self.successes = 0
        self.positive = 0  # score > 0: BrowserGym's success (MiniWoB partial credit counts), beside ours (score 1)
        self.rewards: list[float] = []
        self.scores: list[float] = []
        self.turns: list[float] = []
        self.components: dict[str, list[float]] = defaultdict(list)
        self.terminations: Counter[str] = Counter()
        self.statuses: Counter[str] = Counter()
        self.void_kinds: Counter[str] = Counter()
        self.tools: dict[str, Counter[str]] = defaultdict(Counter)
        self.tool_latency: dict[str, list[float]] = defaultdict(list)
        self.parts: dict[str, list[float]] = defaultdict(list)
        self.tasks: dict[str, list[int]] = {}  # task id -> [samples, successes]
        self.groups: dict[str, RunStats] = {}
        self.envs: Counter[str] = Counter()
        self.policies: Counter[str] = Counter()
        self.malformed: Counter[str] = Counter()  # records skipped, by what was wrong with them
        # whether the model calls tools and its calls parse; the alarm the run would have raised (``alarm``: its
        # window and thresholds, ParseHealth's keywords), kept, not warned
        self.health = ParseHealth(**{**(alarm or {}), "quiet": True})

    def add(self, record: Mapping[str, Any]) -> bool:
        """Count ``record``; a malformed one is only counted as such. Returns whether it was read."""
        reason = problem(record)
        if reason is not None:
            self.malformed[reason] += 1
            return False
        self.episodes += 1
        ok = is_success(record)
        self.successes += ok
        self.rewards.append(float(record.get("reward") or 0.0))
        if record.get("score") is not None:
            self.scores.append(float(record["score"]))
            self.positive += float(record["score"]) > 0
        self.turns.append(float(record.get("num_turns") or len(record.get("turns") or [])))
        for name, value in (record.get("reward_components") or {}).items():
            self.components[name].append(float(value))
        self.terminations[str(record.get("termination") or "unfinished")] += 1
        self.health.add(record)
        status = record.get("status") or status_of(record.get("termination"), record.get("score"),
                                                   bool(record.get("terminated")))  # fmt: skip
        self.statuses[status] += 1
        if status == VOID:
            self.void_kinds[str(record.get("termination") or "unknown")] += 1
        for turn in record.get("turns") or []:
            for result in turn.get("tool_results") or []:
                tool = str(result.get("name") or "?")
                self.tools[tool]["calls"] += 1
                if result.get("error"):
                    self.tools[tool]["errors"] += 1
                    self.tools[tool][f"error:{result['error']}"] += 1
                if result.get("latency_s") is not None:
                    self.tool_latency[tool].append(float(result["latency_s"]))
        for part in PARTS:
            value = (record.get("timings") or {}).get(part)
            if value is not None:
                self.parts[part].append(float(value))
        task = str(record.get("task_id"))
        counts = self.tasks.setdefault(task, [0, 0])
        counts[0] += 1
        counts[1] += ok
        self.envs[str(record.get("env_id"))] += 1
        self.policies[str(record.get("policy"))] += 1
        if self.by is not None:
            key = str(task_field(record, self.by))
            if key not in self.groups:
                self.groups[key] = RunStats(f"{self.by}={key}")
            self.groups[key].add(record)
        return True

    def skip(self, lines: int) -> None:
        """Count ``lines`` lines (or Parquet rows) of the file that were not records at all (junk, a torn line)."""
        if lines:
            self.malformed[NOT_A_RECORD] += lines

    def summary(self) -> dict[str, Any]:
        """Every number of the run, as plain JSON-ready values."""
        n = self.episodes
        tools = {}
        for tool, c in sorted(self.tools.items()):
            kinds = {k.removeprefix("error:"): v for k, v in sorted(c.items()) if k.startswith("error:")}
            lat = self.tool_latency.get(tool, [])
            tools[tool] = {"calls": c["calls"], "errors": c["errors"], "error_rate": c["errors"] / c["calls"],
                           "error_kinds": kinds, "latency_p50_s": quantile(lat, 0.5),
                           "latency_p90_s": quantile(lat, 0.9)}  # fmt: skip
        out: dict[str, Any] = {
            "run": self.name,
            "env_ids": dict(self.envs),
            "policies": dict(self.policies),
            "episodes": n,
            "tasks": len(self.tasks),
            "samples_per_task": {
                "min": min((v[0] for v in self.tasks.values()), default=0),
                "max": max((v[0] for v in self.tasks.values()), default=0),
            },
            "successes": self.successes,
            "success_rate": self.successes / n if n else None,
            "positive_score_rate": self.positive / n if n else None,
            "pass_at_k": pass_table({t: (v[0], v[1]) for t, v in self.tasks.items()}),
            "reward_mean": _mean(self.rewards),
            "score_mean": _mean(self.scores),
            "reward_components": {
                k: {"mean": _mean(v), "episodes": len(v)} for k, v in sorted(self.components.items())
            },
            "turns": {
                "mean": _mean(self.turns),
                "p50": quantile(self.turns, 0.5),
                "p90": quantile(self.turns, 0.9),
                "max": max(self.turns, default=None),
            },
            "terminations": dict(self.terminations.most_common()),
            "statuses": {k: self.statuses.get(k, 0) for k in (OK, FAILED, VOID)},
            # infrastructure's failures (masked in training): void/rate and void/<kind>, as the trainer faces log them
            "void": {"rate": self.statuses.get(VOID, 0) / n if n else None, "by_kind": dict(self.void_kinds)},
            "tools": tools,
            "parse_health": {**self.health.to_dict(), "timeline": self.health.timeline()},
            "latency": {
                p: {"p50": quantile(v, 0.5), "p90": quantile(v, 0.9), "mean": _mean(v)} for p, v in self.parts.items()
            },
            "malformed": {"records": sum(self.malformed.values()), "reasons": dict(self.malformed.most_common())},
            "per_task": {
                t: {"samples": v[0], "successes": v[1]}
                for t, v in sorted(self.tasks.items(), key=lambda kv: natural_key(kv[0]))
            },
        }
        if self.by is not None:
            out["by"] = self.by
            out["groups"] = {k: _headline(g) for k, g in sorted(self.groups.items(), key=lambda kv: natural_key(kv[0]))}
        return out


def _headline(g: RunStats) -> dict[str, Any]:
    s = g.summary()
    return {
        k: s[k]
        for k in ("episodes", "tasks", "success_rate", "pass_at_k", "reward_mean", "turns", "terminations", "void")
    }


def summarize(path: str | Path, by: str | None = None, name: str | None = None,
              alarm: Mapping[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """The summary of one trajectory file (streamed); ``alarm``: the parse-health alarm's window and thresholds
    (:class:`~aworld_gym.rollout.health.ParseHealth`'s keywords; default its own)."""
    stats = RunStats(name or str(path), by, alarm)
    skipped: list[int] = []
    for record in iter_records(path, skipped=skipped):
        stats.add(record)
    stats.skip(len(skipped))
    return stats.summary()


def summarize_records(records: Iterable[Mapping[str, Any]], by: str | None = None, name: str = "run") -> dict[str, Any]:
    stats = RunStats(name, by)
    for record in records:
        stats.add(record)
    return stats.summary()


def compare(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Side by side on the tasks every run has: success rate on them, its delta to the first run, and how many of
    those tasks each run solves (at least one sample) that the first does not, and the other way round."""
    common = set.intersection(*(set(r["per_task"]) for r in runs)) if runs else set()

    def rate(r: dict[str, Any]) -> float | None:
        s = sum(r["per_task"][t]["samples"] for t in common)
        return sum(r["per_task"][t]["successes"] for t in common) / s if s else None

    def solved(r: dict[str, Any]) -> set[str]:
        return {t for t in common if r["per_task"][t]["successes"] > 0}

    base = runs[0]
    rows = []
    for r in runs:
        value, ref = rate(r), rate(base)
        rows.append({"run": r["run"], "success_rate": value,
                     "delta": None if value is None or ref is None else value - ref,
                     "solved": len(solved(r)), "gained": len(solved(r) - solved(base)),
                     "lost": len(solved(base) - solved(r))})  # fmt: skip
    return {"common_tasks": len(common), "runs": rows}
