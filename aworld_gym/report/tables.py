"""Terminal tables of run summaries (:mod:`aworld_gym.report.stats`). Every text from a record is escaped
(:func:`aworld_gym.report.records.printable`): a record cannot move the cursor, retitle the terminal or ring it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from aworld_gym.report.records import printable


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> str:
    """A plain-text table: the first column left-aligned, the others right-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(printable(h)), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(values, widths, strict=True))
        )

    out = [printable(title)] if title else []
    out += [line([printable(h) for h in headers]), line(["-" * w for w in widths]), *(line(r) for r in cells)]
    return "\n".join(out)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else f"{value:.3f}"
    return printable(value)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _s(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def render(summary: dict[str, Any]) -> str:
    """Every table of one run."""
    s = summary
    parts = [
        f"run: {printable(s['run'])}",
        f"  env {printable(', '.join(s['env_ids']))}; policy {printable(', '.join(s['policies']))}; "
        f"{plural(s['episodes'], 'episode')} over {plural(s['tasks'], 'task')} ({_samples(s)} per task)",
    ]
    bad = s.get("malformed") or {}
    if bad.get("records"):
        reasons = "; ".join(f"{k}: {v}" for k, v in bad["reasons"].items())
        parts[-1] += f"\n  skipped {plural(bad['records'], 'malformed record')} ({printable(reasons)})"
    head = [("success rate", _pct(s["success_rate"]), f"{s['successes']}/{s['episodes']} (score 1)")]
    if s.get("positive_score_rate") is not None and s["positive_score_rate"] != s["success_rate"]:
        head.append(("score > 0", _pct(s["positive_score_rate"]), "BrowserGym's success (partial credit counts)"))
    for k, v in s["pass_at_k"].items():
        head.append((k, _pct(v["value"]), f"over {v['tasks']} tasks"))
    head += [("mean reward", _cell(s["reward_mean"]), ""), ("mean score", _cell(s["score_mean"]), "")]
    head += [(f"reward: {k}", _cell(v["mean"]), f"{v['episodes']} episodes") for k, v in s["reward_components"].items()]
    t = s["turns"]
    head.append(("turns", _cell(t["mean"]), f"p50 {_cell(t['p50'])}, p90 {_cell(t['p90'])}, max {_cell(t['max'])}"))
    parts.append(table(["", "value", ""], head))
    n = s["episodes"] or 1
    parts.append(table(["termination", "episodes", "share"],
                       [(k, v, _pct(v / n)) for k, v in s["terminations"].items()], "terminations"))  # fmt: skip
    void = s.get("void") or {}
    rows = [(k, v, _pct(v / n)) for k, v in (s.get("statuses") or {}).items()]
    rows += [(f"void: {k}", v, _pct(v / n)) for k, v in (void.get("by_kind") or {}).items()]
    parts.append(table(["status", "episodes", "share"], rows, "statuses (void: infrastructure's fault, masked)"))
    if s["tools"]:
        rows = [(name, v["calls"], v["errors"], _pct(v["error_rate"]),
                 ", ".join(f"{k} {c}" for k, c in v["error_kinds"].items()) or "-",
                 _s(v["latency_p50_s"]), _s(v["latency_p90_s"])) for name, v in s["tools"].items()]  # fmt: skip
        parts.append(table(["tool", "calls", "errors", "error rate", "error kinds", "p50", "p90"], rows, "tool calls"))
    h = s.get("parse_health") or {}
    if h.get("turns"):
        turns, episodes = h["turns"], h["episodes"] or 1
        kinds = ", ".join(f"{k} {v}" for k, v in h["failures_by_kind"].items()) or "-"
        rows = [("turns with a tool call", h["tool_turns"], _pct(h["tool_turns"] / turns), "of the turns"),
                ("turns that failed to parse", h["failed_turns"], _pct(h["failed_turns"] / turns), kinds),
                ("unknown tool names", h["unknown_tools"], "", "calls"),
                ("arguments not fitting the tool", h["bad_arguments"], "", "calls"),
                ("empty replies", h["empty"], _pct(h["empty"] / turns), "of the turns"),
                ("episodes without a tool call", h["no_tool_episodes"], _pct(h["no_tool_episodes"] / episodes), ""),
                ("answers without a tool call", h["answers_without_tool_call"],
                 _pct(h["answers_without_tool_call"] / episodes), "of the episodes")]  # fmt: skip
        parts.append(table(["", "count", "share", ""], rows, "parse health"))
        if h.get("alarms"):
            parts.append("\n".join(f"ALARM {alarm}" for alarm in h["alarms"]))
    if s["latency"]:
        rows = [(p.removesuffix("_s"), _s(v["p50"]), _s(v["p90"]), _s(v["mean"])) for p, v in s["latency"].items()]
        parts.append(table(["part", "p50", "p90", "mean"], rows, "latency per episode"))
    if s.get("groups"):
        ks = sorted({k for g in s["groups"].values() for k in g["pass_at_k"]}, key=lambda k: int(k[5:]))
        rows = [(key, g["episodes"], g["tasks"], _pct(g["success_rate"]),
                 *(_pct(g["pass_at_k"][k]["value"]) if k in g["pass_at_k"] else "-" for k in ks),
                 _cell(g["reward_mean"]), _cell(g["turns"]["mean"])) for key, g in s["groups"].items()]  # fmt: skip
        parts.append(table([s["by"], "episodes", "tasks", "success", *ks, "reward", "turns"], rows, f"by {s['by']}"))
    return "\n\n".join(parts)


def _samples(s: dict[str, Any]) -> str:
    lo, hi = s["samples_per_task"]["min"], s["samples_per_task"]["max"]
    return plural(lo, "sample") if lo == hi else f"{lo}-{hi} samples"


def plural(n: int, one: str, many: str | None = None) -> str:
    """``n`` and its noun: "1 sample", "2 samples" (``many`` where adding an s is wrong)."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def render_comparison(comparison: dict[str, Any]) -> str:
    """The runs side by side on the tasks they all have; a sentence, not a table of dashes, when they share none."""
    if not comparison["common_tasks"]:
        return "comparison: these runs have no task in common, so there is nothing to compare"
    rows = [(r["run"], _pct(r["success_rate"]),
             "-" if r["delta"] is None else f"{100 * r['delta']:+.1f} pts", r["solved"], r["gained"], r["lost"])
            for r in comparison["runs"]]  # fmt: skip
    return table(["run", "success", "delta", "tasks solved", "gained", "lost"], rows,
                 f"comparison on the {plural(comparison['common_tasks'], 'task')} every run has (delta, gained and lost "
                 "against the first run)")  # fmt: skip
