"""The end-of-run list of trainer faces whose package is missing, and AWORLD_GYM_REQUIRE_FACES turning such a skip
into a failed run (tests/face_skips.py, the hooks in tests/conftest.py). The small test tree runs in a subprocess
whose conftest makes the face packages unimportable (``sys.modules[name] = None``), as a missing install would."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.face_skips import REQUIRE_VAR, face_of, required_faces

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
HOOKS = (
    "import sys\n"
    "from tests.conftest import pytest_configure, pytest_sessionfinish, pytest_terminal_summary  # noqa: F401\n"
    "for name in ('verl', 'slime', 'skyrl_gym'):\n    sys.modules[name] = None  # not installed\n"
)
TREE = {
    "test_verl_like": "import pytest\npytest.importorskip('verl')\ndef test_agent_loop():\n    pass\n",
    "test_faces_like": (
        "import pytest\n"
        "def test_slime():\n    pytest.importorskip('slime.rollout')\n"
        "def test_skyrl():\n    pytest.importorskip('skyrl_gym')\n"
        "@pytest.mark.skipif(True, reason='needs .venv-swift (make test builds it)')\n"
        "def test_openenv():\n    pass\n"
        "def test_runs():\n    pass\n"
        "def test_not_a_face():\n    pytest.importorskip('no_such_module_here')\n"
        "def test_ordinary_skip():\n    pytest.skip('needs a GPU')\n"
    ),
}


@pytest.fixture
def tree(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.delenv(REQUIRE_VAR, raising=False)
    pytester.makeconftest(HOOKS)
    pytester.makepyfile(**TREE)
    return pytester


def block_of(out: str, n: int) -> str:
    banner = f"TRAINER FACES SKIPPED: {n}"
    assert out.count(banner) == 2, out  # the banner opens and closes the block
    return out.split(banner)[1]


def test_each_face_whose_package_is_missing_is_listed_with_its_tests(tree: pytest.Pytester) -> None:
    result = tree.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=6)
    assert result.ret == 0  # listed only: nothing requires these faces
    block = block_of(result.stdout.str(), 4)
    assert "verl (verl; make (.venv-verl)): 1 skipped" in block
    assert "test_verl_like.py: could not import 'verl'" in block  # a module-level skip: the file
    assert "slime (slime; not installed by make" in block and "test_faces_like.py::test_slime" in block
    assert "skyrl (skyrl_gym; make (.venv)): 1 skipped" in block and "::test_skyrl" in block
    assert "openenv (openenv; " in block and "::test_openenv: needs .venv-swift" in block
    assert "test_not_a_face" not in block and "test_ordinary_skip" not in block and "FAILED" not in block


def test_a_required_face_that_skipped_fails_the_run(tree: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REQUIRE_VAR, "verl,skyrl,trl")
    result = tree.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=6)  # no test failed: the requirement fails the run
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    block = block_of(result.stdout.str(), 4)
    assert f"FAILED: {REQUIRE_VAR} requires skyrl, verl (`make` installs them)" in block  # trl did not skip


def test_a_required_face_that_ran_leaves_the_run_green(tree: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REQUIRE_VAR, "trl,areal")
    result = tree.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 0 and "FAILED" not in result.stdout.str()


def test_a_misspelt_face_is_a_usage_error(tree: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REQUIRE_VAR, "trl,vrel")
    result = tree.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "names unknown faces ['vrel']" in result.stderr.str()


def test_which_skips_belong_to_a_face() -> None:
    assert face_of("could not import 'areal.api.workflow_api': No module named 'areal'") == "areal"
    assert face_of("could not import 'ray': No module named 'ray'") == "rllib"
    assert face_of("could not import 'swift.rollout': No module named 'swift'") == "swift"
    assert face_of("needs .venv-swift (OpenEnv's client; make test builds it)") == "openenv"
    assert face_of("could not import 'datasets': No module named 'datasets'") is None
    assert face_of("npm install has not been run") is None
    assert required_faces({REQUIRE_VAR: " trl, verl ,"}) == {"trl", "verl"} and required_faces({}) == set()
