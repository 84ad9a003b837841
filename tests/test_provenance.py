"""benchmarks/provenance.py's stamp: the fields every benchmark JSON carries, read from this machine and a real git
repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import provenance


def test_stamp_records_commit_cpu_load_and_steal():
    prov = provenance.stamp({})["provenance"]
    for key in ("git", "dirty", "code_dirty", "when", "machine", "cpu_model", "cpu_flags", "cores", "load_avg_start",
                "load_avg_end", "wall_s", "steal_s", "steal_fraction", "other_cpu_s", "other_cpus", "quiet"):  # fmt: skip
        assert key in prov, key
    assert isinstance(prov["git"], str) and isinstance(prov["cores"], int) and prov["cores"] >= 1
    assert len(prov["load_avg_start"]) == len(prov["load_avg_end"]) == 3 and prov["wall_s"] > 0
    if sys.platform == "linux":
        assert isinstance(prov["cpu_model"], str) and prov["cpu_model"].strip()
        assert isinstance(prov["cpu_flags"], list) and set(prov["cpu_flags"]) <= set(provenance.KERNEL_FLAGS)
        assert isinstance(prov["steal_s"], float) and prov["steal_s"] >= 0
        assert isinstance(prov["steal_fraction"], float) and 0 <= prov["steal_fraction"] <= 1


def test_cpu_info_keeps_the_kernel_flags_only(tmp_path: Path):
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
                   "flags\t\t: fpu sse sse2 sse4_2 avx avx2 fma avx512f avx512_bf16 amx_tile amx_bf16 ht\n"
                   "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: fpu\n")  # fmt: skip
    assert provenance.cpu_info(str(x86)) == (
        "Intel(R) Xeon(R) Platinum 8480+", ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile",
                                            "amx_bf16"])  # fmt: skip
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd sve sve2 bf16 i8mm crc32\nCPU part\t: 0xd4f\n")
    assert provenance.cpu_info(str(arm)) == (None, ["asimd", "sve", "sve2", "bf16", "i8mm"])
    assert provenance.cpu_info(str(tmp_path / "missing")) == (None, None)


def test_steal_is_the_eighth_column_of_the_cpu_line(tmp_path: Path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  2255653 66632 406609 758882 6640 0 2214 4376 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    assert provenance._steal_ticks(str(stat)) == 4376
    assert provenance._steal_ticks(str(tmp_path / "missing")) is None


@pytest.fixture(autouse=True)
def _start_again_after():
    """Set up before a test's monkeypatch, so torn down after it: the run's start is this checkout's again."""
    yield
    provenance.begin()


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for path in ("aworld_gym/env.py", "benchmarks/peers.py", "benchmarks/results/peers.json", "docs/index.md"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "init")
    monkeypatch.setattr(provenance, "ROOT", tmp_path)
    provenance.begin()  # the run starts now, in this repository
    return tmp_path


def _dirty(repo: Path) -> tuple[bool, bool]:
    prov = provenance.stamp({})["provenance"]
    return prov["dirty"], prov["code_dirty"]


def test_a_clean_tree_is_clean_and_the_commit_is_recorded(repo: Path):
    prov = provenance.stamp({})["provenance"]
    assert (prov["dirty"], prov["code_dirty"]) == (False, False)
    assert prov["git"] == subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True,
                                         text=True, check=True).stdout.strip()  # fmt: skip


def test_a_docs_edit_or_a_rewritten_result_leaves_the_code_clean(repo: Path):
    (repo / "docs/index.md").write_text("edited\n")
    assert _dirty(repo) == (True, False)
    (repo / "benchmarks/results/peers.json").write_text("{}\n")  # what `make figures` rewrites
    (repo / "benchmarks/results/new.json").write_text("{}\n")
    assert _dirty(repo) == (True, False)


@pytest.mark.parametrize("path", ["aworld_gym/env.py", "benchmarks/peers.py", "aworld_gym/new.py"])
def test_a_code_change_makes_the_code_dirty(repo: Path, path: str):
    (repo / path).write_text("changed\n")
    tracked = path != "aworld_gym/new.py"
    assert _dirty(repo) == (tracked, True)  # an untracked module counts for the code, not for `dirty`


def test_without_git_the_fields_are_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setattr(provenance, "ROOT", tmp_path)  # not a repository: git fails
    provenance.begin()
    prov = provenance.stamp({})["provenance"]
    assert (prov["git"], prov["dirty"], prov["code_dirty"], prov["code_changed_during_run"]) == ("", None, None, None)


def test_a_commit_during_the_run_is_named_and_a_code_change_flagged(repo: Path):
    start = provenance._git("rev-parse", "--short", "HEAD")
    (repo / "docs/index.md").write_text("edited\n")
    _git(repo, "commit", "-qam", "docs")
    prov = provenance.stamp({})["provenance"]  # a docs commit: the code that ran is the start's
    assert (prov["git"], prov["code_changed_during_run"], prov["code_dirty"]) == (start, False, False)
    assert prov["git_end"] != start
    (repo / "aworld_gym/env.py").write_text("changed\n")
    _git(repo, "commit", "-qam", "code")
    prov = provenance.stamp({})["provenance"]
    assert prov["git"] == start and prov["code_changed_during_run"] and not prov["code_dirty"]


def test_an_uncommitted_code_change_during_the_run_is_flagged(repo: Path):
    (repo / "benchmarks/peers.py").write_text("changed\n")
    prov = provenance.stamp({})["provenance"]
    assert prov["code_changed_during_run"] and prov["code_dirty"] and "git_end" not in prov
