"""Code-v0 under hostile programs (infinite loops, self-kills, fork bombs, output floods, crashes, syntax errors)
on the warm sandbox: every episode recorded once, each program's result says what happened to it, rewards follow
the submitted solution, and nothing leaks."""

from __future__ import annotations

import pytest

from tests import chaos


@pytest.mark.slow
def test_hostile_programs_in_code_v0_lose_nothing_and_leak_nothing():
    result = chaos.run_code(episodes=48, concurrency=8, exec_timeout_s=2.0)
    assert result["records"] == 48 and result["lost"] == [] and result["doubled"] == []
    assert result["left_running"] == [], f"processes started by the run still running: {result['left_running']}"
    assert not result["mismatches"], result["mismatches"][:5]
    assert len(result["injected"]) >= 5, result["injected"]
    assert set(result["scores"]) <= {"right -> 1.0", "broken -> 0.0"}, result["scores"]
    grew = {k: result["samples"]["two thirds"][k] - result["samples"]["one third"][k] for k in ("fds", "threads")}
    assert grew["fds"] <= 8 and grew["threads"] <= 4, grew
