"""A short chaos soak (the long one is benchmarks/soak.py): 300 MCP-v0 episodes over a hostile stdio server, one
random fault each. Every episode is recorded exactly once, each fault shows as the error kind it should, nothing is
left running, and file descriptors, threads, child processes and memory stay flat in steady state."""

from __future__ import annotations

import pytest

from tests import chaos


@pytest.mark.slow
def test_300_episodes_with_faults_lose_nothing_and_leak_nothing():
    result = chaos.run(episodes=300, concurrency=24, timeout=1.5)
    assert result["records"] == 300 and result["lost"] == [] and result["doubled"] == []
    assert not result["mismatches"], result["mismatches"][:5]
    assert set(result["injected"]) == set(chaos.FAULTS)  # every kind of fault was exercised
    assert sum(result["terminations"].values()) == 300 and "none" not in result["terminations"]
    # the processes this run started, as (pid, start time), none still running once its envs closed
    assert result["left_running"] == [], f"processes started by the run still running: {result['left_running']}"
    assert result["orphans"] == [], f"hostile servers left running: {result['orphans']}"
    grew = chaos.growth(result)
    mid = result["samples"]["one third"]
    assert grew["fds"] <= max(8, 0.1 * mid["fds"]), grew
    assert grew["threads"] <= 4, grew
    assert grew["rss_mb"] <= 0.1 * mid["rss_mb"] + 16, grew
    assert grew["children"] <= 4, grew
