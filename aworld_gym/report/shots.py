"""Screenshots a record names, read as hostile input: a record must never make the report read a file.

A record's ``screenshot`` is only a name. The report reads it only from the run's own screenshots folder
(:func:`aworld_gym.rollout.sinks.screenshots.screenshots_folder`, beside the trajectory file): the name is resolved
(symbolic links and ``..`` followed) and must land inside that folder; the file is opened without following a
last symbolic link and without blocking (a FIFO never hangs the report), must be a regular file (not a device such
as ``/dev/zero``), at most ``MAX_IMAGE_BYTES``, and a PNG, JPEG, GIF or WebP image by its first bytes. Anything
else is refused and counted by reason; nothing of a refused file reaches the page.
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from pathlib import Path
from typing import Any

from aworld_gym.base.images import data_url, image_mime

MAX_IMAGE_BYTES = 16 * 2**20  # one screenshot, at most (a 4K PNG is ~10 MB)
_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def _inside(name: str, root: Path) -> str | None:
    """The real path ``name`` stands for inside ``root`` (as written, relative to the working folder, or its
    ``<episode>/<file>`` tail inside ``root`` when the run's folder was moved), else ``None``."""
    try:
        real_root = os.path.realpath(root)
        path = Path(name)
        for candidate in (path, root / path.parent.name / path.name):
            real = os.path.realpath(candidate)
            if real != real_root and os.path.commonpath([real, real_root]) == real_root:
                return real
    except (OSError, ValueError):  # a NUL byte, a name too long
        return None
    return None


def read_image(name: Any, root: Path, max_bytes: int = MAX_IMAGE_BYTES) -> tuple[bytes | None, str | None]:
    """The image bytes of the screenshot ``name`` inside ``root``, or ``(None, why it was refused)``."""
    real = _inside(str(name), root) if isinstance(name, str) and name else None
    if real is None:
        return None, "outside the run's screenshots folder"
    try:
        fd = os.open(real, _FLAGS)
    except OSError:
        return None, "missing or unreadable"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, "not a regular file"
        if st.st_size > max_bytes:
            return None, "too large"
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return None, "missing or unreadable"
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        return None, "too large"
    if image_mime(data) is None:
        return None, "not an image"
    return data, None


class Images:
    """Screenshots as data URIs up to a byte budget, then linked by path; only from the run's screenshots folder
    (``root``, set per run), refused ones counted in ``refused`` by reason."""

    def __init__(self, max_bytes: int, root: Path | None = None) -> None:
        self.left = max_bytes
        self.linked = 0
        self.root = root
        self.refused: Counter[str] = Counter()

    def __call__(self, name: Any) -> str | None:
        if not name:
            return None
        if self.root is None:
            self.refused["no screenshots folder"] += 1
            return None
        data, why = read_image(name, self.root)
        if data is None:
            self.refused[why or "refused"] += 1
            return None
        if len(data) > self.left:
            real = _inside(name, self.root)
            if real is None:  # moved away since it was read
                return None
            self.linked += 1
            return Path(real).as_uri()
        self.left -= len(data)
        return data_url(data)
