"""The test run's own set-up: what each pytest-xdist worker gets (tests/conftest.py)."""

import os

import pytest


def test_each_xdist_worker_has_its_share_of_the_cores_for_torch():
    """Two OpenMP threads per worker on two cores spin at every barrier while the other worker holds a core (the
    tiny Qwen3 generated 2.6x slower than with one thread): each worker gets cores // workers threads."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers < 2:
        pytest.skip("one test process: torch keeps its default")
    torch = pytest.importorskip("torch")
    assert torch.get_num_threads() == int(os.environ["OMP_NUM_THREADS"])  # what the servers a test starts inherit
    if "AWORLD_GYM_TEST_THREADS" in os.environ:  # set by tests/conftest.py (not by whoever ran pytest)
        assert torch.get_num_threads() == max(1, len(os.sched_getaffinity(0)) // workers)
