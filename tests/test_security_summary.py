"""The end-of-run list of skipped security tests (``pytest_terminal_summary`` in tests/conftest.py), run on a small
test tree of its own with pytester."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

HOOKS = "from tests.conftest import pytest_configure, pytest_terminal_summary  # noqa: F401\n"


def test_skipped_security_tests_are_listed_with_their_reasons(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(HOOKS)
    sandbox = pytester.mkdir("tests").joinpath("sandbox")
    sandbox.mkdir()
    sandbox.joinpath("test_escape_like.py").write_text(
        "import pytest\n"
        "def test_runs():\n    pass\n"
        "@pytest.mark.skipif(True, reason='the warm path needs root')\n"
        "def test_warm_a():\n    pass\n"
        "@pytest.mark.skipif(True, reason='the warm path needs root')\n"
        "def test_warm_b():\n    pass\n"
    )
    sandbox.joinpath("test_gone.py").write_text(
        "import pytest\npytest.skip('bubblewrap is missing', allow_module_level=True)\n"
    )
    pytester.makepyfile(
        test_elsewhere=(
            "import pytest\n"
            "@pytest.mark.security\n"
            "def test_marked():\n    pytest.skip('no user namespaces')\n"
            "def test_ordinary_skip():\n    pytest.skip('not a security test')\n"
            "@pytest.mark.security\n@pytest.mark.xfail(reason='known')\n"
            "def test_marked_xfail():\n    assert False\n"
        )
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=5, xfailed=1)
    out = result.stdout.str()
    assert out.count("SECURITY TESTS SKIPPED: 4") == 2  # the banner opens and closes the block
    block = out.split("SECURITY TESTS SKIPPED: 4")[1]
    assert "2 skipped: the warm path needs root" in block
    assert "tests/sandbox/test_escape_like.py::test_warm_a" in block and "::test_warm_b" in block
    assert "1 skipped: bubblewrap is missing" in block and "tests/sandbox/test_gone.py" in block
    assert "1 skipped: no user namespaces" in block and "test_elsewhere.py::test_marked" in block
    assert "test_ordinary_skip" not in block and "test_marked_xfail" not in block and "::test_runs" not in block
    assert "The warm sandbox needs root and bubblewrap" in block


def test_nothing_is_printed_when_no_security_test_skipped(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(HOOKS)
    pytester.makepyfile(
        test_plain=(
            "import pytest\n"
            "@pytest.mark.security\ndef test_marked():\n    pass\n"
            "def test_ordinary_skip():\n    pytest.skip('not a security test')\n"
        )
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
    assert "SECURITY" not in result.stdout.str()
