"""Every Python and shell example in README.md and docs/ runs as written.

Per page, in a fresh folder: its ``bash`` blocks one after another (each as ``bash -euo pipefail``, in its own
process group, which is killed afterwards: a block may start a server with ``&``), then its ``python`` blocks as
one script, in order (a later block may use what an earlier one made). The venv's ``bin`` is first on ``PATH``,
and the checkout is on ``PYTHONPATH`` (``python -m tests.transformers_serve`` works from anywhere). A block is
left out only when the line before it says why, in one of the allowed ways::

    <!-- no-run: needs a GPU: ... -->

and a test checks that every mark gives an allowed reason. Running is not enough: every page with run blocks has at
least one check in them (a python ``assert``; in bash ``test``, ``[ ]``, ``grep -q`` or ``python -c "...assert..."``
on a line of its own).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = ("python", "bash")
NO_RUN = re.compile(r"^<!-- no-run: (.+) -->$")
ALLOWED = ("needs a GPU", "needs an API key", "needs a cluster", "make test runs this file's examples",
           "runs in .venv-swift: tests/trainers/test_swift.py runs the blocks of this section",
           "tests/test_wheel.py runs these from the built wheel")  # fmt: skip


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    code: str
    skip: str | None


def blocks(page: Path) -> list[Block]:
    out: list[Block] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)", lines[i])
        if not m:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = NO_RUN.match(before.strip())
        out.append(Block(page, i + 1, m.group(1), "\n".join(lines[i + 1 : end]) + "\n", mark and mark.group(1)))
        i = end + 1
    return out


def name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def environment() -> dict[str, str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env["NO_MKDOCS_2_WARNING"] = "1"
    return env


def run(cmd: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen(cmd, cwd=cwd, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        out += f"\n[timed out after {timeout:.0f} s]"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # a server the block left in the background
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")


RUNNABLE = [p for p in PAGES if any(b.lang in RUN and not b.skip for b in blocks(p))]


@pytest.mark.parametrize("page", RUNNABLE, ids=name)
def test_every_example_of_the_page_runs(page, tmp_path):
    todo = [b for b in blocks(page) if b.lang in RUN and not b.skip]
    for b in (b for b in todo if b.lang == "bash"):
        out = run(["bash", "-euo", "pipefail", "-c", b.code], tmp_path, timeout=900)
        assert out.returncode == 0, f"{name(page)}:{b.line} (bash) failed:\n{b.code}\n--- output:\n{out.stdout[-6000:]}"
    python = [b for b in todo if b.lang == "python"]
    if python:
        script = "".join(f"# --- {name(page)}:{b.line}\n{b.code}\n" for b in python)
        (tmp_path / "example.py").write_text(script)
        out = run([sys.executable, "example.py"], tmp_path, timeout=900)
        where = ", ".join(str(b.line) for b in python)
        assert out.returncode == 0, f"{name(page)} (python blocks at lines {where}) failed:\n{out.stdout[-6000:]}"


# What counts as a check in a run block. In bash (run with -e) only a command on a line of its own: -e ignores a
# failure negated by `!` or followed by `&&` / `||`, so such a line would check nothing.
PY_CHECK = re.compile(r"^\s*assert\b", re.M)
SH_CHECK = re.compile(r"^(?:test |\[ |grep -q )(?!.*(?:&&|\|\|))", re.M)
SH_PY_CHECK = re.compile(r"^python3? -c (\"[^\"]*\bassert\b[^\"]*\"|'[^']*\bassert\b[^']*')", re.M)


def checks(b: Block) -> int:
    """The assertions in a run block: python `assert`s; bash `test`, `[ ]`, `grep -q`, `python -c "...assert..."`."""
    if b.lang == "python":
        return len(PY_CHECK.findall(b.code))
    return len(SH_CHECK.findall(b.code)) + len(SH_PY_CHECK.findall(b.code))


def test_what_counts_as_a_check():
    def bash(code: str) -> Block:
        return Block(ROOT, 1, "bash", code, None)

    assert checks(Block(ROOT, 1, "python", "x = 1\nfor i in []:\n    assert i\nassert x == 1\n", None)) == 2
    assert checks(bash('test -s out.html\n[ -f x ]\ngrep -q "100.0%" log\npython -c "import x\nassert x"\n')) == 4
    assert checks(bash("! grep -q secret log\ngrep -q a log && echo ok\ntest -f x || true\necho assert\n")) == 0


@pytest.mark.parametrize("page", RUNNABLE, ids=name)
def test_every_runnable_page_asserts_something(page):
    """Running is not enough: a page's examples check what its text claims (at least one check per page)."""
    todo = [b for b in blocks(page) if b.lang in RUN and not b.skip]
    assert sum(checks(b) for b in todo) > 0, f"{name(page)}: its run blocks assert nothing"


def test_every_block_left_out_says_why_in_an_allowed_way():
    marked = [b for p in PAGES for b in blocks(p) if b.skip]
    assert marked, "no block is marked: then this test checks nothing"
    for b in marked:
        assert b.skip.startswith(ALLOWED), f"{name(b.page)}:{b.line}: {b.skip!r} is not an allowed reason"
        assert b.lang in RUN, f"{name(b.page)}:{b.line}: only runnable blocks need a mark"
    # every fenced block is runnable, marked, or plainly not code to run (output, data, a citation)
    for p in PAGES:
        for b in blocks(p):
            assert b.lang in (*RUN, "", "text", "json", "yaml", "bibtex", "console"), f"{name(p)}:{b.line}: {b.lang}"


def test_readme_is_short_and_opens_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    head = text.split("## ", 1)[0]
    assert "make run" in head and "make test" in head
    first = next(b for b in blocks(ROOT / "README.md") if b.lang == "python")
    assert len([line for line in first.code.splitlines() if line.strip()]) <= 15


def test_docs_link_to_pages_that_exist():
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target:
                assert (page.parent / target).is_file(), f"{name(page)} links to a missing {target}"
