from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

# pytest-xdist: each worker gets its share of the cores for torch's OpenMP/MKL threads (set before torch loads; the
# servers and examples a test starts inherit it). Two threads per worker on two cores spin at every OpenMP barrier
# while the other worker holds a core: the tiny Qwen3 generated 40 tokens in 0.81 s instead of 0.31 s with one
# thread (0.12 s on a quiet machine), and the TRL learning test took 809 s of a 35-minute `make test`.
# A value already set wins (tests/test_workers.py checks both cases).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1 and "OMP_NUM_THREADS" not in os.environ:
    os.environ["AWORLD_GYM_TEST_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // _WORKERS))
    os.environ["OMP_NUM_THREADS"] = os.environ["AWORLD_GYM_TEST_THREADS"]
    os.environ.setdefault("MKL_NUM_THREADS", os.environ["AWORLD_GYM_TEST_THREADS"])

from aworld_gym.fixtures.learning import pin_kernels  # noqa: E402 - no torch: the kernels are set before it loads

# The CPU kernels (torch's vector width, MKL's and oneDNN's instruction sets) pinned to AVX2 for the whole suite, so
# a learning test trains the same model on an AVX2 and an AVX-512 machine (a value already set wins).
pin_kernels()

from tests import face_skips, parallel  # noqa: E402 - after the thread settings above
from tests.helpers import http_demo_server  # noqa: E402

# Security tests: every test under these folders (node ids, from the root of the checkout), and any marked `security`.
SECURITY_PATHS = ("tests/sandbox/",)


@pytest.fixture(scope="session")
def http_url():
    with http_demo_server() as url:
        yield url


@pytest.fixture(scope="session")
def sse_url():
    with http_demo_server("sse") as url:
        yield url


@pytest.fixture(autouse=True)
def _event_loop_policy():
    """A test that ran uvicorn in this process may leave uvloop installed as the loop policy: put the policy back, so
    no test's outcome depends on which ran before it (the loop is chosen on purpose where it matters)."""
    import asyncio

    policy = asyncio.get_event_loop_policy()
    yield
    if asyncio.get_event_loop_policy() is not policy:
        asyncio.set_event_loop_policy(policy)


# ----- pytest-xdist: whole files per worker, conflicting files on one, slow ones first (tests/parallel.py) -------
@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's own; optional: xdist may be absent
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") == "loadfile":
        return parallel.scheduler(config, log)
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # a worker of `pytest -n N`; a plain run keeps its order
        parallel.order(items)


# ----- a loud list of the security tests and trainer faces that did not run -------------------------------
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "security: a security test; listed at the end of the run if it skipped")
    try:
        face_skips.required_faces()
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def security_skips(terminalreporter: pytest.TerminalReporter) -> list[tuple[str, str]]:
    """(node id, reason) of every skipped security test of this run."""
    found = []
    for report in terminalreporter.stats.get("skipped", []):
        security = report.nodeid.startswith(SECURITY_PATHS) or "security" in getattr(report, "keywords", {})
        if security and not hasattr(report, "wasxfail"):
            found.append((report.nodeid, _skip_reason(report)))
    return found


def skipped_faces(terminalreporter: pytest.TerminalReporter) -> dict[str, list[tuple[str, str]]]:
    """The trainer faces of this run whose tests skipped because the trainer's package is missing (tests/face_skips.py),
    each with its (node id, reason) skips."""
    reports = terminalreporter.stats.get("skipped", [])
    skips = [(r.nodeid, _skip_reason(r)) for r in reports if not hasattr(r, "wasxfail")]
    return face_skips.face_skips(skips)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A face named in AWORLD_GYM_REQUIRE_FACES (``make test``: the faces ``make`` installs) that skipped fails the run.
    Runs before the terminal summary (the terminal reporter writes it after this hook), which says why it failed."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if hasattr(session.config, "workerinput") or reporter is None:  # xdist's controller sees every worker's skips
        return
    if face_skips.required_faces() & skipped_faces(reporter).keys() and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    """Every security test and every trainer face that skipped, and why, in blocks nobody can miss; nothing when none
    skipped."""
    _summarize_security(terminalreporter)
    _summarize_faces(terminalreporter)


def _summarize_faces(tr: pytest.TerminalReporter) -> None:
    faces = skipped_faces(tr)
    if not faces:
        return
    required = face_skips.required_faces() & faces.keys()
    tr.write_sep("!", f"TRAINER FACES SKIPPED: {len(faces)}", red=True, bold=True)
    tr.write_line("These faces were NOT tested in this run (their trainer package is missing):", red=True, bold=True)
    for name, skips in faces.items():
        face = face_skips.FACES[name]
        tr.write_line(f"  {name} ({face.package}; {face.installed_by}): {len(skips)} skipped", red=True, bold=True)
        for nodeid, reason in skips:
            tr.write_line(f"    {nodeid}: {reason}", red=True)
    if required:
        tr.write_line(
            f"FAILED: {face_skips.REQUIRE_VAR} requires {', '.join(sorted(required))} (`make` installs them): "
            "rebuild the venvs (make clean && make test).",
            red=True,
            bold=True,
        )
    tr.write_sep("!", f"TRAINER FACES SKIPPED: {len(faces)}", red=True, bold=True)


def _summarize_security(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = security_skips(terminalreporter)
    if not skipped:
        return
    by_reason: dict[str, list[str]] = {}
    for nodeid, reason in skipped:
        by_reason.setdefault(reason, []).append(nodeid)
    tr = terminalreporter
    tr.write_sep("!", f"SECURITY TESTS SKIPPED: {len(skipped)}", red=True, bold=True)
    tr.write_line("These protections were NOT tested on this machine:", red=True, bold=True)
    for reason, nodeids in by_reason.items():
        tr.write_line(f"  {len(nodeids)} skipped: {reason}", red=True, bold=True)
        for nodeid in nodeids:
            tr.write_line(f"    {nodeid}", red=True)
    tr.write_line(
        "The warm sandbox needs root and bubblewrap; the escape suite needs bubblewrap able to create namespaces "
        "(root, or unprivileged user namespaces). Without them the sandbox falls back (README: set-up).",
        red=True,
        bold=True,
    )
    tr.write_sep("!", f"SECURITY TESTS SKIPPED: {len(skipped)}", red=True, bold=True)
