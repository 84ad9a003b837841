"""A stdio server's stderr, kept on disk with a bound: a server that writes gigabytes of logs must not fill the disk.

The server writes to the file directly (no copy through this process, no cost per write). The file is opened for
appending; :meth:`CappedLog.trim` frees its head by punching a hole (atomic with the server's appends; where the file
system cannot, it cuts the file and writes the tail back, and the server's next writes land after that tail, an
appending writer ignoring the file offset). One daemon thread per process trims every open log every ``CHECK_S``
seconds (a hub's loop runs only while a call is in flight, and a server can write between steps), and a read of the
tail trims first.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import tempfile
import threading
import time
import weakref
from typing import IO

MAX_BYTES = 1 << 20  # the file is cut back when it grows past this
KEEP_BYTES = 256 << 10  # ... to its last this many bytes
CHECK_S = 5.0
_names = itertools.count()


class CappedLog:
    """An unnamed temporary file for a server's stderr, cut to its last :data:`KEEP_BYTES` past :data:`MAX_BYTES`.

    Args:
        max_bytes: the size past which the file is cut (default :data:`MAX_BYTES`).
        keep_bytes: how much of its end a cut keeps (default :data:`KEEP_BYTES`).
        check_s: the least time between two size checks of :meth:`maybe_trim` (default
            :data:`CHECK_S`).
    """

    def __init__(
        self, max_bytes: int | None = None, keep_bytes: int | None = None, check_s: float | None = None
    ) -> None:
        self.max_bytes = MAX_BYTES if max_bytes is None else max_bytes
        self.keep_bytes = min(KEEP_BYTES if keep_bytes is None else keep_bytes, self.max_bytes)
        self.check_s = CHECK_S if check_s is None else check_s
        self.file: IO[bytes] = _unnamed_append_file()
        self.trimmed_bytes = 0
        self._punched = 0  # the length of the hole at the file's head
        self._checked = 0.0
        self._lock = threading.Lock()  # a trim never runs on a closed (perhaps reused) file descriptor
        _janitor.add(self)

    def size(self) -> int:
        """The bytes the file takes on disk (its length minus the holes a trim punched)."""
        try:
            return os.fstat(self.file.fileno()).st_blocks * 512
        except (OSError, ValueError):
            return 0

    def _length(self) -> int:
        return os.fstat(self.file.fileno()).st_size

    def maybe_trim(self) -> None:
        """Cut the file if it is over the bound and no check ran in the last ``check_s`` seconds."""
        now = time.monotonic()
        if now - self._checked >= self.check_s:
            self._checked = now
            self.trim()

    def trim(self) -> None:
        """Free all but the last ``keep_bytes`` if the file takes more than ``max_bytes`` on disk.

        Where the file system can (ext4, xfs, tmpfs...), the head is punched out as a hole: atomic with the server's
        appends, nothing lost or reordered, the length unchanged. Elsewhere the file is cut and its tail written
        back (a few lines written meanwhile can be lost or land before the tail).
        """
        with self._lock, contextlib.suppress(OSError, ValueError):
            if self.size() <= self.max_bytes:
                return
            fd = self.file.fileno()
            length = self._length()
            head = (length - self.keep_bytes) // 4096 * 4096  # whole blocks: a partial one would stay allocated
            if head > 0 and _punch_hole(fd, head):
                self.trimmed_bytes += head - self._punched
                self._punched = head
                return
            tail = os.pread(fd, self.keep_bytes, length - self.keep_bytes)
            cut = tail.find(b"\n")  # start at a line
            tail = tail[cut + 1 :] if 0 <= cut < len(tail) - 1 else tail
            os.ftruncate(fd, 0)
            os.write(fd, b"[... earlier stderr dropped]\n" + tail)
            self.trimmed_bytes += length - len(tail)
            self._punched = 0

    def tail(self, limit: int = 2000) -> str:
        """The last ``limit`` characters (about) the server wrote, stripped."""
        with contextlib.suppress(OSError, ValueError):
            self.maybe_trim()
            length = self._length()
            data = os.pread(self.file.fileno(), limit, max(0, length - limit))
            return data.decode("utf-8", "replace").strip()
        return ""

    def close(self) -> None:
        """Close the file (from any thread; the janitor forgets it)."""
        with self._lock, contextlib.suppress(Exception):
            self.file.close()


class _Janitor:
    """One daemon thread per process that trims every open :class:`CappedLog` every ``CHECK_S`` seconds: hubs'
    loops run only while a call is in flight, and a server may write between steps."""

    def __init__(self) -> None:
        self.logs: weakref.WeakSet[CappedLog] = weakref.WeakSet()
        self.pid = 0
        self.lock = threading.Lock()

    def add(self, log: CappedLog) -> None:
        with self.lock:
            self.logs.add(log)
            if self.pid != os.getpid():  # first use, or a forked child (threads do not survive fork)
                self.pid = os.getpid()
                threading.Thread(target=self._run, name="aworld-gym-stderr-janitor", daemon=True).start()

    def _run(self) -> None:
        while True:
            time.sleep(CHECK_S)
            with self.lock:
                logs = list(self.logs)
            for log in logs:
                if not log.file.closed:
                    log.trim()


_janitor = _Janitor()


_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02


def _punch_hole(fd: int, length: int) -> bool:
    """Free the first ``length`` bytes of ``fd`` (a hole reads as zeros); False where the file system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mode = _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE
        return libc.fallocate(fd, mode, ctypes.c_longlong(0), ctypes.c_longlong(length)) == 0
    except (OSError, AttributeError):
        return False


def _unnamed_append_file() -> IO[bytes]:
    """A temporary file opened for appending (the server's writes always land at its end) and already unlinked."""
    path = os.path.join(tempfile.gettempdir(), f"aworld-stderr-{os.getpid()}-{next(_names)}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
    os.unlink(path)
    return os.fdopen(fd, "ab+")
