"""benchmarks/clocks.py: every throughput row's two clocks, the whole run and the steady window, add up."""

from __future__ import annotations

import sys

import pytest

from benchmarks.clocks import Clocks, cell, missing


def test_marks_split_the_whole_run_into_startup_window_and_teardown() -> None:
    c = Clocks.from_marks(start=10.0, window_start=13.0, window_end=21.0, end=22.5)
    f = c.fields(16)
    assert (f["whole_s"], f["startup_s"], f["window_s"], f["teardown_s"]) == (12.5, 3.0, 8.0, 1.5)
    assert f["startup_s"] + f["window_s"] + f["teardown_s"] == pytest.approx(f["whole_s"])
    assert f["outside_window_s"] == pytest.approx(4.5) and f["paused_s"] == 0.0
    assert f["episodes_per_s_whole"] == pytest.approx(16 / 12.5)
    assert f["episodes_per_s"] == pytest.approx(16 / 8.0)
    assert cell(f) == "12.5 = 3.0 + 8.0 + 1.5"


def test_the_benchmarks_own_pauses_are_in_neither_clock() -> None:
    c = Clocks.from_marks(0.0, 4.0, 10.0, 14.0, paused_in_startup_s=1.0, paused_in_teardown_s=2.5)
    f = c.fields(3, rate="exec_per_s_8", digits=2)
    assert (f["whole_s"], f["startup_s"], f["window_s"], f["teardown_s"], f["paused_s"]) == (10.5, 3.0, 6.0, 1.5, 3.5)
    assert f["exec_per_s_8_whole"] == round(3 / 10.5, 2) and f["exec_per_s_8"] == 0.5


def test_parts_timed_one_after_another() -> None:
    f = Clocks.from_parts(startup_s=0.25, window_s=2.0, teardown_s=0.75).fields(100, rate="exec_per_s_8")
    assert f["whole_s"] == 3.0 and f["teardown_s"] == 0.75
    assert f["exec_per_s_8_whole"] == pytest.approx(100 / 3.0) and f["exec_per_s_8"] == 50.0


def test_a_call_timed_from_outside_has_no_split() -> None:
    f = Clocks.outside(whole_s=5.0, window_s=4.0).fields(8)
    assert f["startup_s"] is None and f["teardown_s"] is None and f["outside_window_s"] == 1.0
    assert f["episodes_per_s_whole"] == 1.6 and f["episodes_per_s"] == 2.0
    assert cell(f) == "5.0 = 4.0 + 1.0 outside"


def test_a_window_outside_its_run_is_refused() -> None:
    with pytest.raises(ValueError, match="out of order"):
        Clocks.from_marks(0.0, 2.0, 1.0, 3.0)
    with pytest.raises(ValueError, match="out of order"):
        Clocks.from_marks(1.0, 0.5, 2.0, 3.0)
    with pytest.raises(ValueError, match="must hold the window"):
        Clocks.outside(whole_s=1.0, window_s=2.0)


def test_a_row_that_never_ran_has_no_seconds_and_rate_zero() -> None:
    m = missing()
    assert m["whole_s"] is None and m["episodes_per_s"] == 0.0 and m["episodes_per_s_whole"] == 0.0
    assert cell(m) == "-"


def test_peers_clocks_on_a_small_run(tmp_path, monkeypatch) -> None:
    """One level of benchmarks/peers.py, aworld-gym's default config, 2 episodes: the whole run is the worker
    process (Popen to reaped), the window starts at the stand-in's first request, and the parts add up."""
    from benchmarks import peers

    monkeypatch.setattr(peers, "WORK", tmp_path)
    (tmp_path / "add_server.py").write_text(peers.ADD_SERVER)
    runner = peers.Runner(peers.GYM_DEFAULT, "aworld-gym", sys.executable)
    with peers.StandIn(0.05) as stand_in:
        row = peers.run_level(runner, stand_in, peers.tasks_for(2, seed=1), 2, 0.05, 120.0, 4 * 2**30,
                              tmp_path / "run")  # fmt: skip
    assert row["episodes"] == row["correct"] == 2, row.get("error")
    assert row["whole_s"] >= row["window_s"] > 0 and row["window_s"] == row["wall_s"]
    assert row["startup_s"] > 0 and row["teardown_s"] >= 0
    assert row["startup_s"] + row["window_s"] + row["teardown_s"] == pytest.approx(row["whole_s"], abs=0.01)
    assert row["whole_s"] == pytest.approx(row["process_wall_s"], abs=0.01)  # the same clock: the worker process
    assert row["episodes_per_s_whole"] == pytest.approx(2 / row["whole_s"], rel=1e-3)
    assert row["episodes_per_s"] == pytest.approx(2 / row["window_s"], rel=1e-3)
    assert f"{row['episodes_per_s_whole']:.2f} | {row['episodes_per_s']:.2f}" in peers.render_table([row])
