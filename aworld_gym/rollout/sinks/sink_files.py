"""The files under a sink: one writer per output, lines read back whatever a crash or a hand left in them.

- :class:`OutputLock`: an exclusive, non-blocking ``flock`` on ``<out>.lock`` (holding the writer's pid) for as long
  as a sink is open, so a second run on the same ``--out`` is refused before it truncates or appends anything.
- :func:`scan_jsonl`: the records of a JSONL file, read as bytes: a last line cut by a crash (in any encoding state,
  even inside a multi-byte character) is reported as torn bytes, and a line that is not a JSON object (``null``,
  ``[1, 2]``, ``7``, garbage, invalid UTF-8, nesting past the parser's limit) is skipped and its line number kept.
- :func:`write_all`: the one place a sink writes bytes; an error there (a full disk) becomes :class:`OutputWriteError`.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aworld_gym.base.errors import AWorldGymError

_BOM = b"\xef\xbb\xbf"


class SinkError(AWorldGymError):
    """A trajectory output cannot be opened, read back or written (the message names the file and what to do)."""


class OutputBusy(SinkError):
    """Another writer holds the output (a second run on the same ``--out``)."""


class CorruptOutput(SinkError, ValueError):
    """An output file that should be resumed or read is not readable (kept as it is)."""


class OutputWriteError(SinkError, OSError):
    """Writing a record failed (a full disk, a file-size limit); what was written before stays readable."""


def describe(exc: OSError) -> str:
    """An OS error in a few words: ``No space left on device (ENOSPC)``."""
    name = errno.errorcode.get(exc.errno or 0)
    return f"{exc.strerror or exc}" + (f" ({name})" if name else "")


class OutputLock:
    """An exclusive lock on ``<path>.lock`` held while a sink writes ``path``.

    The lock file holds the writer's pid and is removed when the lock is released; a lock file left by a process
    that died holds no lock (``flock`` ends with the process) and is taken over.
    """

    def __init__(self, path: Path) -> None:
        self.target = path
        self.path = path.with_name(path.name + ".lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock.

        Raises:
            OutputBusy: another writer holds it (its pid in the message when known).
            SinkError: the lock file cannot be made (a read-only folder).
        """
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock
            return
        for _ in range(20):  # the file can be removed between our open and our lock: open it again
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise SinkError(f"cannot write {str(self.target)!r}: its lock file {str(self.path)!r}: "
                                f"{describe(exc)}") from None  # fmt: skip
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = _read_pid(fd)
                os.close(fd)
                who = f"process {pid}" if pid else "another process"
                raise OutputBusy(f"{str(self.target)!r} is being written by {who} (lock {str(self.path)!r}): one "
                                 "writer per output; wait for that run to end, or pass another --out") from None  # fmt: skip
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                self._fd = fd
                return
            os.close(fd)
        raise OutputBusy(f"{str(self.target)!r}: its lock {str(self.path)!r} keeps changing hands; another writer?")

    def release(self) -> None:
        """Give the lock up and remove the lock file (twice is fine)."""
        if self._fd is None:
            return
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None


@dataclass
class Scan:
    """What reading a JSONL file skipped.

    Attributes:
        junk_lines: 1-based numbers of the lines that are not a record (kept in the file, skipped on reading).
        torn_bytes: the bytes of a last line cut by a crash (no newline, not a whole record); 0 when none.
        torn_line: that line's number (0 when none).
        unterminated: the last line is a whole record without its newline.
    """

    junk_lines: list[int] = field(default_factory=list)
    torn_bytes: int = 0
    torn_line: int = 0
    unterminated: bool = False

    def notes(self, path: Path) -> list[str]:
        """One line per kind of thing skipped, for a warning and the run summary."""
        out = []
        if self.torn_bytes:
            out.append(f"{path}: line {self.torn_line}, cut by a crash, was dropped ({self.torn_bytes} bytes)")
        if self.junk_lines:
            shown = ", ".join(map(str, self.junk_lines[:10])) + (", ..." if len(self.junk_lines) > 10 else "")
            out.append(f"{path}: skipped {len(self.junk_lines)} line(s) that are not records (line {shown}); "
                       "they are kept in the file")  # fmt: skip
        return out


def parse_line(raw: bytes) -> dict[str, Any] | None:
    """A JSONL line as a record, or ``None`` when it is not a JSON object (invalid UTF-8 and nesting past the
    parser's limit included)."""
    try:
        value = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None
    return value if isinstance(value, dict) else None


def scan_jsonl(path: Path, scan: Scan) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` for each record of a JSONL file, reading bytes; what is skipped goes to ``scan``."""
    with path.open("rb") as f:
        for n, raw in enumerate(f, 1):
            if n == 1:
                raw = raw.removeprefix(_BOM)
            record = parse_line(raw) if raw.strip() else None
            if not raw.endswith(b"\n"):  # the last line, without its newline
                if record is None and raw.strip():
                    scan.torn_bytes, scan.torn_line = len(raw), n
                    return
                scan.unterminated = record is not None
            if record is not None:
                yield n, record
            elif raw.strip():
                scan.junk_lines.append(n)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
