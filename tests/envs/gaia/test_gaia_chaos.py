"""GAIA-v0 under chaos (tests/chaos_gaia.py): one hostile tool call per episode (a path out of the attachments, a
missing file, a loopback or file: URL, a looping or fork-bombing program, wrong arguments, an unknown tool), then
the reference plan. Each hostile call comes back as the error it should be, and every task is still solved."""

from __future__ import annotations

import psutil
import pytest

from tests.chaos_gaia import GAIA_FAULTS, run_gaia


def _descendants() -> dict[tuple[int, float], str]:
    """This process's live descendants (zombies excluded): (pid, start time) -> command line."""
    found = {}
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                found[(p.pid, p.create_time())] = " ".join(p.cmdline())[:200]
        except psutil.NoSuchProcess:
            continue
    return found


@pytest.mark.slow
def test_a_hostile_call_does_not_break_a_gaia_episode():
    before = _descendants()  # earlier tests' process-wide ones (a shared warm sandbox) are not this test's
    r = run_gaia(episodes=72, concurrency=8)
    assert r["records"] == 72 and r["doubled"] == []
    assert set(r["injected"]) == set(GAIA_FAULTS), r["injected"]
    assert not r["mismatches"], r["mismatches"][:5]
    assert not r["unsolved"], r["unsolved"][:5]
    # every server and sandbox process these envs started stopped with them
    left = {key: cmd for key, cmd in _descendants().items() if key not in before}
    assert left == {}, f"processes started by this test still running: {left}"
