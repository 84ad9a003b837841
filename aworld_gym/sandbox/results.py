"""What an execution is given (:class:`Limits`) and what it did (:class:`ExecResult`), for both paths."""

from __future__ import annotations

import contextlib
import signal
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Limits:
    """Resource limits of one execution.

    Attributes:
        wall_seconds: wall-clock timeout; the whole process tree is killed after it.
        cpu_seconds: CPU time per process (RLIMIT_CPU).
        memory_bytes: address space per process (RLIMIT_AS) and total memory of the execution (cgroup).
        max_processes: processes and threads at once (cgroup pids.max).
        max_open_files: open file descriptors per process (RLIMIT_NOFILE).
        max_file_bytes: size of any file written, stdout and stderr included (RLIMIT_FSIZE).
        max_output_chars: stdout/stderr shown back, each; the rest is cut with a note.
        tmp_bytes: size of the private /tmp.
    """

    wall_seconds: float = 10.0
    cpu_seconds: int = 10
    memory_bytes: int = 1 << 30
    max_processes: int = 64
    max_open_files: int = 256
    max_file_bytes: int = 16 << 20
    max_output_chars: int = 8_000
    tmp_bytes: int = 64 << 20


@dataclass
class ExecResult:
    """What one execution did."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool = False
    signal: str | None = None
    duration_s: float = 0.0
    truncated: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def render(self) -> str:
        """The text a model sees."""
        if self.timed_out:
            status = "killed: wall-clock timeout"
        elif self.signal:
            status = f"killed by {self.signal}"
        else:
            status = f"exit code {self.exit_code}"
        parts = [status]
        if self.stdout:
            parts.append(f"--- stdout ---\n{self.stdout}")
        if self.stderr:
            parts.append(f"--- stderr ---\n{self.stderr}")
        if not self.stdout and not self.stderr:
            parts.append("(no output)")
        parts.extend(self.notes)
        return "\n".join(parts)


def read_capped(path: Path, max_chars: int) -> tuple[str, bool]:
    """The text of an execution's output file cut to ``max_chars``, and whether it was cut."""
    try:
        with open(path, "rb") as f:
            data = f.read(max_chars * 4 + 4)
            more = bool(f.read(1))
    except OSError:
        return "", False
    text = data.decode("utf-8", errors="replace")
    if len(text) > max_chars:
        return text[:max_chars], True
    return text, more


def outcome(code: int | None, timed_out: bool, duration: float, exec_dir: Path, limits: Limits, bwrap: bool,
            notes: list[str] | None = None) -> ExecResult:  # fmt: skip
    """The result of an execution from its exit status and the ``stdout``/``stderr`` files in ``exec_dir``.

    ``code`` is a return code as :mod:`subprocess` gives it (negative: killed by that signal); under bubblewrap a
    child killed by a signal exits with 128 + the signal number.
    """
    stdout, cut_out = read_capped(exec_dir / "stdout", limits.max_output_chars)
    stderr, cut_err = read_capped(exec_dir / "stderr", limits.max_output_chars)
    sig = None
    if code is not None and code < 0:
        sig = signal.Signals(-code).name
    elif bwrap and code is not None and code > 128 and not timed_out:
        with contextlib.suppress(ValueError):
            sig = signal.Signals(code - 128).name
    notes = list(notes or [])
    if cut_out or cut_err:
        notes.append(f"[output truncated: each stream is limited to {limits.max_output_chars} characters]")
    if sig == "SIGXCPU":
        notes.append(f"[CPU time limit of {limits.cpu_seconds} s exceeded]")
    if sig == "SIGXFSZ":
        notes.append(f"[file size limit of {limits.max_file_bytes} bytes exceeded (stdout/stderr included)]")
    if timed_out:
        notes.append(f"[wall-clock limit of {limits.wall_seconds:g} s exceeded; all processes were killed]")
    return ExecResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=None if timed_out else code,
        timed_out=timed_out,
        signal=None if timed_out else sig,
        duration_s=duration,
        truncated=cut_out or cut_err,
        notes=notes,
    )
