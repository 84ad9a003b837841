"""Trajectory sinks: where finished episodes go, one record at a time, as they finish."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Protocol


class Sink(Protocol):
    """Receives one finished episode record at a time."""

    path: Path

    def write(self, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class JSONLSink:
    """Appends one JSON line per episode and flushes it at once (a crash loses no finished episode)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self.count = 0

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, default=str)
        with self._lock:
            self._f.write(line + "\n")
            self._f.flush()
            self.count += 1

    def close(self) -> None:
        with self._lock:
            if not self._f.closed:
                self._f.close()
