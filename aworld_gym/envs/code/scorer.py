"""HumanEval scoring: the submitted code plus the hidden tests, run in the sandbox (never in our process)."""

from __future__ import annotations

import re
import tempfile
import textwrap
from dataclasses import dataclass

from aworld_gym.base.errors import last_line
from aworld_gym.core.actions import strip_code_fence
from aworld_gym.core.task import Task
from aworld_gym.sandbox.runner import ExecResult, Sandbox

_FENCE_RE = re.compile(r"```[a-zA-Z0-9_+-]*\n(.*?)```", re.DOTALL)


def extract_code(answer: str) -> str:
    """The code of an answer: the last fenced block if any (```python ... ```), else the text itself."""
    blocks = _FENCE_RE.findall(answer)
    if blocks:
        return blocks[-1]
    return strip_code_fence(answer)


def build_program(answer: str, task: Task) -> str:
    """Prompt (helpers, imports) + submission + the task's tests + ``check(entry_point)``.

    A submission that defines the entry point replaces the prompt's stub; anything else is taken as the body
    that completes the prompt (HumanEval's completion format).
    """
    entry = task.metadata["entry_point"]
    code = extract_code(answer)
    defines = re.search(rf"^\s*(async\s+)?def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE) is not None
    if defines:
        body = textwrap.dedent(code)
        program = task.prompt + "\n    pass\n\n" + body
    else:
        # A completion of the prompt's last function: re-indent it as that function's body (answers arrive
        # stripped, so the first line's indentation is usually lost).
        program = task.prompt + _as_body(code)
    return f"{program}\n\n{task.metadata['test']}\n\ncheck({entry})\n"


def _as_body(code: str) -> str:
    lines = code.strip("\n").split("\n")
    rest = [ln for ln in lines[1:] if ln.strip()]
    rest_indent = min((len(ln) - len(ln.lstrip()) for ln in rest), default=0)
    if lines and not lines[0].startswith((" ", "\t")) and rest and rest_indent >= 4:
        lines[0] = "    " + lines[0]  # only the first line lost its indentation
        return "\n".join(lines) + "\n"
    return textwrap.indent(textwrap.dedent("\n".join(lines)), "    ") + "\n"


@dataclass
class Verdict:
    """The outcome of running a submission against its tests."""

    passed: bool
    result: ExecResult

    @property
    def reason(self) -> str:
        if self.passed:
            return "all tests passed"
        if self.result.timed_out:
            return "the tests timed out"
        return last_line(self.result.stderr) or "tests failed"


def check_solution(answer: str, task: Task, sandbox: Sandbox, timeout_s: float = 10.0) -> Verdict:
    """Run the hidden tests against ``answer`` in a fresh sandboxed work folder."""
    program = build_program(answer, task)
    with tempfile.TemporaryDirectory(prefix="aworld-score-") as work:
        result = sandbox.run(program, work, timeout_s=timeout_s)
    return Verdict(passed=result.exit_code == 0 and not result.timed_out, result=result)
