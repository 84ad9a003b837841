"""A self-contained HTML report of one or more runs: summary cards, Plotly charts (plotly.js embedded inline: no
network, no CDN), the comparison of runs, GRPO groups, a filterable episode list and every episode's transcript.

The records are streamed. Every episode is listed; transcripts are embedded up to ``max_mb`` (long texts cut to
``text_chars``), then a uniform sample of them is kept (reservoir sampling) and the page says how many are
embedded; a single transcript over the budget is cut (its last turns left out) and says so. Screenshots a run stored
are embedded as image data up to ``max_image_mb``, then linked by path, and only from the run's own screenshots
folder (:mod:`.shots`). The browser renders lazily: the list page by page, a transcript only when its episode is
opened.

Records are hostile input (:mod:`.records`): a malformed record is skipped and counted, NaN and infinities are
written as text (the embedded JSON is valid JSON), and every text reaches the page as JSON inside a
``<script type="application/json">`` element that it cannot end (``<`` written as ``\\u003c``), control characters
and lone surrogates escaped; the viewer inserts every text with ``textContent``.
"""

from __future__ import annotations

import html
import json
import random
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aworld_gym.base.errors import last_line
from aworld_gym.core.prompts import render_tool_responses
from aworld_gym.report.records import json_safe, printable
from aworld_gym.report.shots import Images
from aworld_gym.report.stats import RunStats, compare, task_field
from aworld_gym.rollout.jobs import is_success
from aworld_gym.rollout.sinks import iter_records
from aworld_gym.rollout.sinks.screenshots import screenshots_folder

HERE = Path(__file__).parent
THINK = re.compile(r"(?s)<think>(.*?)</think>")
# Tool arguments shown as code (real newlines, monospace) even on one line; any other text argument spanning lines too
CODE_ARGUMENTS = frozenset({"code", "script", "source", "program", "command", "cmd", "sql"})


def _cut(text: Any, limit: int) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more characters not embedded]"


def _dumps(value: Any) -> str:
    """JSON text safe to embed in a ``<script>`` element (see :func:`_safe`); NaN and infinities as text."""
    return _safe(json.dumps(json_safe(value), ensure_ascii=False, default=str, allow_nan=False))


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def fit(t: dict[str, Any], limit: int) -> tuple[str, bool]:
    """The transcript ``t`` as embeddable JSON text of at most about ``limit`` bytes, and whether it was cut: over
    the limit its turns are kept while they fit, and ``cut`` says how many were left out (the viewer shows it)."""
    try:
        text = _dumps(t)
    except (RecursionError, ValueError):  # a value nested too deeply to write
        text, t = "", {**t, "task_meta": {}, "metrics": {}}
    if text and _size(text) <= limit:
        return text, False
    turns, kept = t["turns"], []
    used = _size(_dumps({**t, "turns": []})) + 300
    for turn in turns:
        used += _size(_dumps(turn)) + 1
        if used > limit:
            break
        kept.append(turn)
    cut = (f"[... {len(turns) - len(kept)} of this episode's {len(turns)} turns not embedded: its transcript is "
           f"over the page's budget of {limit / 2**20:.2f} MB (--max-mb)]")  # fmt: skip
    text = _dumps({**t, "turns": kept, "cut": cut})
    if _size(text) > limit:  # even without its turns (the prompt, answer and error are cut to text_chars)
        empty = {"prompt": "", "turns": [], "error": None, "answer": "", "components": {}, "timings": {}, "metrics": {},
                 "screenshot": None, "task_meta": {}}  # fmt: skip
        text = _dumps({**empty, "cut": f"[... this episode's transcript is not embedded: over the page's budget "
                                      f"of {limit / 2**20:.2f} MB (--max-mb)]"})  # fmt: skip
    return text, True


def _arguments(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (RecursionError, ValueError):
        return "[arguments not shown: nested too deeply]"


def _call(call: Any, text_chars: int) -> dict[str, Any]:
    """A tool call for the viewer: its name, its arguments as JSON text, and the arguments that are code (a text
    named like :data:`CODE_ARGUMENTS` or spanning lines) apart as ``code`` (name, text), shown with real newlines
    rather than as JSON's ``\\n`` escapes; ``arguments`` is then what remains (``""`` when nothing does)."""
    args = call.get("arguments")
    code: list[dict[str, str]] = []
    if isinstance(args, Mapping):
        code = [{"name": str(k), "text": _cut(v, text_chars)} for k, v in args.items()
                if isinstance(v, str) and (k in CODE_ARGUMENTS or "\n" in v)]  # fmt: skip
        if code:
            apart = {c["name"] for c in code}
            args = {k: v for k, v in args.items() if str(k) not in apart}
    shown = "" if code and not args else _cut(_arguments(args), text_chars)
    return {"name": call.get("name"), "arguments": shown, "code": code}


def _observation(turn: Mapping[str, Any], text_chars: int) -> str | None:
    """The turn's observation when it says more than its tool results: the text the model saw next is usually the
    results joined as ``<tool_response>`` blocks, but an env may add to it or say it instead (Browser-v0's page
    snapshot after a click whose own result is empty, "The task is over.", a format error's feedback)."""
    obs = turn.get("observation")
    if obs is None or obs == "":
        return None
    results = turn.get("tool_results") or []
    if results and str(obs) == render_tool_responses([str(r.get("text") or "") for r in results]):
        return None
    return _cut(obs, text_chars)


def transcript(record: dict[str, Any], text_chars: int, images: Images) -> dict[str, Any]:
    """An episode's transcript for the viewer: the prompt, then each turn's thinking (apart), the rest of the
    action, its tool calls with arguments (code apart), tool results, the observation where it differs from the
    results, reward and components, timings and screenshot."""
    turns = []
    for t in record.get("turns") or []:
        action = str(t.get("action") or "")
        thinking = "\n\n".join(m.strip() for m in THINK.findall(action))
        said = THINK.sub("", action).strip()
        turns.append({
            "turn": t.get("turn"), "thinking": _cut(thinking, text_chars), "action": _cut(said, text_chars),
            "calls": [_call(c, text_chars) for c in t.get("tool_calls") or []],
            "results": [{"name": r.get("name"), "error": r.get("error"), "text": _cut(r.get("text"), text_chars),
                         "latency_s": r.get("latency_s")} for r in t.get("tool_results") or []],
            "observation": _observation(t, text_chars),
            "action_error": t.get("action_error"), "reward": t.get("reward"),
            "components": t.get("reward_components") or {}, "policy_s": t.get("policy_s"), "env_s": t.get("env_s"),
            "screenshot": images(t.get("screenshot")),
        })  # fmt: skip
    return {"prompt": _cut(record.get("prompt"), text_chars), "turns": turns,
            "error": _cut(record.get("error"), text_chars) if record.get("error") else None,
            "answer": _cut(record.get("answer"), text_chars), "components": record.get("reward_components") or {},
            "timings": record.get("timings") or {}, "metrics": record.get("metrics") or {},
            "screenshot": images(record.get("screenshot")), "task_meta": record.get("task_meta") or {}}  # fmt: skip


def build(paths: list[str | Path], out: str | Path, by: str | None = None, max_mb: float = 40.0,
          text_chars: int = 4000, max_image_mb: float = 20.0, seed: int = 0,
          alarm: Mapping[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """Write the report of the runs in ``paths`` to ``out``; returns what it holds (the summaries, counts)."""
    import plotly.offline

    budget = int(max_mb * 2**20)
    rng = random.Random(seed)
    images = Images(int(max_image_mb * 2**20))
    index: list[dict[str, Any]] = []
    kept: dict[int, str] = {}  # episode index -> its transcript as JSON text
    kept_bytes, seen_after_full, cap, cut = 0, 0, None, 0
    summaries = []
    for run, path in enumerate(paths):
        stats = RunStats(str(path), by, alarm)
        images.root = screenshots_folder(path)
        skipped: list[int] = []
        for record in iter_records(path, skipped=skipped):
            if not stats.add(record):
                continue  # malformed: counted in the run's summary
            i = len(index)
            ok = is_success(record)
            index.append({
                "i": i, "run": run, "task": str(record.get("task_id")), "sample": record.get("sample") or 0,
                "ok": ok, "reward": record.get("reward"), "score": record.get("score"),
                "termination": record.get("termination") or "unfinished", "turns": record.get("num_turns"),
                "status": record.get("status"),
                "group": None if by is None else str(task_field(record, by)), "answer": _cut(record.get("answer"), 200),
                "error": last_line(record.get("error")), "prompt": _cut(record.get("prompt"), 300),
                "total_s": (record.get("timings") or {}).get("total_s"),
            })  # fmt: skip
            text, was_cut = fit(transcript(record, text_chars, images), budget)
            cut += was_cut
            size = _size(text)
            if cap is None and kept_bytes + size <= budget:
                kept[i], kept_bytes = text, kept_bytes + size
                continue
            if cap is None:
                cap = max(1, len(kept))  # full: from here on keep a uniform sample of every transcript seen
                seen_after_full = len(kept)
            seen_after_full += 1
            j = rng.randrange(seen_after_full)
            if j < cap:
                if kept:
                    kept_bytes -= _size(kept.pop(rng.choice(list(kept))))
                kept[i], kept_bytes = text, kept_bytes + size
        stats.skip(len(skipped))
        summaries.append(stats.summary())
    for e in index:
        e["t"] = e["i"] in kept
    data = {
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
        "by": by,
        "runs": summaries,
        "comparison": compare(summaries) if len(summaries) > 1 else None,
        "episodes": index,
        "bound": {
            "max_mb": max_mb,
            "text_chars": text_chars,
            "embedded": len(kept),
            "episodes": len(index),
            "sampled": cap is not None,
            "images_linked": images.linked,
            "images_refused": sum(images.refused.values()),
            "cut": cut,
            "malformed": sum(s["malformed"]["records"] for s in summaries),
        },
    }
    blobs = "\n".join(f'<script type="application/json" id="t{i}">{text}</script>' for i, text in kept.items())
    page = (HERE / "template.html").read_text(encoding="utf-8")
    page = page.replace("/*STYLE*/", (HERE / "viewer.css").read_text(encoding="utf-8"))
    page = page.replace("/*PLOTLY*/", _safe_js(plotly.offline.get_plotlyjs()))
    page = page.replace("/*VIEWER*/", _safe_js((HERE / "viewer.js").read_text(encoding="utf-8")))
    page = page.replace("<!--DATA-->", f'<script type="application/json" id="data">{_dumps(data)}</script>')
    page = page.replace("<!--TRANSCRIPTS-->", blobs)
    page = page.replace("<!--TITLE-->", html.escape(printable(", ".join(Path(str(p)).name for p in paths))))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return {"out": str(out), "bytes": out.stat().st_size, "runs": summaries, "bound": data["bound"]}


_UNSAFE = re.compile("[<\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _safe(text: str) -> str:
    """JSON text that cannot end (or confuse) the <script> element it sits in: ``<`` only occurs inside JSON
    strings, where ``\\u003c`` means the same; so do DEL, C1 controls, separators, bidirectional controls and lone
    surrogates (the page stays valid UTF-8), written as ``\\uNNNN`` escapes."""
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _safe_js(code: str) -> str:
    """Script code that cannot end its <script> element (``</script`` only occurs in strings of these bundles)."""
    return re.sub(r"(?i)</(script)", r"<\\/\1", code)
