"""aworld_gym.base.scratch: temp names carry their owner's PID; a killed owner's are removed by the next maker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from aworld_gym.base import scratch

MAKE = (
    "import os, sys\n"
    "from aworld_gym.base import scratch\n"
    "d = scratch.make_dir(sys.argv[1]); (d / 'model-wrote.txt').write_text('x' * 1000)\n"
    "f = scratch.make_file(sys.argv[1], '.log'); f.write(b'log'); f.close()\n"
    "print(d, f.name, flush=True)\n"
    "sys.stdin.read()\n"  # stays alive until told
)


def _owner(prefix: str) -> tuple[subprocess.Popen[str], Path, Path]:
    proc = subprocess.Popen([sys.executable, "-c", MAKE, prefix], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    assert proc.stdout is not None
    folder, log = proc.stdout.readline().split()
    return proc, Path(folder), Path(log)


def test_names_carry_the_owner() -> None:
    prefix = f"aworld-test-scratch-{os.getpid()}x-"
    d = scratch.make_dir(prefix)
    try:
        assert d.is_dir() and scratch.owner(d.name, prefix) == os.getpid()
        assert scratch.owner("aworld-playwright-sock-12-x", "aworld-playwright-") is None  # another prefix's
        assert scratch.owner("other-12-x", prefix) is None
    finally:
        d.rmdir()


def test_a_killed_owners_leftovers_go_and_a_live_owners_stay() -> None:
    prefix = f"aworld-test-scratch-{os.getpid()}y-"
    live, live_dir, live_log = _owner(prefix)
    dead, dead_dir, dead_log = _owner(prefix)
    stranger = Path(tempfile.mkdtemp(prefix=f"{prefix}notapid-"))  # not a name the module made: never touched
    try:
        dead.send_signal(signal.SIGKILL)  # no clean-up of its own can run
        dead.wait(10)
        assert dead_dir.is_dir() and dead_log.is_file()
        mine = scratch.make_dir(prefix)  # the next maker sweeps
        assert not dead_dir.exists() and not dead_log.exists()
        assert live_dir.is_dir() and (live_dir / "model-wrote.txt").is_file() and live_log.is_file()
        assert stranger.is_dir() and mine.is_dir()
        assert scratch.sweep(prefix) == 0  # nothing left to remove while the live owner runs
        live.communicate("", timeout=10)  # the owner exits without removing its folder: the next sweep does
        assert scratch.sweep(prefix) == 2 and not live_dir.exists() and mine.is_dir()
        mine.rmdir()
    finally:
        for p in (live, dead):
            p.kill()
            p.wait(10)
        stranger.rmdir()


def test_remove_own_removes_only_this_processes_names(monkeypatch) -> None:
    # remove_own is what a process about to os._exit runs; this test process goes on, so it gets a list of its own:
    # with the real one it removed every folder this pytest worker's earlier tests had made and still used (the
    # process-wide Code-v0 sandbox's work folder: a later test's executions failed with FileNotFoundError)
    monkeypatch.setattr(scratch, "_made", [])
    prefix = f"aworld-test-scratch-{os.getpid()}z-"
    d, f = scratch.make_dir(prefix), scratch.make_file(prefix, ".log")
    f.close()
    other = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid() + 1}-"))  # as if a parent with another PID made it
    scratch._made.append((other, prefix))
    try:
        scratch.remove_own()
        assert not d.exists() and not Path(f.name).exists() and other.is_dir()
    finally:
        other.rmdir()


def test_remake_makes_a_removed_private_folder_and_refuses_a_planted_one(tmp_path) -> None:
    """A folder removed under a live process is made again at its path only as a private folder of this user's:
    something planted there in the meantime (a link to elsewhere, an open folder) is refused, never followed."""
    path = tmp_path / "gone"
    assert scratch.remake(path) == path and path.is_dir() and (path.stat().st_mode & 0o777) == 0o700
    assert scratch.remake(path) == path  # already there and private: kept
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "planted"
    link.symlink_to(target)
    with pytest.raises(OSError, match="made again by someone else"):
        scratch.remake(link)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(OSError, match="made again by someone else"):
        scratch.remake(shared)
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(OSError, match="made again by someone else"):
        scratch.remake(file)
    assert not list(target.iterdir())
