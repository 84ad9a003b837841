"""What one call of the GAIA file tools may read: the current task's attachments, and nothing else.

The task's attachment set comes from the env, not from the model: the ToolHub sends the task's files in each call's
``_meta["aworld_gym/files"]`` (set when the episode begins). The model's ``path`` argument only *chooses* among
them, by name, so no spelling (``..``, an absolute path, a symlink, a ``file://`` URL, percent-encoding) can name
another file. What the hub sends is bounded server-side too: attachments must lie inside the server's ``roots``
(when it has any), and files on its ``deny`` list (GAIA's answer key) are never read, whoever names them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

SANDBOX_FILES = "/sandbox/files/"  # where run_python and run_shell see the attachments (the prompt says so)


def quoted(name: str) -> str:
    """A file name as a JSON string: one line, unambiguous (spaces at either end, newlines, quotes), and safe to
    send (a name with undecodable bytes keeps them as ``\\udcXX`` escapes, which :meth:`Access.resolve` reads)."""
    text = json.dumps(name, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(name)
    return text


def _file_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _inside(path: str, roots: Sequence[str]) -> bool:
    """Whether ``path`` lies inside one of ``roots``, as written (``..`` folded) or once symlinks are resolved.

    As written covers a dataset folder whose files are symlinks (the Hugging Face cache layout links each file to
    a blob outside the folder); the folder is the operator's, and the model never names a path.
    """
    lexical, real = os.path.abspath(path), os.path.realpath(path)
    return any(p == r or p.startswith(r.rstrip(os.sep) + os.sep) for r in roots for p in (lexical, real))


class Access:
    """The attachments one call may read.

    Args:
        files: the task's attachments as the hub names them (absolute paths); anything else is ignored.
        roots: when not empty, folders the attachments must lie in; others are left out.
        deny: files never read, even when named as an attachment (compared by identity: a symlink or hard link to
            one is denied too).
    """

    def __init__(self, files: Iterable[Any], roots: Sequence[str | Path] = (), deny: Sequence[str | Path] = ()) -> None:
        bounds = [os.path.abspath(r) for r in roots] + [os.path.realpath(r) for r in roots]
        denied = {i for i in map(_file_id, map(str, deny)) if i is not None}
        self.files: list[str] = []
        for f in files:
            if not isinstance(f, str) or not f or "\x00" in f or not os.path.isabs(f):
                continue
            f = os.path.abspath(f)
            if (bounds and not _inside(f, bounds)) or _file_id(f) in denied or f in self.files:
                continue
            self.files.append(f)
        self.denied = denied

    def names(self) -> str:
        """The attachments' names, JSON-quoted, for an error message."""
        return ", ".join(quoted(os.path.basename(f)) for f in self.files) or "no files are attached to this task"

    def resolve(self, path: Any) -> tuple[Path | None, str]:
        """(the attachment ``path`` names, its name), or (None, an error observation).

        ``path`` is matched against the attachments' names and their absolute paths, as given, without spaces at
        either end, as a JSON string (as ``list_files`` shows names), with ``file://`` or ``/sandbox/files/`` in
        front; never joined to a folder.
        """
        if not isinstance(path, str):
            return None, "Error: the path must be a string."
        if "\x00" in path:
            return None, "Error: the path contains a NUL character."
        by_name: dict[str, str] = {}
        for f in self.files:
            by_name.setdefault(os.path.basename(f), f)
        for spelling in _spellings(path):
            hit = by_name.get(spelling) or (spelling if spelling in self.files else None)
            if hit is not None:
                if _file_id(hit) in self.denied:  # replaced by a link to a denied file since the call began
                    break
                return Path(hit), os.path.basename(hit)
        return None, f"Error: access denied: only the task's attachments can be read ({self.names()})."


def _spellings(path: str) -> list[str]:
    """The ways a model may write an attachment's name or path, most literal first."""
    out = [path]
    if len(path) >= 2 and path[0] == path[-1] == '"':
        try:
            value = json.loads(path)
        except ValueError:
            value = None
        if isinstance(value, str):
            out.append(value)
    for p in list(out):
        for prefix in ("file://", SANDBOX_FILES):
            if p.startswith(prefix) and len(p) > len(prefix):
                out.append(p[len(prefix) :])
    out += [p.strip() for p in out if p.strip() != p]
    return list(dict.fromkeys(out))
