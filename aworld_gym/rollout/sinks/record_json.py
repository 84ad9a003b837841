"""Records as strict JSON in valid UTF-8, whatever values they hold: no single value loses an episode.

A record is written as plain ``json.dumps`` gives it whenever that is strict JSON (the fast path: byte-identical to
what the sinks always wrote). What plain ``json.dumps`` cannot store, or stores as text that other readers refuse,
is written as follows, and :func:`decode_record` gives back the record that was written:

- a lone surrogate (``"\\ud800"``: half of a UTF-16 pair, e.g. in a model's reply) is written as its JSON escape
  ``\\ud800``, so the line stays valid UTF-8 and reads back as the same Python string (two halves in a row read
  back as the one character they encode);
- NaN and ±Infinity are written as ``null`` and listed in the record's :data:`MARKS` key
  (``{"nonfinite": [[path, "NaN"], ...]}``, a path being the keys and list indices down to the value): strict
  parsers (pyarrow, ``datasets``, ``jq``, browsers) read the line, and :func:`decode_record` puts the float back;
- an int too long for ``str()`` (Python's 4300-digit limit) is written as hex text, its path listed under ``"int"``
  and given back as the int;
- a value nested deeper than :data:`MAX_DEPTH` levels is replaced by the text :data:`CUT`, its path listed under
  ``"cut"``; it is not given back (the mark says that it was cut);
- a dict key that is not text becomes text (as ``json`` does with numbers), and any other value that is not JSON
  its ``str()`` (as the sinks always did).

The key :data:`MARKS` is reserved: a record of ``Trajectory.to_record`` never has it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

MARKS = "_sink_marks"
MAX_DEPTH = 100
CUT = f"<cut: nested deeper than {MAX_DEPTH} levels>"
# Past this many bits ``str(int)`` may refuse (``sys.get_int_max_str_digits()``, 4300 digits by default).
_INT_BITS = 12_000
_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_SURROGATE = re.compile("[\ud800-\udfff]")

Path = list[str | int]


def encode_record(record: Mapping[str, Any]) -> bytes:
    """One record as one line of strict JSON in UTF-8 (no newline), as the module docstring says."""
    try:
        return json.dumps(record, ensure_ascii=False, allow_nan=False, default=str).encode("utf-8")
    except Exception:  # noqa: BLE001 - NaN, a surrogate, depth, a key or a str() that fails: the careful path below
        pass
    return dumps_text(clean_record(record)).encode("utf-8")


def dumps_text(value: Any) -> str:
    """JSON text of an already clean value (see :func:`clean_record`) that encodes to UTF-8: lone surrogates escaped."""
    return escape_surrogates(json.dumps(value, ensure_ascii=False, default=_text))


def escape_surrogates(text: str) -> str:
    """``text`` with each lone surrogate as its JSON escape (``\\ud800``); text without any comes back as it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


def is_utf8(text: str) -> bool:
    """Whether ``text`` encodes to UTF-8 (it holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def clean_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` with every value JSON can hold strictly, what had to change listed under :data:`MARKS`."""
    marks: dict[str, list[Any]] = {}
    clean = _clean(dict(record), [], 0, marks)
    if marks:
        clean[MARKS] = marks
    return clean


def decode_record(record: dict[str, Any]) -> dict[str, Any]:
    """The record :func:`encode_record` was given, from the one it wrote (read back with ``json.loads``): NaN,
    Infinity and long ints put back where :data:`MARKS` says, the marks removed. A cut value stays cut (its mark
    stays too). A marks key this module did not write (not the shape it writes) is left as it is."""
    marks = record.get(MARKS)
    if not isinstance(marks, dict) or not set(marks) <= {"nonfinite", "int", "cut"}:
        return record
    if not all(isinstance(v, list) for v in marks.values()):
        return record
    for entry in marks.get("nonfinite", []):
        if isinstance(entry, list) and len(entry) == 2 and entry[1] in _NONFINITE:
            _put(record, entry[0], lambda old, name=entry[1]: _NONFINITE[name] if old is None else old)
    for path in marks.get("int", []):
        _put(record, path, lambda old: int(old, 16) if isinstance(old, str) else old)
    if marks.get("cut"):
        record[MARKS] = {"cut": marks["cut"]}
    else:
        del record[MARKS]
    return record


def _put(record: dict[str, Any], path: Any, change: Any) -> None:
    if not isinstance(path, list) or not path:
        return
    try:
        obj: Any = record
        for key in path[:-1]:
            obj = obj[key]
        if isinstance(obj, dict) != isinstance(path[-1], str):
            return
        obj[path[-1]] = change(obj[path[-1]])
    except (KeyError, IndexError, TypeError, ValueError):
        return  # a mark that points nowhere (a hostile or hand-edited record): the value stays as it is


def _clean(value: Any, path: Path, depth: int, marks: dict[str, list[Any]]) -> Any:
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, int):
        if value.bit_length() > _INT_BITS:
            marks.setdefault("int", []).append(path)
            return hex(value)
        return int(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return float(value)
        marks.setdefault("nonfinite", []).append([path, json.dumps(value)])
        return None
    if isinstance(value, dict | list | tuple):
        if depth >= MAX_DEPTH:
            marks.setdefault("cut", []).append(path)
            return CUT
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                key = _key(k)
                out[key] = _clean(v, [*path, key], depth + 1, marks)
            return out
        return [_clean(v, [*path, i], depth + 1, marks) for i, v in enumerate(value)]
    return _text(value)


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool | float) or key is None:
        return json.dumps(key)
    if isinstance(key, int):
        return str(key) if key.bit_length() <= _INT_BITS else hex(key)
    return _text(key)


def _text(value: Any) -> str:
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - an object whose str() fails still leaves a record behind
        return f"<unprintable {type(value).__name__}>"
