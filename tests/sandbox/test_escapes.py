"""Escape attempts against the bubblewrap sandbox, each asserted on the host side too.

Every test runs hostile code through :class:`Sandbox` and checks two things: what the code saw from inside,
and what the host saw afterwards (files, processes, sockets, cgroups). The tests only ever bind listeners on
127.0.0.1 in this process; the one attempt at a public address is made from inside the sandbox's empty
network namespace, so no packet leaves the machine.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import threading
import time
import uuid
import warnings
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from aworld_gym.sandbox.host import bwrap_problem
from aworld_gym.sandbox.runner import FILES_DIR, WORK_DIR, Limits, Sandbox
from aworld_gym.sandbox.warm import live_zygotes

LIMITS = Limits(
    wall_seconds=15.0,
    cpu_seconds=10,
    memory_bytes=512 << 20,
    max_processes=16,
    max_file_bytes=1 << 20,
    max_output_chars=2_000,
)
CGROUP_ROOT = Path("/sys/fs/cgroup")


# ----- helpers -------------------------------------------------------------------------------------------
def _token() -> str:
    """A unique `sleep` duration (about 5 minutes) that names this test's processes on the host."""
    return f"300.{uuid.uuid4().int % 10**9:09d}"


def _live_procs_with(arg: str) -> list[psutil.Process]:
    """Host processes (zombies excluded) whose command line has ``arg`` as an argument."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        with_arg = arg in (p.info["cmdline"] or [])
        if with_arg and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(p)
    return found


def _my_cgroups(sandbox: Sandbox | None = None) -> list[Path]:
    """Per-execution cgroups this test process created that still exist (v1 or v2), less the warm path's spares.

    A spare is known by name: each zygote's replies list the cgroups it made ahead of requests to come (each holds
    its waiting init, or nothing while the init is still joining). Every other cgroup is an execution's, and the
    zygote removes it before it replies, so none may be left."""
    pattern = f"exec-{os.getpid()}-*"
    bases = [CGROUP_ROOT / h / "aworld-gym-sandbox" for h in ("pids", "memory")]
    bases.append(CGROUP_ROOT / "aworld-gym-sandbox")
    found = [d for base in bases if base.is_dir() for d in base.glob(pattern)]
    spares: set[str] = set()
    for zygote in live_zygotes():  # this sandbox's, or another's of this process (e.g. an env's shared one)
        named = zygote.spare_cgroups
        assert len(named) <= zygote.spares, f"{sorted(named)}: more waiting cgroups than {zygote.spares} spares"
        assert all(name.startswith(zygote.prefix) for name in named), (sorted(named), zygote.prefix)
        for d in found:
            if d.name in named:
                assert _procs(d) in (0, 1), f"spare cgroup {d} holds {_procs(d)} processes (only its init may wait)"
        spares |= named
    return [d for d in found if d.name not in spares]


def _procs(cgroup: Path) -> int:
    try:
        return len((cgroup / "cgroup.procs").read_text().split())
    except OSError:
        return -1


def _output(res) -> str:
    return res.stdout + res.stderr


def _workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


# ----- fixtures ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=["cold", "warm"])
def sandbox(request):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SandboxWarning where bwrap is missing: we skip below instead
        probe = Sandbox(isolation="auto")
    probe.close()
    if probe.isolation != "bwrap":
        pytest.skip(f"bubblewrap sandbox unavailable on this machine ({bwrap_problem()}); escape tests need it")
    if request.param == "warm" and os.geteuid() != 0:
        pytest.skip("the warm path needs root")
    sb = Sandbox(LIMITS, isolation="bwrap", warm=request.param == "warm")
    yield sb
    sb.close()
    assert not sb._scratch.exists()
    assert _my_cgroups(sb) == []


# ----- 1. reading files outside the work folder ----------------------------------------------------------
def test_cannot_read_files_outside_workdir(sandbox, tmp_path):
    secret = f"SECRET-{uuid.uuid4().hex}"
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text(secret)
    work = _workdir(tmp_path)
    (work / "mine.txt").write_text("control-content")
    home = Path.home()
    targets = [
        str(secret_file),
        str(tmp_path),
        "../secret.txt",
        "/proc/1/root" + str(secret_file),
        "/etc/shadow",
        "/etc/passwd",
        "/etc/hostname",
        str(home / ".bashrc"),
        str(home / ".ssh" / "id_rsa"),
        str(home / ".bash_history"),
        str(Path(__file__).resolve()),  # the project's source tree
    ]
    code = f"""
import os
for p in {targets!r} + ["mine.txt"]:
    try:
        if os.path.isdir(p):
            print("LISTED", p, os.listdir(p))
        else:
            with open(p, encoding="utf-8", errors="replace") as f:
                print("READ", p, f.read())
    except OSError as e:
        print("DENIED", p, type(e).__name__)
print("DONE")
"""
    res = sandbox.run(code, work)

    assert res.ok, res.render()
    assert "DONE" in res.stdout
    assert "READ mine.txt control-content" in res.stdout  # the probe does read what it may read
    assert secret not in _output(res)
    for p in targets:
        assert f"DENIED {p} " in res.stdout, f"{p} was readable:\n{res.stdout}"
    if Path("/etc/shadow").exists():
        assert "root:" not in _output(res)
    assert secret_file.read_text() == secret


# ----- 2. network: loopback listener, abstract unix socket, UDP, a public address ------------------------
def test_no_network_to_host_loopback_or_outside(sandbox, tmp_path):
    work = _workdir(tmp_path)
    accepted: list[bytes] = []
    stop = threading.Event()
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix_name = f"\0aworld-escape-test-{uuid.uuid4().hex}"

    def serve() -> None:
        while not stop.is_set():
            for srv in (tcp, unix):
                try:
                    conn, _ = srv.accept()
                except (TimeoutError, BlockingIOError):
                    continue
                with conn:
                    conn.settimeout(1)
                    try:
                        accepted.append(conn.recv(100) or b"<connected>")
                    except OSError:
                        accepted.append(b"<connected>")
            try:
                accepted.append(udp.recv(100))
            except (TimeoutError, BlockingIOError):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    try:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(8)
        udp.bind(("127.0.0.1", 0))
        unix.bind(unix_name)
        unix.listen(8)
        for s in (tcp, udp, unix):
            s.settimeout(0.05)
        tcp_port, udp_port = tcp.getsockname()[1], udp.getsockname()[1]
        thread.start()

        # control: the listener does record a connection made from the host
        with socket.create_connection(("127.0.0.1", tcp_port), timeout=2) as c:
            c.sendall(b"host-control")
        deadline = time.monotonic() + 5
        while b"host-control" not in accepted and time.monotonic() < deadline:
            time.sleep(0.02)
        assert accepted == [b"host-control"]

        code = f"""
import socket
def attempt(name, fn):
    try:
        fn()
        print(name, "CONNECTED")
    except OSError as e:
        print(name, "FAIL", type(e).__name__, e.errno)

def tcp_local():
    with socket.create_connection(("127.0.0.1", {tcp_port}), timeout=2) as s:
        s.sendall(b"from-sandbox")

def tcp_public():
    with socket.create_connection(("1.1.1.1", 80), timeout=2) as s:
        s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")

def unix_abstract():
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        s.connect({unix_name!r})
        s.sendall(b"from-sandbox")

def udp_local():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"from-sandbox", ("127.0.0.1", {udp_port}))

attempt("TCP-LOCAL", tcp_local)
attempt("TCP-PUBLIC", tcp_public)
attempt("UNIX-ABSTRACT", unix_abstract)
attempt("UDP-LOCAL", udp_local)  # connectionless: "CONNECTED" only means sendto() returned
print("IFACES", [name for _, name in socket.if_nameindex()])
"""
        res = sandbox.run(code, work)
        time.sleep(0.3)  # let the listener thread pick up anything that might have arrived
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(timeout=5)
        for s in (tcp, udp, unix):
            s.close()
    assert not thread.is_alive()

    assert res.ok, res.render()
    for name in ("TCP-LOCAL", "TCP-PUBLIC", "UNIX-ABSTRACT"):
        assert f"{name} FAIL" in res.stdout, res.stdout
    assert "UDP-LOCAL" in res.stdout
    assert "IFACES ['lo']" in res.stdout  # a new namespace: nothing but its own loopback
    assert accepted == [b"host-control"], f"the host listeners received {accepted!r}"
    assert res.duration_s < 20


# ----- 3. writing outside the work folder ----------------------------------------------------------------
def test_cannot_write_outside_workdir(sandbox, tmp_path):
    work = _workdir(tmp_path)
    existing = tmp_path / "existing.txt"
    existing.write_text("original")
    before = existing.stat()
    tag = uuid.uuid4().hex
    created = tmp_path / f"created-{tag}.txt"
    host_tmp = Path("/tmp") / f"aworld-escape-{tag}.txt"
    in_usr = Path("/usr") / f"aworld-escape-{tag}.txt"
    in_etc = Path("/etc") / f"aworld-escape-{tag}.txt"
    in_venv = Path(sys.prefix) / f"aworld-escape-{tag}.txt"
    outside = [str(existing), str(created), str(in_usr), str(in_venv), "/sandbox/main.py"]
    code = f"""
import os
def write(p, mode="w"):
    try:
        with open(p, mode) as f:
            f.write("PWNED")
        print("WROTE", p)
    except OSError as e:
        print("DENIED", p, type(e).__name__)
for p in {outside!r}:
    write(p)
# the sandbox's private /tmp and its tmpfs root (/etc here): allowed, but must not reach the host
write({str(host_tmp)!r})
write({str(in_etc)!r})
write("inside.txt")
write({WORK_DIR!r} + "/inside2.txt")
for p in {[str(existing), str(tmp_path)]!r}:
    try:
        os.chmod(p, 0o777)
        print("CHMODDED", p)
    except OSError as e:
        print("DENIED-CHMOD", p, type(e).__name__)
"""
    try:
        res = sandbox.run(code, work)

        assert res.ok, res.render()
        for p in outside:
            assert f"DENIED {p} " in res.stdout, res.stdout
        assert f"WROTE {host_tmp}" in res.stdout  # the sandbox's own /tmp works...
        assert not host_tmp.exists()  # ...and is not the host's
        assert not in_etc.exists()
        for p in (created, in_usr, in_etc, in_venv):
            assert not p.exists(), f"the sandbox created {p} on the host"
        assert existing.read_text() == "original"
        after = existing.stat()
        assert (after.st_mtime_ns, after.st_mode) == (before.st_mtime_ns, before.st_mode)
        assert stat.S_IMODE(tmp_path.stat().st_mode) != 0o777
        assert "CHMODDED" not in res.stdout
        # writing inside the work folder works and shows on the host
        assert (work / "inside.txt").read_text() == "PWNED"
        assert (work / "inside2.txt").read_text() == "PWNED"
    finally:
        for p in (host_tmp, in_usr, in_etc, in_venv):
            p.unlink(missing_ok=True)


# ----- 4. the parent's secrets in the environment --------------------------------------------------------
def test_parent_environment_secrets_are_not_visible(sandbox, tmp_path, monkeypatch):
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    openai = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("AWORLD_TEST_SECRET_KEY", secret)
    monkeypatch.setenv("OPENAI_API_KEY", openai)
    work = _workdir(tmp_path)
    code = """
import os
print("ENV", dict(os.environ))
for pid in ["self", "1"] + sorted(p for p in os.listdir("/proc") if p.isdigit()):
    for name in ("environ", "cmdline"):
        try:
            with open(f"/proc/{pid}/{name}", "rb") as f:
                print("PROC", pid, name, f.read().replace(b"\\0", b" ").decode(errors="replace"))
        except OSError as e:
            print("DENIED", pid, name, type(e).__name__)
"""
    res = sandbox.run(code, work)

    assert res.ok, res.render()
    assert "PROC self environ" in res.stdout and "PROC 1 environ" in res.stdout
    assert "HOME=/sandbox/work" in res.stdout  # /proc/<pid>/environ was read, not denied
    for value in (secret, openai):
        assert value not in _output(res)
    for name in ("AWORLD_TEST_SECRET_KEY", "OPENAI_API_KEY"):
        assert name not in _output(res)


# ----- 5. fork storm -------------------------------------------------------------------------------------
def test_fork_storm_is_capped_and_cleaned_up(sandbox, tmp_path):
    work = _workdir(tmp_path)
    token = _token()
    code = f"""
import os, time
forks, error = 0, None
for _ in range(2000):
    try:
        pid = os.fork()
    except OSError as e:
        error = e
        break
    if pid == 0:
        try:
            os.execv("/bin/sleep", ["sleep", {token!r}])
        finally:
            os._exit(0)
    forks += 1
time.sleep(0.5)
sleepers = 0
for p in os.listdir("/proc"):
    try:
        with open(f"/proc/{{p}}/cmdline", "rb") as f:
            sleepers += {token!r}.encode() in f.read()
    except OSError:
        pass
print("FORKS", forks, type(error).__name__, "SLEEPERS", sleepers, flush=True)
"""
    res = sandbox.run(code, work)

    assert res.duration_s < 20  # it ended (timing out would be fine too)
    words = res.stdout.split()
    assert words[:1] == ["FORKS"], res.render()
    forks, error, sleepers = int(words[1]), words[2], int(words[4])
    assert 0 < forks <= LIMITS.max_processes, res.render()
    assert error in ("BlockingIOError", "OSError"), res.render()  # the pids cgroup stopped it, not the loop
    assert 0 < sleepers <= forks  # the children really existed inside...
    assert _live_procs_with(token) == []  # ...and none is left on the host
    assert _my_cgroups(sandbox) == []


# ----- 6. a 6 GiB allocation -----------------------------------------------------------------------------
def test_huge_allocation_fails(sandbox, tmp_path):
    work = _workdir(tmp_path)
    rss_before = psutil.Process().memory_info().rss
    res = sandbox.run("x = bytearray(6 * 1024**3)\nprint('ALLOCATED', len(x))\n", work)

    assert not res.ok
    assert "ALLOCATED" not in res.stdout
    assert "MemoryError" in res.stderr or res.signal == "SIGKILL", res.render()
    assert psutil.Process().memory_info().rss - rss_before < 256 << 20
    assert _my_cgroups(sandbox) == []


# ----- 7. infinite loops: the wall clock and the CPU-time limit ------------------------------------------
def test_infinite_loop_hits_wall_clock_timeout(sandbox, tmp_path):
    work = _workdir(tmp_path)
    code = "import time, sys\nprint('STARTED', flush=True)\nwhile True:\n    pass\n"
    res = sandbox.run(code, work, timeout_s=2)

    assert res.timed_out
    assert res.exit_code is None and not res.ok
    assert "STARTED" in res.stdout  # output written before the kill is kept
    text = res.render()
    assert "timeout" in text and "wall-clock limit of 2 s exceeded" in text
    assert 1.5 <= res.duration_s < 20
    assert _my_cgroups(sandbox) == []


def test_cpu_bound_loop_is_killed_by_sigxcpu(sandbox, tmp_path):
    work = _workdir(tmp_path)
    sb = Sandbox(replace(LIMITS, cpu_seconds=1, wall_seconds=30.0), isolation="bwrap", warm=sandbox.warm)
    try:
        res = sb.run("while True:\n    pass\n", work)
    finally:
        sb.close()

    assert not res.timed_out, res.render()
    assert res.signal == "SIGXCPU" or "[CPU time limit of 1 s exceeded]" in res.notes, res.render()
    assert "CPU time limit" in res.render()
    assert res.duration_s < 20
    assert _my_cgroups(sandbox) == []


# ----- 8. background processes that try to outlive the call ----------------------------------------------
def test_background_processes_do_not_outlive_the_call(sandbox, tmp_path):
    work = _workdir(tmp_path)
    token = _token()
    code = f"""
import os, signal, subprocess, time
p = subprocess.Popen(["sleep", {token!r}], start_new_session=True)
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:  # the daemon: no parent, own session, ignores polite signals
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        n = 0
        while True:
            n += 1
            with open("marker.txt", "w") as f:
                f.write(str(n))
            time.sleep(0.1)
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(0.5)
print("SPAWNED", p.pid, flush=True)
"""
    res = sandbox.run(code, work)

    assert res.ok, res.render()
    assert "SPAWNED" in res.stdout
    marker = work / "marker.txt"
    assert marker.exists(), "the daemon never ran, so this test proves nothing"
    first = (marker.read_bytes(), marker.stat().st_mtime_ns)
    time.sleep(1.0)
    second = (marker.read_bytes(), marker.stat().st_mtime_ns)
    assert first == second, "a daemon of the call is still writing its marker"
    assert _live_procs_with(token) == []
    assert _my_cgroups(sandbox) == []


# ----- 9. killing the parent, init, the test process, an innocent host process ---------------------------
def test_cannot_kill_host_processes(sandbox, tmp_path):
    work = _workdir(tmp_path)
    innocent = subprocess.Popen(["sleep", "60"])
    try:
        me, them = os.getpid(), innocent.pid
        code = f"""
import os, signal
targets = [("ppid", os.getppid()), ("init", 1), ("test", {me}), ("innocent", {them})]
for name, pid in targets:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
            print("SENT", name, pid, sig.name)
        except OSError as e:
            print("FAILED", name, pid, sig.name, type(e).__name__)
try:
    os.killpg({os.getpgid(0)}, signal.SIGKILL)  # the test process's group, by its host number
    print("SENT test-group")
except OSError as e:
    print("FAILED test-group", type(e).__name__)
print("STILL-HERE", flush=True)
os.kill(-1, signal.SIGKILL)  # everything this process may signal
print("AFTER-KILL-ALL", flush=True)
"""
        res = sandbox.run(code, work)

        assert "STILL-HERE" in res.stdout, res.render()
        assert f"FAILED test {me} SIGKILL ProcessLookupError" in res.stdout
        assert f"FAILED innocent {them} SIGKILL ProcessLookupError" in res.stdout
        assert psutil.pid_exists(me)
        assert innocent.poll() is None, "the sandbox killed an innocent host process"
        assert psutil.Process(them).status() != psutil.STATUS_ZOMBIE
        again = sandbox.run("print('still works')", work)
        assert again.ok and again.stdout == "still works\n", again.render()
    finally:
        innocent.kill()
        innocent.wait()
    assert _my_cgroups(sandbox) == []


# ----- 10. file size and output size ---------------------------------------------------------------------
def test_file_size_limit_and_output_truncation(sandbox, tmp_path):
    work = _workdir(tmp_path)
    limit = LIMITS.max_file_bytes
    code = f"""
try:
    with open("big.bin", "wb") as f:
        f.write(b"x" * {2 * limit})
        f.flush()
    print("WROTE-ALL")
except OSError as e:
    print("EFBIG", e.errno)
"""
    res = sandbox.run(code, work)

    assert "WROTE-ALL" not in res.stdout
    assert "EFBIG 27" in res.stdout or res.signal == "SIGXFSZ", res.render()
    assert (work / "big.bin").stat().st_size <= limit

    res = sandbox.run("print('y' * 100_000)", work)
    assert res.ok, res.render()
    assert res.truncated
    assert len(res.stdout) == LIMITS.max_output_chars
    assert f"[output truncated: each stream is limited to {LIMITS.max_output_chars} characters]" in res.render()

    # stdout larger than the file-size limit: the stream itself is capped too
    res = sandbox.run(f"import sys\nsys.stdout.write('z' * {4 * limit})\n", work)
    assert res.truncated and not res.ok
    assert len(res.stdout) <= LIMITS.max_output_chars and len(res.stderr) <= LIMITS.max_output_chars


# ----- 11. the task's files are readable and read-only ---------------------------------------------------
def test_task_files_are_readable_and_read_only(sandbox, tmp_path):
    work = _workdir(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    task_file = data / "task.csv"
    task_file.write_text("a,b\n1,2\n")
    os.chmod(task_file, 0o666)
    before = task_file.stat()
    target = f"{FILES_DIR}/task.csv"
    code = f"""
import os
print("CONTENT", repr(open({target!r}).read()))
def attempt(name, fn):
    try:
        fn()
        print("DID", name)
    except OSError as e:
        print("DENIED", name, type(e).__name__)
attempt("append", lambda: open({target!r}, "a").write("3,4\\n"))
attempt("truncate", lambda: os.truncate({target!r}, 0))
attempt("remove", lambda: os.remove({target!r}))
attempt("rename", lambda: os.rename({target!r}, "stolen.csv"))
attempt("chmod", lambda: os.chmod({target!r}, 0o777))
attempt("create", lambda: open({FILES_DIR!r} + "/new.txt", "w").write("x"))  # sandbox-only tmpfs if it works
"""
    res = sandbox.run(code, work, files=[task_file])

    assert res.ok, res.render()
    assert "CONTENT 'a,b\\n1,2\\n'" in res.stdout
    for name in ("append", "truncate", "remove", "rename", "chmod"):
        assert f"DENIED {name}" in res.stdout, res.stdout
    assert task_file.read_text() == "a,b\n1,2\n"
    after = task_file.stat()
    assert (after.st_mtime_ns, after.st_size, after.st_mode) == (before.st_mtime_ns, before.st_size, before.st_mode)
    assert sorted(p.name for p in data.iterdir()) == ["task.csv"]
    assert not (work / "stolen.csv").exists()


# ----- weaknesses found while writing these tests, fixed since (sandbox code runs as the host's nobody) -----
# (Before the fix, bwrap ran as root and the sandbox's uid was host uid 0.)


def test_cannot_open_global_sysctls_for_writing(sandbox, tmp_path):
    # Opens for writing and closes without writing a byte: the permission check happens at open().
    code = """
import os
for p in ("/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches"):
    try:
        os.close(os.open(p, os.O_WRONLY))
        print("WRITABLE", p)
    except OSError as e:
        print("DENIED", p, type(e).__name__)
"""
    res = sandbox.run(code, _workdir(tmp_path))
    assert res.ok, res.render()
    assert "WRITABLE" not in res.stdout, res.stdout


def test_cannot_plant_setuid_root_binary_on_host(sandbox, tmp_path):
    work = _workdir(tmp_path)
    code = """
import os, shutil
shutil.copy("/usr/bin/id", "planted")
try:
    os.chmod("planted", 0o6755)
except OSError as e:
    print("DENIED", type(e).__name__)
"""
    res = sandbox.run(code, work)
    assert res.ok, res.render()
    st = (work / "planted").stat()
    assert not (st.st_mode & stat.S_ISUID and st.st_uid == 0), oct(st.st_mode)
    assert not (st.st_mode & stat.S_ISGID and st.st_gid == 0), oct(st.st_mode)


def test_host_paths_are_not_disclosed(sandbox, tmp_path):
    work = _workdir(tmp_path)
    res = sandbox.run("print(open('/proc/1/cmdline', 'rb').read().replace(b'\\0', b' ').decode())", work)
    assert res.ok, res.render()
    assert str(work) not in res.stdout
