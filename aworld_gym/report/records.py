"""Records read back are hostile input: the report checks each one before it counts it, and makes what it writes safe.

A trajectory file may come from another machine, an older or newer version, a crash, or someone who wants the
report to misbehave. :func:`problem` says what is wrong with a record whose fields the report reads (a wrong type,
a missing ``task_id``, an unknown status, a number too large for a float); such a record is skipped and counted,
never a traceback. NaN and infinities are numbers (a reward hook can produce them) and are shown, not skipped:
:func:`json_safe` writes them as the strings ``"NaN"``, ``"inf"`` and ``"-inf"``, so the JSON the report writes is
valid (``allow_nan=False`` holds). :func:`printable` escapes what a terminal would obey (ANSI sequences, an OSC
title, a bell, a carriage return, bidirectional overrides) or could not encode (a lone surrogate).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from aworld_gym.core.trajectory import FAILED, OK, VOID

STATUSES = (OK, FAILED, VOID)
_TEXT = ("env_id", "policy", "termination", "group")
_NUMBERS = ("reward", "score")
_MAPS = ("task_meta", "reward_components", "metrics", "timings")
_TURN_NUMBERS = ("reward", "policy_s", "env_s")
# C0 and C1 controls, DEL, line/paragraph separators, bidirectional embeddings/overrides/isolates, lone surrogates
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _number(value: Any) -> bool:
    """A JSON number a float can hold (NaN and infinities included); not a bool, not an int past a float's range."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _numbers(value: Any) -> bool:
    return isinstance(value, Mapping) and all(_number(v) for v in value.values())


def _turn_problem(i: int, turn: Any) -> str | None:
    if not isinstance(turn, Mapping):
        return f"turns[{i}] is not an object"
    for key in ("tool_calls", "tool_results"):
        items = turn.get(key)
        if items is not None and not (isinstance(items, list) and all(isinstance(x, Mapping) for x in items)):
            return f"turns[{i}].{key} is not a list of objects"
    for result in turn.get("tool_results") or []:
        if result.get("latency_s") is not None and not _number(result["latency_s"]):
            return f"turns[{i}].tool_results latency_s is not a number"
        if result.get("error") is not None and not isinstance(result["error"], str):
            return f"turns[{i}].tool_results error is not text"
    for key in _TURN_NUMBERS:
        if turn.get(key) is not None and not _number(turn[key]):
            return f"turns[{i}].{key} is not a number"
    if turn.get("reward_components") is not None and not _numbers(turn["reward_components"]):
        return f"turns[{i}].reward_components is not an object of numbers"
    for key in ("screenshot", "action"):
        if turn.get(key) is not None and not isinstance(turn[key], str):
            return f"turns[{i}].{key} is not text"
    return None


def problem(record: Any) -> str | None:
    """What makes ``record`` unreadable for the report (a short reason, the same for records alike), or ``None``.

    Checked: the record is an object; ``task_id`` is present (text or an integer); ``reward`` and ``score`` are
    numbers or null; ``num_turns`` and ``sample`` integers; ``status`` one of ok/failed/void; ``env_id``,
    ``policy``, ``termination``, ``group`` and ``screenshot`` text; ``task_meta`` an object; ``reward_components``,
    ``metrics`` and ``timings`` objects of numbers; ``turns`` a list of objects whose tool calls and results are
    lists of objects and whose numbers are numbers. Keys the report does not read are not checked.
    """
    if not isinstance(record, Mapping):
        return "not an object"
    task = record.get("task_id")
    if task is None or isinstance(task, bool) or not isinstance(task, str | int):
        return "task_id missing or not text"
    for key in _NUMBERS:
        if record.get(key) is not None and not _number(record[key]):
            return f"{key} is not a number"
    for key in ("num_turns", "sample"):
        value = record.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            return f"{key} is not a count"
    if record.get("status") is not None and record["status"] not in STATUSES:
        return "status unknown"
    for key in (*_TEXT, "screenshot"):
        if record.get(key) is not None and not isinstance(record[key], str):
            return f"{key} is not text"
    for key in _MAPS:
        value = record.get(key)
        if value is not None and not (isinstance(value, Mapping) and (key == "task_meta" or _numbers(value))):
            return f"{key} is not an object" + ("" if key == "task_meta" else " of numbers")
    turns = record.get("turns")
    if turns is not None and not isinstance(turns, list):
        return "turns is not a list"
    for i, turn in enumerate(turns or []):
        reason = _turn_problem(i, turn)
        if reason:
            return reason
    return None


def json_safe(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by ``"NaN"``, ``"inf"`` or ``"-inf"`` (JSON has none)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def printable(text: Any) -> str:
    """``text`` for a terminal: control characters, separators, bidirectional controls and lone surrogates written
    as ``\\xNN`` / ``\\uNNNN`` escapes (an ANSI sequence, an OSC title or a bell in a record stays visible text)."""
    return _CONTROL.sub(lambda m: _escape(m.group()), str(text))


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
