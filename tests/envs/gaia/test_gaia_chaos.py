"""GAIA-v0 under chaos (tests/chaos_gaia.py): one hostile tool call per episode (a path out of the attachments, a
missing file, a loopback or file: URL, a looping or fork-bombing program, wrong arguments, an unknown tool), then
the reference plan. Each hostile call comes back as the error it should be, and every task is still solved."""

from __future__ import annotations

import pytest

from tests.chaos_gaia import GAIA_FAULTS, run_gaia


@pytest.mark.slow
def test_a_hostile_call_does_not_break_a_gaia_episode():
    r = run_gaia(episodes=72, concurrency=8)
    assert r["records"] == 72 and r["lost"] == [] and r["doubled"] == []
    assert set(r["injected"]) == set(GAIA_FAULTS), r["injected"]
    assert not r["mismatches"], r["mismatches"][:5]
    assert not r["unsolved"], r["unsolved"][:5]
    # every server and sandbox process these envs started stopped with them: (pid, start time) sets, not counts
    assert r["left_running"] == [], f"processes started by this test still running: {r['left_running']}"
