"""The warm path: executions forked from a zygote behave like cold ones, leak nothing to each other, cannot reach the
zygote or a sibling, and survive the zygote being killed or a burst beyond the pool.

The escape suite (test_escapes.py) runs against both paths; these are the warm-specific checks.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import warnings
from pathlib import Path

import psutil
import pytest

from aworld_gym.sandbox import warm as warm_module
from aworld_gym.sandbox.host import bwrap_problem, python_roots
from aworld_gym.sandbox.runner import Limits, Sandbox, SandboxWarning

LIMITS = Limits(wall_seconds=15.0, cpu_seconds=10, memory_bytes=1 << 30, max_processes=16)

pytestmark = pytest.mark.skipif(
    bwrap_problem() is not None or os.geteuid() != 0, reason="the warm path needs bubblewrap and root"
)


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox(LIMITS, isolation="bwrap", warm=True)
    yield sb
    sb.close()


@pytest.fixture(scope="module")
def cold():
    sb = Sandbox(LIMITS, isolation="bwrap", warm=False)
    yield sb
    sb.close()


def _work(tmp_path: Path, name: str = "work") -> Path:
    work = tmp_path / name
    work.mkdir()
    return work


def test_the_warm_path_is_on_and_preloads_numpy(sandbox, tmp_path):
    res = sandbox.run("import sys; print('numpy' in sys.modules, sys.argv, __name__, __file__)", _work(tmp_path))
    assert res.ok, res.render()
    assert sandbox.warm and sandbox.report["warm"] is True
    assert res.stdout.split() == ["True", "['/sandbox/main.py']", "__main__", "/sandbox/main.py"]
    assert "numpy" in sandbox._warm.zygote.preloaded


PROGRAMS = {
    "print": "print('hello'); print(2 + 2)",
    "exit code": "import sys; print('before'); sys.exit(3)",
    "exit message": "import sys; sys.exit('bye')",
    "exception": "def f():\n    raise ValueError('boom')\nf()",
    "syntax error": "def f(:\n    pass",
    "atexit": "import atexit; atexit.register(lambda: print('at exit')); print('main')",
    "thread after main": "import threading, time\n"
    "def late():\n    time.sleep(0.2); print('late thread')\n"
    "threading.Thread(target=late).start(); print('main done')",
    "input": "input()",
    "killed by a signal": "import os, signal; os.kill(os.getpid(), signal.SIGTERM)",
    "stderr": "import sys; print('to stderr', file=sys.stderr)",
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_warm_results_match_cold_ones(sandbox, cold, tmp_path, name):
    code = PROGRAMS[name]
    w, c = sandbox.run(code, _work(tmp_path, "w")), cold.run(code, _work(tmp_path, "c"))
    if name == "killed by a signal":  # the cold path's shell (PID 1 there) adds its own "Terminated" line
        c.stderr = c.stderr.replace("Terminated\n", "")
    assert (w.stdout, w.stderr, w.exit_code, w.signal, w.timed_out) == (
        c.stdout,
        c.stderr,
        c.exit_code,
        c.signal,
        c.timed_out,
    ), f"warm:\n{w.render()}\ncold:\n{c.render()}"


def test_no_state_leaks_between_executions(sandbox, tmp_path):
    first, second = _work(tmp_path, "first"), _work(tmp_path, "second")
    pollute = """
import builtins, json, os, signal, subprocess, sys, threading, time
json.dumps = None
sys.modules["os"].LEAKED = 1
builtins.LEAKED = 1
sys.path.insert(0, "/leaked")
os.environ["LEAKED"] = "1"
signal.signal(signal.SIGTERM, lambda *a: None)
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
keep = open("kept.txt", "w")
os.set_inheritable(keep.fileno(), True)
open("/tmp/leaked", "w").write("x")
if os.path.isdir("/dev/shm"):
    open("/dev/shm/leaked", "w").write("x")
open("mine.txt", "w").write("first")
subprocess.Popen(["sleep", "60"], start_new_session=True)
import numpy
print(numpy.random.rand())
"""
    res = sandbox.run(pollute, first)
    assert res.ok, res.render()
    rand_first = float(res.stdout.split()[-1])
    check = f"""
import builtins, json, os, signal, sys, threading
print("json", json.dumps([1]))
print("os", hasattr(os, "LEAKED"), "builtins", hasattr(builtins, "LEAKED"))
print("path", "/leaked" in sys.path, "env", "LEAKED" in os.environ)
print("sigterm", signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL)
print("threads", threading.active_count())
print("fds", sorted(int(f) for f in os.listdir("/proc/self/fd")))
print("tmp", os.listdir("/tmp"), "shm", os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else [])
print("work", os.listdir("."), "other", os.path.exists({str(first)!r}))
print("procs", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
import numpy
print(numpy.random.rand())
"""
    res = sandbox.run(check, second)
    assert res.ok, res.render()
    lines = res.stdout.splitlines()
    assert lines[0] == "json [1]"
    assert lines[1] == "os False builtins False"
    assert lines[2] == "path False env False"
    assert lines[3] == "sigterm True True"
    assert lines[4] == "threads 1"
    assert lines[5] == "fds [0, 1, 2, 3]", lines[5]  # stdin, stdout, stderr and listdir's own
    under_tmp = sorted({Path(r).parts[2] for r in python_roots(sys.executable) if r.startswith("/tmp/")})
    assert lines[6] == f"tmp {under_tmp} shm []"  # only the (read-only) Python installation, when it lives there
    assert lines[7] == "work [] other False"
    assert lines[8] == "procs [1, 2]"  # its init and itself: nothing of the first execution is left
    assert float(lines[9]) != rand_first  # each execution draws fresh random state
    assert (first / "mine.txt").read_text() == "first" and not (second / "mine.txt").exists()


def test_cannot_signal_trace_or_read_the_zygote_or_a_sibling(sandbox, tmp_path):
    zygote = sandbox._warm.zygote.proc
    sibling_result: list = []
    sibling = threading.Thread(
        target=lambda: sibling_result.append(
            sandbox.run("import time; time.sleep(2); print('sibling alive')", _work(tmp_path, "sibling"))
        )
    )
    sibling.start()
    time.sleep(0.5)
    attack = """
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print("visible", pids)
for pid in range(1, 4096):
    if pid in (1, os.getpid()):
        continue
    try:
        os.kill(pid, signal.SIGKILL)
        print("KILLED", pid)
    except ProcessLookupError:
        pass
    except PermissionError:
        print("EPERM", pid)
for pid in range(3, 4096):  # the zygote, the keepers and the sibling all have pids, just not here
    if libc.ptrace(16, pid, 0, 0) == 0:
        print("ATTACHED", pid)
    elif ctypes.get_errno() != 3:  # ESRCH
        print("ptrace errno", pid, ctypes.get_errno())
    if os.path.exists(f"/proc/{pid}/mem"):
        print("READ MEM", pid)
try:
    os.kill(-1, signal.SIGKILL)
except ProcessLookupError:
    print("kill -1: nothing to kill")
print("done")
"""
    res = sandbox.run(attack, _work(tmp_path, "attacker"))
    sibling.join(30)
    assert "visible [1, 2]" in res.stdout, res.render()
    assert "KILLED" not in res.stdout and "READ MEM" not in res.stdout
    assert "ATTACHED" not in res.stdout and "ptrace errno" not in res.stdout
    assert "done" in res.stdout
    assert sibling_result and sibling_result[0].ok and "sibling alive" in sibling_result[0].stdout
    assert zygote.poll() is None and sandbox._warm.zygote.proc is zygote  # the zygote was never hit
    assert sandbox.run("print('next')", _work(tmp_path, "next")).stdout == "next\n"


def test_a_killed_zygote_loses_only_its_running_execution_and_restarts(tmp_path):
    sb = Sandbox(LIMITS, isolation="bwrap", warm=True)
    try:
        assert sb.run("print(1)", _work(tmp_path, "a")).ok
        zygote = sb._warm.zygote
        prefixes = [zygote.prefix]
        running: list = []
        t = threading.Thread(target=lambda: running.append(sb.run("import time; time.sleep(30)", _work(tmp_path, "b"))))
        t.start()
        time.sleep(1.0)
        inside = [
            p
            for p in psutil.Process(zygote.proc.pid).children(recursive=True)
            if p.name() != "bwrap" and p.parent().name() == "bwrap"
        ]  # fmt: skip (its spares are its children)
        assert len(inside) == 1
        inside[0].kill()  # the zygote itself: everything in its namespace dies with it
        t.join(20)
        assert not t.is_alive(), "an execution waited on a dead zygote"
        lost = running[0]
        assert lost.exit_code is None and not lost.ok and "lost" in lost.render()
        res = sb.run("print('after restart')", _work(tmp_path, "c"))
        assert res.stdout == "after restart\n", res.render()
        assert zygote.starts == 2
        prefixes.append(zygote.prefix)
    finally:
        sb.close()
    cgroups = Path("/sys/fs/cgroup/pids/aworld-gym-sandbox")
    if cgroups.is_dir():  # neither the dead zygote's cgroups nor the new one's are left behind
        assert not [d for prefix in prefixes for d in cgroups.glob(f"{prefix}*")]


def test_a_zygote_that_stops_answering_is_killed_and_replaced(tmp_path, monkeypatch):
    """A wedged zygote (here SIGSTOPped: alive, never answering) fails the execution waiting on it once its grace is
    spent, and is killed with its namespace: the next execution runs on a new one, not on the wedged one forever."""
    monkeypatch.setattr(warm_module, "ANSWER_GRACE_S", 2.0)
    limits = Limits(wall_seconds=1.0, cpu_seconds=1, memory_bytes=1 << 30, max_processes=16)
    sb = Sandbox(limits, isolation="bwrap", warm=True)
    try:
        assert sb.run("print(1)", _work(tmp_path, "a")).ok
        zygote = sb._warm.zygote
        first = zygote.proc
        inside = [p for p in psutil.Process(first.pid).children(recursive=True)
                  if p.name() != "bwrap" and p.parent().name() == "bwrap"]  # fmt: skip
        assert len(inside) == 1
        inside[0].suspend()
        lost = sb.run("print(2)", _work(tmp_path, "b"))
        assert lost.exit_code is None and not lost.ok and "did not answer within 3 s" in lost.render(), lost.render()
        _, alive = psutil.wait_procs(inside, timeout=10)  # killed; its namespace takes a moment to go
        assert all(p.status() == psutil.STATUS_ZOMBIE for p in alive), "the wedged zygote lives on"
        res = sb.run("print('on a new one')", _work(tmp_path, "c"))
        assert res.stdout == "on a new one\n", res.render()
        assert zygote.starts == 2 and zygote.proc is not first
    finally:
        sb.close()


def test_a_burst_beyond_the_pool_waits_or_fails_clearly(tmp_path):
    sb = Sandbox(LIMITS, isolation="bwrap", warm=True, max_concurrent=2, queue_timeout_s=0.5)
    try:
        results: list = []
        lock = threading.Lock()

        def one(i: int) -> None:
            res = sb.run("import time; time.sleep(2); print('ran')", _work(tmp_path, f"w{i}"))
            with lock:
                results.append(res)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)  # every caller had its answer: none waited on the pool
        ran = [r for r in results if r.ok]
        busy = [r for r in results if "sandbox busy" in r.render()]
        assert len(results) == 5 and len(ran) == 2 and len(busy) == 3, [r.render() for r in results]
    finally:
        sb.close()


def test_a_fork_bomb_kills_only_its_own_execution(sandbox, tmp_path):
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    neighbour: list = []
    t = threading.Thread(
        target=lambda: neighbour.append(
            sandbox.run("import time; time.sleep(1.5); print('fine')", _work(tmp_path, "n"))
        )
    )
    t.start()
    res = sandbox.run(bomb, _work(tmp_path, "bomb"), timeout_s=3)
    t.join(30)
    assert res.timed_out
    assert neighbour and neighbour[0].stdout == "fine\n", neighbour
    assert sandbox.run("print('after')", _work(tmp_path, "after")).stdout == "after\n"
    zygote_tree = psutil.Process(sandbox._warm.zygote.proc.pid).children(recursive=True)
    assert len(zygote_tree) < 16, f"{len(zygote_tree)} processes left under the zygote"


def test_auto_falls_back_to_cold_with_a_warning_when_the_zygote_cannot_start(tmp_path, monkeypatch):
    monkeypatch.setattr(warm_module, "ZYGOTE", tmp_path / "missing-zygote.py")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb = Sandbox(LIMITS, isolation="bwrap")
        try:
            res = sb.run("print('cold')", _work(tmp_path))
        finally:
            sb.close()
    assert res.stdout == "cold\n"
    assert not sb.warm and sb.report["warm"] is False
    assert any(issubclass(w.category, SandboxWarning) and "warm" in str(w.message) for w in caught)


def test_warm_true_where_it_cannot_start_is_an_error(tmp_path, monkeypatch):
    from aworld_gym.base.errors import SandboxError

    monkeypatch.setattr(warm_module, "ZYGOTE", tmp_path / "missing-zygote.py")
    sb = Sandbox(LIMITS, isolation="bwrap", warm=True)
    try:
        with pytest.raises(SandboxError, match="warm sandbox did not start"):
            sb.run("print(1)", _work(tmp_path))
    finally:
        sb.close()
