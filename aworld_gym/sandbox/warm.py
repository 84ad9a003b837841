"""The warm path of the sandbox: executions forked from a fork server (zygote) that has Python and the preloaded
modules ready, instead of a fresh bubblewrap + Python per execution.

The zygote (:mod:`aworld_gym.sandbox.zygote`) runs inside a bubblewrap sandbox of its own; each execution gets
fresh mount, PID, network and IPC namespaces, its own work folder as its only writable place (plus a fresh private
/tmp), its own cgroup, the rlimits, the `nobody` user without capabilities, and the wall-clock kill of its whole
namespace. This module starts the zygote, sends it requests from any number of threads, and restarts it when it
dies (the executions it was running are reported as lost, never left waiting).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import subprocess
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from aworld_gym.base.errors import SandboxError
from aworld_gym.mcp.transports.proctree import descendants, kill
from aworld_gym.sandbox.cgroups import CgroupLimiter
from aworld_gym.sandbox.host import base_mounts, clean_env, python_roots, rlimit_values
from aworld_gym.sandbox.results import ExecResult, Limits, outcome

logger = logging.getLogger(__name__)

ZYGOTE = Path(__file__).with_name("zygote")  # a folder: aworld_zygote.py and what it imports
ZYGOTE_DIR_IN_SANDBOX = "/sandbox/zygote"
ZYGOTE_IN_SANDBOX = f"{ZYGOTE_DIR_IN_SANDBOX}/aworld_zygote.py"
HOST = "/host"
DEFAULT_PRELOAD = ("numpy",)  # numpy.random (7 MB more in every fork) costs ~25% of the throughput
START_TIMEOUT_S = 60.0
# How long past an execution's wall-clock limit the zygote may take to answer before it counts as wedged (killed, and
# a new one started for the next execution).
ANSWER_GRACE_S = 30.0


_instances: weakref.WeakSet[Zygote] = weakref.WeakSet()


def live_zygotes() -> list[Zygote]:
    """The zygotes of this process that are running now."""
    return [z for z in list(_instances) if z.proc is not None and z.proc.poll() is None]


class ZygoteDied(SandboxError):
    """The zygote went away while an execution was waiting for it."""


class Zygote:
    """One fork server process and the requests in flight on it.

    Args:
        argv: the bubblewrap command line that starts it (up to ``--``); the zygote program is appended.
        python: the interpreter inside.
        preload: modules imported once, before any execution (missing ones are skipped).
    """

    def __init__(self, argv: list[str], python: str, preload: tuple[str, ...], cgroups: CgroupLimiter,
                 spares: int = 4) -> None:  # fmt: skip
        self.base_argv = [*argv, python, "-I", "-X", "utf8", ZYGOTE_IN_SANDBOX]
        self.preload, self.cgroups, self.spares = preload, cgroups, spares
        self.prefix = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self.preloaded: list[str] = []
        self.spare_cgroups: frozenset[str] = frozenset()  # the cgroups made ahead of requests, as last reported
        self.starts = 0
        self._lock = threading.Lock()  # start/stop and writes to the zygote's stdin
        self._pending: dict[int, dict[str, Any]] = {}
        self._events: dict[int, threading.Event] = {}
        self._sent_to: dict[int, subprocess.Popen[bytes]] = {}  # request id -> the zygote it went to
        self._heard: dict[subprocess.Popen[bytes], float] = {}  # zygote -> when it last sent a line (monotonic)
        self._ids = 0
        _instances.add(self)

    # ----- lifecycle ------------------------------------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        self.prefix = f"exec-{os.getpid()}-z{os.urandom(4).hex()}-"  # this start's cgroups, swept when it ends
        cgroup = None
        if self.cgroups.available:
            cgroup = {"version": self.cgroups.version, "bases": [str(b) for b in self.cgroups.bases],
                      "prefix": self.prefix}  # fmt: skip
        return {"preload": list(self.preload), "cgroup": cgroup, "spares": self.spares}

    def _start(self) -> subprocess.Popen[bytes]:
        if self.starts == 0:
            self.cgroups.sweep_orphans()  # what processes that died without closing their sandboxes left
        started: queue.Queue[Any] = queue.Queue()
        owner = threading.Thread(target=self._own, args=(self._config(), started), name="aworld-zygote", daemon=True)
        owner.start()
        try:
            result = started.get(timeout=START_TIMEOUT_S + 10)
        except queue.Empty:
            raise SandboxError("the warm sandbox did not start in time") from None
        if isinstance(result, BaseException):
            raise result
        return result

    def _own(self, config: dict[str, Any], started: queue.Queue[Any]) -> None:
        """Start the zygote and read its replies for its whole life (one thread per zygote, whatever thread first
        needed it: a short-lived worker thread must not own it)."""
        with tempfile.TemporaryFile() as errors:  # never a pipe nobody reads: a full pipe would stall the zygote
            proc = self._spawn(config, started, errors)
            if proc is not None:
                self._read(proc)

    def _spawn(self, config: dict[str, Any], started: queue.Queue[Any], errors: Any) -> Any:
        try:
            proc = subprocess.Popen(self.base_argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
                                    env={}, close_fds=True, start_new_session=True)  # fmt: skip
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write((json.dumps(config) + "\n").encode())  # the first line: settings, not in argv
            proc.stdin.flush()
            timer = threading.Timer(START_TIMEOUT_S, proc.kill)
            timer.start()
            line = proc.stdout.readline()
            timer.cancel()
            try:
                hello = json.loads(line)
            except ValueError:
                hello = {}
            if not hello.get("ready"):
                proc.kill()
                proc.wait()
                errors.seek(0)
                why = errors.read().decode(errors="replace").strip() or line.decode(errors="replace") or "no reply"
                started.put(SandboxError(f"the warm sandbox did not start: {why[-2000:]}"))
                return None
        except OSError as exc:
            started.put(SandboxError(f"the warm sandbox did not start: {exc}"))
            return None
        self.preloaded = hello.get("preloaded", [])
        self.spare_cgroups = frozenset(hello.get("spare_cgroups", []))
        self.starts += 1
        started.put(proc)
        return proc

    def ensure(self) -> subprocess.Popen[bytes]:
        """The running zygote (started, or restarted after it died)."""
        with self._lock:
            if self.proc is None or self.proc.poll() is not None:
                if self.proc is not None:
                    self.proc.wait()
                    self._sweep()
                self.proc = self._start()
            return self.proc

    def close(self) -> None:
        with self._lock:
            proc, self.proc = self.proc, None
            self.spare_cgroups = frozenset()
        if proc is not None:
            _stop(proc)
            self._sweep()

    def _sweep(self) -> None:
        """Remove the cgroups the last zygote's executions and spares left. Its namespace dies a moment after the
        bubblewrap process the host waited for, so sweep until two sweeps in a row find nothing (at most ~3 s)."""
        if not self.prefix or not self.cgroups.available:
            return
        quiet = 0
        for _ in range(60):
            quiet = quiet + 1 if self.cgroups.sweep(self.prefix) == 0 else 0
            if quiet == 2:
                return
            time.sleep(0.05)

    # ----- requests ---------------------------------------------------------------------------------------------
    def run(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one execution request and wait for its reply (``ZygoteDied`` if the zygote goes away first)."""
        proc = self.ensure()
        event = threading.Event()
        with self._lock:
            self._ids += 1
            rid = self._ids
            self._events[rid] = event
            self._sent_to[rid] = proc
            line = (json.dumps({**request, "id": rid}) + "\n").encode()
            try:
                assert proc.stdin is not None
                proc.stdin.write(line)
                proc.stdin.flush()
            except (OSError, ValueError) as exc:
                self._events.pop(rid, None)
                self._sent_to.pop(rid, None)
                raise ZygoteDied(f"the warm sandbox is gone ({exc})") from exc
        try:
            if not event.wait(timeout_s):
                kept = not self._kill_if_wedged(proc, timeout_s)
                then = "it answers others: kept" if kept else "stopped: the next execution starts a new one"
                raise ZygoteDied(f"the warm sandbox did not answer within {timeout_s:g} s ({then})")
            reply = self._pending.pop(rid)
        finally:
            with self._lock:
                self._events.pop(rid, None)
                self._pending.pop(rid, None)
                self._sent_to.pop(rid, None)
        if reply.get("died"):
            raise ZygoteDied("the warm sandbox died during this execution (the next execution starts a new one)")
        return reply

    def _kill_if_wedged(self, proc: subprocess.Popen[bytes], quiet_s: float) -> bool:
        """SIGKILL the zygote ``proc`` if it is still the current one and sent nothing for ``quiet_s`` (wedged: it would
        fail every execution to come; one execution whose reply is missing while others are answered is not worth
        the others). It goes with its namespace: the zygote is bubblewrap's child in a session of its own, PID 1 of
        its namespace (killing it kills every execution in it). Its reader then sees the end of its output and fails
        what was in flight on it, and ``ensure`` starts a new one once it is gone (waited for here)."""
        with self._lock:
            quiet = time.monotonic() - self._heard.get(proc, 0.0) >= quiet_s
            if self.proc is not proc or proc.poll() is not None or not quiet:
                return False
            kill(descendants(proc.pid) or {})
            with contextlib.suppress(OSError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            return True

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self._heard[proc] = time.monotonic()
            try:
                reply = json.loads(line)
            except ValueError:
                continue
            self._deliver(int(reply.get("id", -1)), reply)
        proc.wait()
        with self._lock:  # the zygote is gone: every execution still waiting on it is lost (not a newer one's)
            lost = [rid for rid, to in self._sent_to.items() if to is proc and rid not in self._pending]
            self._heard.pop(proc, None)
        if lost:
            logger.warning("sandbox: the warm sandbox exited (%s); %d execution(s) lost", proc.returncode, len(lost))
        for rid in lost:
            self._deliver(rid, {"id": rid, "died": True})

    def _deliver(self, rid: int, reply: dict[str, Any]) -> None:
        with self._lock:
            if "spare_cgroups" in reply:
                self.spare_cgroups = frozenset(reply["spare_cgroups"])
            event = self._events.get(rid)
            if event is None:
                return
            self._pending[rid] = reply
        event.set()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        if proc.stdin:
            proc.stdin.close()  # the zygote exits when its input ends
        proc.wait(timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            proc.kill()
        proc.wait()


def zygote_argv(python: str, env: dict[str, str]) -> list[str]:
    """bubblewrap for the zygote: what a cold execution sees, plus the host's files at /host (for the keeper to
    bind an execution's folders from, then detach) and every capability (the zygote is root; the code never is)."""
    # No --die-with-parent: when the host goes, the zygote's input ends and it removes its executions' cgroups
    # before it exits (a SIGKILL from bubblewrap would leave them behind). --as-pid-1: when the zygote dies, the
    # kernel kills everything it started (bubblewrap's own init would wait for running executions to end).
    argv = ["bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox",
            "--new-session", "--as-pid-1", "--cap-add", "ALL"]  # fmt: skip
    made: set[str] = set()
    argv += base_mounts(python, 1 << 20, made)
    argv += [
        "--perms",
        "0755",
        "--dir",
        "/sandbox",
        "--ro-bind",
        str(ZYGOTE),
        ZYGOTE_DIR_IN_SANDBOX,
        "--bind",
        "/",
        HOST,
    ]
    return [*argv, *clean_env(env), "--chdir", "/", "--"]


class WarmPath:
    """Executions forked from one zygote: a :class:`Sandbox`'s warm path.

    Args:
        python: the interpreter (its installation is bound read-only, as on the cold path).
        env: the executions' environment (the zygote's; each execution inherits it unchanged).
        preload: modules imported once in the zygote (those not installed are skipped).
        max_concurrent: executions at once; more wait up to ``queue_timeout_s``, then fail clearly.
    """

    def __init__(self, python: str, env: dict[str, str], preload: tuple[str, ...], cgroups: CgroupLimiter,
                 max_concurrent: int = 64, spares: int = 4, queue_timeout_s: float = 120.0) -> None:  # fmt: skip
        self.python = python
        self.zygote = Zygote(zygote_argv(python, env), python, preload, cgroups, spares)
        self.tmp_roots = [r for r in python_roots(python) if r == "/tmp" or r.startswith("/tmp/")]
        self.slots = threading.BoundedSemaphore(max_concurrent)
        self.max_concurrent, self.queue_timeout_s = max_concurrent, queue_timeout_s

    def start(self) -> None:
        """Start the zygote now (``SandboxError`` when it cannot be set up here)."""
        self.zygote.ensure()

    def run(self, main: Path, exec_dir: Path, workdir: Path, files: list[Path], limits: Limits) -> ExecResult:
        for name in ("stdout", "stderr"):
            (exec_dir / name).touch()
        request = {
            "main": str(main), "work": str(workdir.resolve()), "files": [[str(f), f.name] for f in files],
            "stdout": str(exec_dir / "stdout"), "stderr": str(exec_dir / "stderr"), "wall": limits.wall_seconds,
            "max_pids": limits.max_processes, "memory": limits.memory_bytes, "tmp_bytes": limits.tmp_bytes,
            "tmp_roots": self.tmp_roots, "rlimits": {k: list(v) for k, v in rlimit_values(limits).items()},
        }  # fmt: skip
        if not self.slots.acquire(timeout=self.queue_timeout_s):
            return ExecResult("", "", None, notes=[
                f"[sandbox busy: {self.max_concurrent} executions were running for {self.queue_timeout_s:g} s; "
                "this one did not start]"])  # fmt: skip
        start = time.perf_counter()
        try:
            reply = self.zygote.run(request, limits.wall_seconds + ANSWER_GRACE_S)
        except ZygoteDied as exc:
            return ExecResult("", "", None, duration_s=time.perf_counter() - start, notes=[
                f"[the execution was lost: {exc}]"])  # fmt: skip
        finally:
            self.slots.release()
        if reply.get("error"):
            raise SandboxError(f"the warm sandbox could not run the execution: {reply['error']}")
        status = reply.get("status")
        code = None if status is None else os.waitstatus_to_exitcode(status)
        if code is not None and code < 0:
            code = 128 - code  # as the cold path reports a signal (its shell's exit status)
        return outcome(code, bool(reply.get("timed_out")), time.perf_counter() - start, exec_dir, limits, bwrap=True)

    def close(self) -> None:
        self.zygote.close()
