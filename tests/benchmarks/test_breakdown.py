"""benchmarks/breakdown.py: a run's C x wall slot-seconds shared out exactly, from the model server's timestamps."""

from __future__ import annotations

import pytest

from benchmarks.breakdown import PARTS, breakdown, idle, render


def test_idle_counts_uncovered_slot_seconds() -> None:
    spans = [(0.0, 2.0), (1.0, 3.0)]
    assert idle(spans, 2, 0.0, 4.0) == pytest.approx(8.0 - 4.0)
    assert idle(spans, 2, 1.0, 2.0) == pytest.approx(0.0)  # both slots busy
    assert idle(spans, 1, 0.0, 4.0) == pytest.approx(4.0 - 3.0)  # over-full moments never count negative
    assert idle(spans, 2, 3.0, 3.0) == 0.0


def test_breakdown_shares_out_every_slot_second() -> None:
    timeline = {
        "a": [(1.5, 2.5), (0.0, 1.0)],  # out of order: sorted by arrival; 0.5 s turn
        "b": [(1.0, 2.2), (2.2, 3.2)],  # the stand-in took 0.2 s over its latency
        "c": [(3.0, 4.0), (4.0, 5.0)],
        "d": [(4.0, 5.0), (5.0, 6.0)],
    }
    b = breakdown(timeline, slots=2, start=0.0, end=7.0, latency=1.0)
    assert b["slot_s"] == pytest.approx(
        {"model": 8.0, "stand_in": 0.2, "turn": 0.5, "ramp": 1.0, "between": 1.3, "drain": 1.0, "close": 2.0}
    )
    assert sum(b["slot_s"].values()) == pytest.approx(2 * 7.0)
    assert b["unaccounted_slot_s"] == pytest.approx(0.0)
    assert b["share"]["model"] == pytest.approx(8.0 / 14.0, abs=1e-4)  # the efficiency against the ideal
    assert b["ms_per_episode"]["turn"] == pytest.approx(125.0)
    cell = render(b)
    assert cell == "model 57 · stand-in 1 · turn 4 · ramp 7 · between 9 · drain 7 · close 14"
    assert render(None) == "-" and set(b["share"]) == set(PARTS)


def test_fewer_episodes_than_slots() -> None:
    b = breakdown({"a": [(0.0, 1.0), (1.0, 2.0)]}, slots=4, start=0.0, end=2.0, latency=1.0)
    assert b["slot_s"]["model"] == pytest.approx(2.0)
    assert b["slot_s"]["ramp"] + b["slot_s"]["between"] + b["slot_s"]["drain"] == pytest.approx(6.0)
    assert b["slot_s"]["close"] == 0.0
