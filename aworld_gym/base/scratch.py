"""Temporary folders and files that name the process that owns them, so that a killed owner's are removed later.

A server process removes its scratch folders when it exits, but not when it is killed (SIGKILL by a watchdog that
restarts a wedged server, by the OOM killer, by a chaos test), and over a long run those pile up in the temp folder,
with whatever the model's code wrote in them. Every such name carries the owner's PID (``<prefix><pid>-<random>``);
making a new one first removes those of the same prefix whose owner is gone (same user only).

A PID is reused by the kernel only after its process is gone, so a live owner's folder is never removed here; a dead
owner's stays until a process makes one of the same prefix (it may stay longer if its PID is reused meanwhile).
PIDs are this PID namespace's: containers that share one temp folder as the same user need a temp folder each
(``TMPDIR``), or one would remove another's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def owner(name: str, prefix: str) -> int | None:
    """The owner's PID in a name made by :func:`make_dir` or :func:`make_file` with ``prefix`` (else None)."""
    if not name.startswith(prefix):
        return None
    head = name[len(prefix) :].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def sweep(prefix: str, folder: str | None = None) -> int:
    """Remove the folders and files named ``<prefix><pid>-...`` (this user's) whose owner is gone; how many."""
    removed = 0
    uid = os.getuid()
    for path in Path(folder or tempfile.gettempdir()).glob(f"{prefix}*"):
        pid = owner(path.name, prefix)
        if pid is None or pid == os.getpid() or alive(pid):
            continue
        try:
            if path.lstat().st_uid != uid:
                continue
            _remove(path)
        except FileNotFoundError:  # another process swept it first
            continue
        except OSError as exc:
            logger.debug("could not remove %s: %s", path, exc)
            continue
        removed += 1
    if removed:
        logger.info("removed %d leftovers of killed processes (%s*)", removed, prefix)
    return removed


_made: list[tuple[Path, str]] = []  # what this process made, with the prefix, for remove_own


def make_dir(prefix: str) -> Path:
    """A new private temp folder ``<prefix><this pid>-<random>``, after sweeping dead owners' ones."""
    sweep(prefix)
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))
    _made.append((path, prefix))
    return path


def make_file(prefix: str, suffix: str = "") -> tempfile._TemporaryFileWrapper[bytes]:
    """A new temp file ``<prefix><this pid>-<random><suffix>``, open for writing (kept on close), after a sweep."""
    sweep(prefix)
    f = tempfile.NamedTemporaryFile(prefix=f"{prefix}{os.getpid()}-", suffix=suffix, delete=False)  # noqa: SIM115
    _made.append((Path(f.name), prefix))
    return f


def make_child(root: Path, name: str, prefix: str | None) -> tuple[Path, Path]:
    """Make the folder ``root/name``; where ``root`` is gone (a temp cleaner, ``rm -rf /tmp/aworld-*`` during a long
    run, a clean-up gone wrong), first a new root, warned: :func:`make_dir` ``(prefix)``, or ``root`` itself again
    where the caller chose it (``prefix=None``, :func:`remake`). Without this every later use fails with
    ``FileNotFoundError`` for the process's life. Returns ``(root, child)``: the caller keeps the root (under its own
    lock)."""
    try:
        (root / name).mkdir()
    except FileNotFoundError:
        logger.warning("the work folder %s was removed while in use; using a new one", root)
        root = remake(root) if prefix is None else make_dir(prefix)
        (root / name).mkdir()
    return root, root / name


def remake(path: Path) -> Path:
    """Make a removed private folder again at the same path (0700). Something else may have made that path in the
    meantime, in a shared temp folder perhaps on purpose: anything but a real folder of this user's is refused
    (``OSError``), never followed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        st = path.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise OSError(f"{path} was made again by someone else (not a private folder of this user's)") from None
    return path


def remove_own() -> None:
    """Remove the folders and files this process made and still has (what a process about to ``os._exit`` owns;
    not those a process it was forked from made)."""
    for path, prefix in list(_made):
        if owner(path.name, prefix) != os.getpid():  # a forked child's handler: its parent's are not its own
            continue
        with contextlib.suppress(OSError):
            _remove(path)


def _remove(path: Path) -> None:
    """Remove a folder with what is in it, or a file (a link is removed, never followed)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
