"""Trajectory sinks: where finished episodes go, one record at a time, as they finish.

Both formats are readable by ``datasets.load_dataset`` (``"json"`` / ``"parquet"``). A sink opened with
``resume=True`` keeps what is already in the file and reports the ``(task_id, sample)`` pairs it holds, so a
rerun skips them and never writes one twice.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from aworld_gym.core.trajectory import status_of

Key = tuple[str, int]


class Sink(Protocol):
    """Receives one finished episode record at a time."""

    path: Path

    def done_keys(self) -> set[Key]: ...

    def write(self, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def record_key(record: dict[str, Any]) -> Key:
    return str(record.get("task_id")), int(record.get("sample", 0))


class JSONLSink:
    """Appends one JSON line per episode and flushes it at once (a crash loses no finished episode)."""

    def __init__(self, path: str | Path, resume: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._done: set[Key] = set()
        if resume and self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    self._done.add(record_key(json.loads(line)))
                except (json.JSONDecodeError, TypeError, ValueError):
                    continue  # a line cut by a crash: that episode runs again
            _drop_partial_last_line(self.path)
        self._f = self.path.open("a" if resume else "w", encoding="utf-8")
        self._lock = threading.Lock()
        self.count = 0

    def done_keys(self) -> set[Key]:
        return set(self._done)

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, default=str)
        with self._lock:
            key = record_key(record)
            if key in self._done:
                return  # never twice
            self._f.write(line + "\n")
            self._f.flush()
            self._done.add(key)
            self.count += 1

    def close(self) -> None:
        with self._lock:
            if not self._f.closed:
                self._f.close()


def _drop_partial_last_line(path: Path) -> None:
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        path.write_bytes(data[: data.rfind(b"\n") + 1])


# The columns of a Parquet row: every key of a record (``Trajectory.to_record``) has its own column of a fixed type,
# the nested ones (turns, components, timings, token data) as JSON text, and whatever else a record holds (the
# driver's ``cut_sampled``, a user's ``extra``) goes into one JSON text column, ``_EXTRA``, that reading expands
# back; so does a value its column's type cannot hold (an ``answer`` of 42, a seed past int64). The types are fixed,
# not inferred: a column null in a whole run would be typed ``null`` in that file, and ``datasets`` cannot read it
# together with a file where it is not.
_SCALARS = {"episode_id": "text", "env_id": "text", "task_id": "text", "seed": "int", "sample": "int",
            "group": "text", "policy": "text", "started_at": "float", "num_turns": "int", "reward": "float",
            "score": "float", "answer": "text", "terminated": "bool", "truncated": "bool", "termination": "text",
            "status": "text", "weight": "float", "error": "text", "prompt": "text", "screenshot": "text",
            "group_complete": "bool"}  # fmt: skip
_NESTED = ("turns", "reward_components", "timings", "metrics", "reward_errors", "task_meta", "tokens",
           "group_reward_components")  # fmt: skip
_EXTRA = "extra_json"
# Keys a record has only sometimes (``to_record`` leaves them out): a null in their column reads back as no key.
_OPTIONAL = ("prompt", "screenshot", "tokens", "group_complete", "group_reward_components")
_COLUMNS = (*_SCALARS, *_NESTED, _EXTRA)


def _fits(kind: str, value: Any) -> bool:
    if kind == "text":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "int":
        return isinstance(value, int) and -(2**63) <= value < 2**63
    return isinstance(value, (int, float))


def _schema(pa: Any) -> Any:
    types = {"text": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}
    return pa.schema([(k, types[kind]) for k, kind in _SCALARS.items()] + [(k, pa.string()) for k in
                                                                            (*_NESTED, _EXTRA)])  # fmt: skip


class ParquetSink:
    """Parquet output that loses nothing on a crash.

    Each finished episode is appended and flushed to a JSONL journal beside the file (``<path>.partial.jsonl``);
    ``close()`` writes the Parquet file (nested fields as JSON text columns) and removes the journal. A rerun with
    ``resume=True`` picks up both the Parquet file and a journal left by a crash.
    """

    def __init__(self, path: str | Path, resume: bool = False) -> None:
        import pyarrow as pa

        self._pa = pa
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.journal_path = self.path.with_name(self.path.name + ".partial.jsonl")
        self._old: list[dict[str, Any]] = []
        if resume and self.path.exists():
            self._old = self._read_parquet()
        elif not resume:
            self.journal_path.unlink(missing_ok=True)
        self._journal = JSONLSink(self.journal_path, resume=True)
        for row in self._old:
            self._journal._done.add(record_key(row))
        self.count = 0

    def _read_parquet(self) -> list[dict[str, Any]]:
        import pyarrow.parquet as pq

        try:
            return pq.read_table(self.path).to_pylist()
        except Exception:  # noqa: BLE001 - an unreadable file: its episodes run again
            return []

    def done_keys(self) -> set[Key]:
        return self._journal.done_keys()

    def write(self, record: dict[str, Any]) -> None:
        before = self._journal.count
        self._journal.write(record)
        self.count += self._journal.count - before

    def close(self) -> None:
        import pyarrow.parquet as pq

        self._journal.close()
        rows = [_flatten(row) for row in self._old]  # an older file's rows get the columns it lacks
        if self.journal_path.exists():
            for line in self.journal_path.read_text(encoding="utf-8").splitlines():
                try:
                    rows.append(_flatten(json.loads(line)))
                except (json.JSONDecodeError, TypeError):
                    continue
        unique: dict[Key, dict[str, Any]] = {}
        for row in rows:  # a crash between writing the file and removing the journal leaves rows in both
            unique.setdefault(record_key(row), row)
        rows = list(unique.values())
        table = self._pa.Table.from_pylist(rows, schema=_schema(self._pa))
        tmp = self.path.with_name(self.path.name + ".tmp")
        pq.write_table(table, str(tmp))
        tmp.replace(self.path)
        self.journal_path.unlink(missing_ok=True)


def _flatten(record: dict[str, Any]) -> dict[str, Any]:
    """A Parquet row with exactly the columns ``_COLUMNS`` (``Table.from_pylist`` takes its columns from the first
    row): scalar fields that fit their column as they are, nested ones as JSON text, the rest as JSON text in
    ``_EXTRA``. A row read back from a Parquet file (nested fields already text, maybe an older file without some
    columns, or a newer one with columns this version does not know) is filled out with nulls, its unknown columns
    kept in ``_EXTRA``."""
    flat = isinstance(record.get("turns"), str)
    rest: dict[str, Any] = json.loads(record.get(_EXTRA) or "{}") if flat else {}
    row: dict[str, Any] = {}
    for k, kind in _SCALARS.items():
        value = record.get(k)
        if value is not None and not _fits(kind, value):
            rest[k], value = value, None
        row[k] = float(value) if kind == "float" and value is not None else value
    for k in _NESTED:
        value = record.get(k)
        if flat and (value is None or isinstance(value, str)):
            row[k] = value
        else:
            row[k] = None if k in _OPTIONAL and k not in record else json.dumps(value, ensure_ascii=False, default=str)
    rest.update({k: v for k, v in record.items() if k not in _COLUMNS or (k == _EXTRA and not flat)})
    row[_EXTRA] = json.dumps(rest, ensure_ascii=False, default=str) if rest else None
    return row


def _unflatten(row: dict[str, Any]) -> dict[str, Any]:
    """A record again from a Parquet row: JSON text parsed, ``_EXTRA`` spread out, an optional key that was absent
    left out. A file written before a column existed: ``status`` is derived from the ending (as ``to_record`` does);
    ``weight`` cannot be, and is left out (``record.get("weight", 1.0)`` reads it as unmasked)."""
    for k in _NESTED:
        if isinstance(row.get(k), str):
            row[k] = json.loads(row[k])
    extra = row.pop(_EXTRA, None)
    for k in (*_OPTIONAL, "weight"):
        if k in row and row[k] is None:
            del row[k]
    if row.get("status") is None and "turns" in row:
        row["status"] = status_of(row.get("termination"), row.get("score"), bool(row.get("terminated")))
    if extra:
        row.update(json.loads(extra))
    return row


def open_sink(path: str | Path, resume: bool = False) -> JSONLSink | ParquetSink:
    """A sink by file extension: ``.jsonl`` (or ``.json``) or ``.parquet``."""
    suffix = Path(path).suffix.lower()
    if suffix == ".parquet":
        return ParquetSink(path, resume=resume)
    if suffix in (".jsonl", ".json", ""):
        return JSONLSink(path, resume=resume)
    raise ValueError(f"--out must end in .jsonl or .parquet, got {str(path)!r}")


def iter_records(path: str | Path, batch_rows: int = 512) -> Iterator[dict[str, Any]]:
    """The records of a trajectory file (``.jsonl`` or ``.parquet``, a Parquet journal included), one at a time,
    never the whole file in memory; Parquet's JSON text columns come back as the nested values they were. A JSONL
    line that is not JSON (a torn last line) is skipped.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a trajectory file (another extension).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no trajectory file at {str(path)!r}")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_rows):
            for row in batch.to_pylist():
                yield _unflatten(row)
        return
    if suffix not in (".jsonl", ".json"):
        raise ValueError(f"a trajectory file ends in .jsonl or .parquet, got {str(path)!r}")
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(record, dict):
                    yield record
