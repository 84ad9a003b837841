"""Trajectory sinks: where finished episodes go, one record at a time, as they finish.

Both formats are readable by ``datasets.load_dataset`` (``"json"`` / ``"parquet"``). A sink opened with
``resume=True`` keeps what is already in the file and reports the ``(task_id, sample)`` pairs it holds, so a
rerun skips them and never writes one twice.

Sinks lose nothing: one writer per output (:class:`~aworld_gym.rollout.sinks.sink_files.OutputLock`); every record is
stored, odd values included (:mod:`~aworld_gym.rollout.sinks.record_json`); a torn last line, junk lines and a full disk
are handled (:mod:`~aworld_gym.rollout.sinks.sink_files`); a Parquet file that cannot be read is never replaced.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

from aworld_gym.base.errors import last_line
from aworld_gym.core.trajectory import status_of
from aworld_gym.rollout.sinks.record_json import (
    MARKS,
    decode_record,
    dumps_text,
    encode_record,
    escape_surrogates,
    is_utf8,
)
from aworld_gym.rollout.sinks.sink_files import (
    CorruptOutput,
    OutputBusy,
    OutputLock,
    OutputWriteError,
    Scan,
    SinkError,
    describe,
    scan_jsonl,
    write_all,
)

__all__ = ["CorruptOutput", "JSONLSink", "OutputBusy", "OutputWriteError", "ParquetSink", "Sink", "SinkError",
           "iter_records", "open_sink", "record_key"]  # fmt: skip

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
    """Appends one JSON line per episode and writes it at once (a crash loses no finished episode).

    One writer per file: a second sink on the same path is refused (:class:`OutputBusy`) before it touches the file.
    Every record is stored (:func:`~aworld_gym.rollout.sinks.record_json.encode_record`: a lone surrogate escaped,
    NaN/Infinity as ``null`` with a mark); a record that still cannot be written leaves a minimal marked record of
    its episode. A failed write (a full disk) is cut back to the last whole line and raises
    :class:`OutputWriteError`, once; the file stays readable and ``resume=True`` carries on from it.

    With ``resume=True`` the records already in the file are kept: a last line cut by a crash is dropped (in any
    encoding state), lines that are not records are skipped and kept; ``notes`` says what was skipped.
    ``keyed=False`` appends every record (a server whose clients run the same task again and again); by default a
    record whose ``(task_id, sample)`` is in the file already is not written again.
    """

    def __init__(self, path: str | Path, resume: bool = False, *, lock: bool = True, keyed: bool = True) -> None:
        self.path = Path(path)
        self.keyed = keyed  # False: every record is appended, even one whose (task_id, sample) is there already
        _check_path(self.path)
        self._lock_file = OutputLock(self.path) if lock else None
        if self._lock_file is not None:
            self._lock_file.acquire()
        try:
            self._open(resume)
        except BaseException:
            if self._lock_file is not None:
                self._lock_file.release()
            raise
        self._lock = threading.Lock()
        self.count = 0
        self.failed: OutputWriteError | None = None

    def _open(self, resume: bool) -> None:
        self._done: set[Key] = set()
        self.scan = Scan()
        self.notes: list[str] = []
        size = 0
        _check_resumable(self.path, resume)
        if resume and self.path.exists():
            for n, record in scan_jsonl(self.path, self.scan):
                try:
                    self._done.add(record_key(record))
                except (TypeError, ValueError, OverflowError):
                    self.scan.junk_lines.append(n)  # a record without a usable key: its episode runs again
            self.scan.junk_lines.sort()
            size = self.path.stat().st_size - self.scan.torn_bytes
            self.notes = self.scan.notes(self.path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | (0 if resume else os.O_TRUNC)
        try:
            self._fd = os.open(self.path, flags, 0o644)
            if self.scan.torn_bytes:
                os.ftruncate(self._fd, size)
            if self.scan.unterminated:
                write_all(self._fd, b"\n")
                size += 1
        except OSError as exc:
            if getattr(self, "_fd", None) is not None:
                os.close(self._fd)
            raise SinkError(f"cannot write {str(self.path)!r}: {describe(exc)}") from None
        self._size = size

    def done_keys(self) -> set[Key]:
        return set(self._done)

    def add_done(self, records: Iterable[dict[str, Any]]) -> None:
        """Count the keys of ``records`` (held elsewhere, e.g. a Parquet file) as written: never written again."""
        for record in records:
            with contextlib.suppress(TypeError, ValueError, OverflowError):
                self._done.add(record_key(record))

    def write(self, record: dict[str, Any]) -> None:
        """Append ``record`` unless its ``(task_id, sample)`` is already in the file.

        Raises:
            OutputWriteError: the write failed (this time or before); the file holds every line written before.
        """
        line = _encode_or_minimal(record) + b"\n"
        with self._lock:
            if self.failed is not None:
                raise self.failed
            key = _key_or_none(record)
            if self.keyed and key in self._done:
                return  # never twice (a record without a usable key is written: it is never lost)
            try:
                write_all(self._fd, line)
            except OSError as exc:
                with contextlib.suppress(OSError):  # a part of the line: cut it off, the file stays whole lines
                    os.ftruncate(self._fd, self._size)
                self.failed = OutputWriteError(
                    f"cannot write {str(self.path)!r}: {describe(exc)}; its {len(self._done)} records are kept: "
                    "make room and rerun with --resume"
                )
                raise self.failed from None
            self._size += len(line)
            if key is not None:
                self._done.add(key)
            self.count += 1

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            if self._lock_file is not None:
                self._lock_file.release()


def _check_path(path: Path) -> None:
    """Refuse a folder as an output, and make the output's folder."""
    if path.is_dir():
        raise SinkError(f"the output {str(path)!r} is a folder: name a file in it, e.g. {str(path / 'run.jsonl')!r}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SinkError(f"cannot make the folder of {str(path)!r}: {describe(exc)}") from None


def _check_resumable(path: Path, resume: bool) -> None:
    """Refuse to read back what is not a regular file (a FIFO would hang the read, ``/dev/zero`` fill memory)."""
    if resume and path.exists() and not path.is_file():
        raise SinkError(f"cannot resume {str(path)!r}: not a regular file; pass a trajectory file as --out")


def _encode_or_minimal(record: dict[str, Any]) -> bytes:
    """The record as a JSON line; if even the careful encoding fails, a minimal marked record of its episode (ids,
    ending, status, the error) so that the episode is not lost."""
    try:
        return encode_record(record)
    except Exception as exc:  # noqa: BLE001 - never lose the episode over one value
        keep = ("episode_id", "env_id", "task_id", "seed", "sample", "group", "policy", "started_at", "num_turns",
                "reward", "score", "terminated", "truncated", "termination", "status", "weight", "error")  # fmt: skip
        minimal = {k: record.get(k) for k in keep if k in record}
        minimal[MARKS] = {"unstorable": escape_surrogates(f"{type(exc).__name__}: {exc}"[:300])}
        try:
            return encode_record(minimal)
        except Exception:  # noqa: BLE001
            return encode_record({"task_id": str(record.get("task_id")), MARKS: minimal[MARKS]})


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
        return isinstance(value, str) and is_utf8(value)  # Parquet text is UTF-8: a lone surrogate goes to _EXTRA
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
    ``resume=True`` picks up both the Parquet file and a journal left by a crash; a Parquet file that cannot be read
    is refused (:class:`CorruptOutput`) and kept as it is, never replaced. A write that fails (a full disk), in the
    journal or in the Parquet file, raises :class:`OutputWriteError` and leaves the journal for ``resume=True``.
    """

    def __init__(self, path: str | Path, resume: bool = False) -> None:
        import pyarrow as pa

        self._pa = pa
        self.path = Path(path)
        _check_path(self.path)
        self.journal_path = self.path.with_name(self.path.name + ".partial.jsonl")
        self._lock_file = OutputLock(self.path)
        self._lock_file.acquire()  # before anything is removed or read: one writer per output
        try:
            self._old: list[dict[str, Any]] = []
            _check_resumable(self.path, resume)
            if resume and self.path.exists():
                self._old = self._read_parquet()
            elif not resume:
                self.journal_path.unlink(missing_ok=True)
            self._journal = JSONLSink(self.journal_path, resume=True, lock=False)
        except BaseException:
            self._lock_file.release()
            raise
        self.notes = self._journal.notes
        self._journal.add_done(r for r in map(_row_record, self._old) if r is not None)
        self.count = 0
        self._closed = False

    def _read_parquet(self) -> list[dict[str, Any]]:
        import pyarrow.parquet as pq

        try:
            return pq.read_table(self.path).to_pylist()
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several kinds: one clear refusal
            raise CorruptOutput(
                f"cannot resume {str(self.path)!r}: it is not a readable Parquet file ({last_line(exc, 120)}); it is "
                "kept as it is: move it away to start afresh (its episodes run again), or pass another --out"
            ) from None

    @property
    def failed(self) -> OutputWriteError | None:
        """The write error that stopped this sink, if any."""
        return self._journal.failed

    def done_keys(self) -> set[Key]:
        return self._journal.done_keys()

    def write(self, record: dict[str, Any]) -> None:
        before = self._journal.count
        self._journal.write(record)
        self.count += self._journal.count - before

    def close(self) -> None:
        """Write the Parquet file and remove the journal; after a failed write, keep the journal for a resume.

        Raises:
            OutputWriteError: the Parquet file could not be written (the journal is kept).
        """
        if self._closed:
            return
        self._closed = True
        try:
            self._journal.close()
            if self._journal.failed is None:
                self._write_parquet()
        finally:
            self._lock_file.release()

    def _write_parquet(self) -> None:
        import pyarrow.parquet as pq

        # keyed by the record, not the row (a task id with a lone surrogate is kept in _EXTRA, its column null)
        pairs = [(_key_or_none(_row_record(row)), _flatten(row)) for row in self._old]  # older rows: new columns
        if self.journal_path.exists():
            pairs += [(_key_or_none(r), _flatten(r)) for _, r in scan_jsonl(self.journal_path, Scan())]
        unique: dict[Key, dict[str, Any]] = {}
        for key, row in pairs:  # a crash between writing the file and removing the journal leaves rows in both
            unique.setdefault(key or (f"<row {len(unique)}>", -1), row)
        table = self._pa.Table.from_pylist(list(unique.values()), schema=_schema(self._pa))
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            pq.write_table(table, str(tmp))
            tmp.replace(self.path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise OutputWriteError(
                f"cannot write {str(self.path)!r}: {describe(exc)}; the {len(unique)} records are kept in "
                f"{str(self.journal_path)!r}: make room and rerun with --resume"
            ) from None
        self.journal_path.unlink(missing_ok=True)


def _key_or_none(record: dict[str, Any] | None) -> Key | None:
    try:
        return record_key(record) if record is not None else None
    except (TypeError, ValueError, OverflowError):
        return None


def _row_record(row: dict[str, Any]) -> dict[str, Any] | None:
    """The record of a Parquet row (``None`` for a row whose JSON text does not parse)."""
    try:
        return decode_record(_unflatten(dict(row)))
    except (TypeError, ValueError, RecursionError):
        return None


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
            row[k] = None if k in _OPTIONAL and k not in record else dumps_text(value)
    rest.update({k: v for k, v in record.items() if k not in _COLUMNS or (k == _EXTRA and not flat)})
    row[_EXTRA] = dumps_text(rest) if rest else None
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
    """A sink by file extension: ``.jsonl`` (or ``.json``) or ``.parquet``.

    Raises:
        ValueError: another extension.
        SinkError: a folder, a file that cannot be written, a corrupt Parquet file to resume
            (:class:`CorruptOutput`), or an output another run is writing (:class:`OutputBusy`).
    """
    suffix = Path(path).suffix.lower()
    if suffix == ".parquet":
        return ParquetSink(path, resume=resume)
    if suffix in (".jsonl", ".json", ""):
        return JSONLSink(path, resume=resume)
    raise ValueError(f"--out must end in .jsonl or .parquet, got {str(path)!r}")


def iter_records(
    path: str | Path, batch_rows: int = 512, *, skipped: list[int] | None = None
) -> Iterator[dict[str, Any]]:
    """The records of a trajectory file (``.jsonl`` or ``.parquet``, a Parquet journal included), one at a time,
    never the whole file in memory, each as ``Trajectory.to_record`` wrote it (Parquet's JSON text columns back as
    the nested values they were; NaN, Infinity and long ints back from their marks, see
    :mod:`~aworld_gym.rollout.sinks.record_json`).

    What is not a record is skipped, never raised: a JSONL line that is not a JSON object (``null``, ``[1, 2]``,
    garbage, invalid UTF-8, a torn last line, nesting past the parser's limit), a Parquet row whose JSON text does
    not parse.

    Args:
        path: the file.
        batch_rows: Parquet rows read at a time.
        skipped: when given, the 1-based line numbers (JSONL) or row numbers (Parquet) of what was skipped are
            appended to it, so that a reader can report them.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a trajectory file (another extension).
        CorruptOutput: a Parquet file that cannot be read (a ``ValueError``).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no trajectory file at {str(path)!r}")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        yield from _iter_parquet(path, batch_rows, skipped)
        return
    if suffix not in (".jsonl", ".json"):
        raise ValueError(f"a trajectory file ends in .jsonl or .parquet, got {str(path)!r}")
    scan = Scan()
    for _, record in scan_jsonl(path, scan):
        yield decode_record(record)
    if skipped is not None:
        skipped.extend(sorted([*scan.junk_lines, *([scan.torn_line] if scan.torn_line else [])]))


def _iter_parquet(path: Path, batch_rows: int, skipped: list[int] | None) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=batch_rows)
        n = 0
        for batch in batches:
            for row in batch.to_pylist():
                n += 1
                record = _row_record(row)
                if record is None:
                    if skipped is not None:
                        skipped.append(n)
                    continue
                yield record
    except (OSError, ValueError, TypeError) as exc:  # pyarrow's errors are OSError and ValueError kinds
        if isinstance(exc, CorruptOutput):
            raise
        raise CorruptOutput(f"{str(path)!r} is not a readable Parquet file: {last_line(exc, 160)}") from None
