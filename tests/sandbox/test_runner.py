"""Sandbox runner details that the escape tests do not cover."""

import subprocess
import sys
import warnings

import pytest

from aworld_gym.base.errors import SandboxError
from aworld_gym.sandbox.runner import Limits, Sandbox, SandboxWarning


def test_python_installed_under_tmp_is_usable(tmp_path):
    """The private /tmp must not hide an interpreter that lives under the host's /tmp (CI clones there)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    sb = Sandbox(Limits(wall_seconds=20), python=str(venv / "bin" / "python"))
    work = tmp_path / "work"
    work.mkdir()
    r = sb.run("import sys; print(sys.prefix)", work)
    sb.close()
    assert r.exit_code == 0, r.render()
    assert r.stdout.strip() == str(venv)


def test_fallback_without_bwrap_warns_loudly(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb = Sandbox(isolation="none")
    assert sb.isolation == "none"
    assert any(issubclass(w.category, SandboxWarning) and "NO network isolation" in str(w.message) for w in caught)
    assert "HOST NETWORK" in str(sb.report["network"])
    r = sb.run("print(6 * 7)", tmp_path)  # still runs, with rlimits and a scrubbed environment
    sb.close()
    assert r.stdout.strip() == "42"


def test_missing_workdir_is_a_clear_error(tmp_path):
    from aworld_gym.base.errors import SandboxError

    sb = Sandbox()
    with pytest.raises(SandboxError, match="does not exist"):
        sb.run("print(1)", tmp_path / "nope")
    assert sb.run("print('a\\x00')", tmp_path).exit_code == 0
    assert "null bytes" in sb.run("x = 1\x00", tmp_path).stderr
    sb.close()


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_a_work_folder_removed_by_another_process_is_made_again(tmp_path, caplog, isolation):
    """Something else removing the sandbox's work folder (a temp cleaner; under pytest -n 2 a test that ran
    ``remove_own`` in the worker) made every later execution fail with FileNotFoundError, for the process's life."""
    import shutil

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SandboxWarning)
        sb = Sandbox(isolation=isolation)
    try:
        assert sb.run("print(1)", tmp_path).stdout.strip() == "1"
        old = sb._scratch
        shutil.rmtree(old)
        with caplog.at_level("WARNING", logger="aworld_gym.base.scratch"):
            r = sb.run("print(6 * 7)", tmp_path)
        assert r.exit_code == 0 and r.stdout.strip() == "42", r.render()
        assert "was removed while in use" in caplog.text and str(old) in caplog.text
        assert sb._scratch != old and sb._scratch.is_dir() and not old.exists()
        assert sb.run("print(2)", tmp_path).stdout.strip() == "2"  # once, not per execution
        assert caplog.text.count("was removed") == 1
    finally:
        sb.close()
    assert not sb._scratch.exists()
    with pytest.raises(SandboxError, match="closed"):  # after close: refused, not a new folder that nothing removes
        sb.run("print(3)", tmp_path)
    assert not sb._scratch.exists()
