"""Reading one attachment in a child process, bounded in memory, CPU and wall-clock time.

Document parsers (python-docx, openpyxl, pypdf, Pillow, tesseract) are large libraries fed files we did not write:
a .docx that expands to gigabytes, or a PDF that parses for minutes. A thread cannot be stopped, so a read given up
on in a thread keeps burning a core. Here each read runs in a fresh child (its own session, so tesseract and
anything else it starts goes with it) that sets its own memory and CPU limits; at the deadline, or when the call is
cancelled, the parent kills the child's whole process group. Run as ``python -m aworld_gym.envs.gaia.read_worker``
it reads one JSON request on stdin and writes one JSON reply on stdout.
"""

from __future__ import annotations

import json
import math
import os
import resource
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import anyio

MAX_REPLY_BYTES = 64 << 20  # a reply is a cut text (max_chars characters) as JSON: far below this


@dataclass(frozen=True)
class ReadLimits:
    """Bounds of one read.

    Attributes:
        timeout_s: wall-clock seconds before the reader is killed (keep it below the hub's call timeout).
        memory_mb: the reader's address-space limit (RLIMIT_AS).
        max_expanded_bytes: the most a zip-based document (docx, xlsx, pptx) may declare uncompressed.
    """

    timeout_s: float = 30.0
    memory_mb: int = 2048
    max_expanded_bytes: int = 256 << 20


async def read_isolated(path: Path, shown: str, max_chars: int, ocr: bool, limits: ReadLimits) -> str:
    """Render ``path`` as text in a bounded child process; every failure is an ``Error: ...`` text."""
    request = {"path": str(path), "shown": shown, "max_chars": max_chars, "ocr": ocr,
               "max_expanded_bytes": limits.max_expanded_bytes, "memory_mb": limits.memory_mb,
               "cpu_s": math.ceil(limits.timeout_s) + 1}  # fmt: skip
    command = [sys.executable, "-m", __name__]
    process = await anyio.open_process(command, stderr=subprocess.DEVNULL, start_new_session=True)
    reply = b""
    try:
        with anyio.move_on_after(limits.timeout_s) as scope:
            assert process.stdin is not None and process.stdout is not None
            await process.stdin.send(json.dumps(request).encode())
            await process.stdin.aclose()
            async for chunk in process.stdout:
                reply += chunk
                if len(reply) > MAX_REPLY_BYTES:
                    break
            await process.wait()
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:  # the deadline, or the call was cancelled: stop all of its work
                _kill_group(process.pid)
            await process.wait()
            await process.aclose()
    if scope.cancelled_caught:
        return f"Error: reading {shown!r} took longer than {limits.timeout_s:g} s and was stopped."
    try:
        return str(json.loads(reply)["text"])
    except (ValueError, KeyError, TypeError):
        why = _why(process.returncode, limits)
        return f"Error: could not read {shown!r}: the reader stopped ({why})."


def _kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads (it is not reaped yet, so the group id is still its)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _why(code: int | None, limits: ReadLimits) -> str:
    if code in (-signal.SIGXCPU, -signal.SIGKILL):
        return f"it used more than its CPU time ({math.ceil(limits.timeout_s) + 1} s) or memory"
    if code is not None and code < 0:
        return f"killed by signal {-code}"
    return f"exit status {code}; it may have run out of its {limits.memory_mb} MB of memory"


def _limit(memory_mb: int, cpu_s: int) -> None:
    """This process's own bounds (set here, not in a preexec_fn: the parent has threads)."""
    for which, soft in ((resource.RLIMIT_AS, memory_mb << 20), (resource.RLIMIT_CPU, cpu_s), (resource.RLIMIT_CORE, 0)):
        hard = resource.getrlimit(which)[1]
        soft = soft if hard == resource.RLIM_INFINITY else min(soft, hard)
        resource.setrlimit(which, (soft, soft))  # (a CPU soft limit sends SIGXCPU, which ends the reader)


def main() -> None:
    """The child: one request on stdin, one reply on stdout (library output goes to stderr)."""
    reply = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # whatever a library prints cannot corrupt the reply
    request = json.loads(sys.stdin.buffer.read())
    _limit(int(request["memory_mb"]), int(request["cpu_s"]))
    from aworld_gym.envs.gaia.readers import read_path

    text = read_path(Path(request["path"]), request["shown"], int(request["max_chars"]), bool(request["ocr"]),
                     int(request["max_expanded_bytes"]))  # fmt: skip
    reply.write(json.dumps({"text": text}))
    reply.flush()


if __name__ == "__main__":
    main()
