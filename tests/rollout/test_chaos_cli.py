"""Every fault family in one run (tests/chaos_cli.py): the ``aworld-gym rollout`` command on Ray, a model endpoint
failing at random, hostile tool replies, Ray actors SIGKILLed and the driver SIGKILLed and resumed. Every
(task, sample) is recorded exactly once with a termination kind, every failure is one that was injected, and
nothing the run started is left running."""

from __future__ import annotations

import pytest

from tests import chaos
from tests.chaos_cli import run_mixed

EPISODES = 120
# The tool timeout: generous, so that a fault that answers at once (an error, a server that exits) is not outrun by
# its timeout on a loaded machine (at 1.5 s it was, with two busy processes beside the run on 2 cores); the hanging
# faults wait it out.
TOOL_TIMEOUT_S = 5.0


@pytest.mark.slow
def test_all_fault_families_in_one_run_lose_nothing_and_leave_nothing(tmp_path):
    r = run_mixed(tmp_path, EPISODES, concurrency=16, endpoint_faults=0.1, kill_every_s=4.0, timeout=TOOL_TIMEOUT_S)
    assert r["returncode"] == 0, r["stderr_tail"]
    injected = r["injected"]
    assert injected["driver_kills"] == 1 and 0 < r["written_before_driver_kill"] < EPISODES
    assert r["left_after_driver_kill"] == [], "the killed driver's Ray processes, actors or servers outlived it"
    assert r["records"] == EPISODES and r["lost"] == [] and r["doubled"] == []
    # Every episode ended with a kind, and each kind is explained by a fault that was injected.
    ends = r["terminations"]
    assert "none" not in ends and set(ends) <= {"answer", "tool_timeout", "env_crash", "policy_error"}, ends
    assert not r["mismatches"], r["mismatches"][:5]  # each tool fault shows as its error kind
    # A killed actor's episodes run again elsewhere (recorded once, with actor_attempts); env_crash only past retries.
    assert injected["actor_kills"] >= 1 and r["actor_reruns"] + r["actor_crashes"] >= 1, r
    assert r["actor_crashes"] <= 8 * injected["actor_kills"], r
    assert sum(injected["endpoint"].values()) >= 1
    # 429, 500, dropped connections and hangs are retried; a non-JSON 200 is not: it ends its episode, readably.
    assert len(r["policy_errors"]) <= injected["endpoint"].get("garbage", 0)
    for error in r["policy_errors"]:
        last = error.strip().splitlines()[-1]
        assert "the model endpoint failed: JSONDecodeError" in last and len(last) < 300, last
    assert set(injected["tool"]) == set(chaos.FAULTS)
    assert r["orphans"] == [], f"processes left running: {r['orphans']}"
