"""The execution side of the warm sandbox's zygote: an execution's mounts (``stage``), its init (PID 1 of its own
namespace: cgroup, /proc, privileges dropped, rlimits, reaping) and the code itself (a fresh ``__main__`` run as
``python main.py`` would). Standard library only: it runs inside the sandbox, imported by ``aworld_zygote.py``
under this distinct name (so no module of the code's own is shadowed).
"""

from __future__ import annotations

import atexit
import builtins
import ctypes
import json
import os
import resource
import signal
import sys
import threading
import traceback
import types

NOBODY = 65534
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 16384, 1 << 18)  # fmt: skip
MNT_DETACH = 2
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x8000000, 0x20000000, 0x40000000
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, PR_SET_DUMPABLE = 38, 24, 4
HOST = "/host"
SANDBOX = "/sandbox"
RLIMITS = {"cpu": resource.RLIMIT_CPU, "as": resource.RLIMIT_AS, "nofile": resource.RLIMIT_NOFILE,
           "fsize": resource.RLIMIT_FSIZE, "core": resource.RLIMIT_CORE}  # fmt: skip

_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def host(path: str) -> str:
    return HOST + path


def read_all(fd: int) -> bytes:
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def stage(req: dict) -> None:
    """A fresh read-only /sandbox holding the code, the work folder and the files; a fresh /tmp and /dev/shm."""
    nodev = MS_NOSUID | MS_NODEV
    mount("sandbox", SANDBOX, "tmpfs", nodev, "size=1m,mode=0755")
    main = f"{SANDBOX}/main.py"
    work = f"{SANDBOX}/work"
    os.close(os.open(main, os.O_CREAT | os.O_WRONLY, 0o644))
    os.mkdir(work, 0o755)
    mount(host(req["main"]), main, None, MS_BIND)
    mount(None, main, None, MS_REMOUNT | MS_BIND | MS_RDONLY | nodev)
    mount(host(req["work"]), work, None, MS_BIND)
    mount(None, work, None, MS_REMOUNT | MS_BIND | nodev)
    if req.get("files"):
        os.mkdir(f"{SANDBOX}/files", 0o755)
        for src, name in req["files"]:
            dest = f"{SANDBOX}/files/{name}"
            os.close(os.open(dest, os.O_CREAT | os.O_WRONLY, 0o644))
            mount(host(src), dest, None, MS_BIND)
            mount(None, dest, None, MS_REMOUNT | MS_BIND | MS_RDONLY | nodev)
    mount(None, SANDBOX, None, MS_REMOUNT | MS_RDONLY | nodev)
    mount("tmp", "/tmp", "tmpfs", nodev, f"size={int(req['tmp_bytes'])},mode=1777")
    for root in req.get("tmp_roots", []):  # a Python installation under /tmp stays visible
        os.makedirs(root, exist_ok=True)
        mount(host(root), root, None, MS_BIND | MS_REC)
        mount(None, root, None, MS_REMOUNT | MS_BIND | MS_RDONLY | nodev)
    if os.path.isdir("/dev/shm"):
        mount("shm", "/dev/shm", "tmpfs", nodev | MS_NOEXEC, "size=1m,mode=1777")


# ----- init: PID 1 of the execution's namespace --------------------------------------------------------------
def init(go: int, status_w: int, procs: list[int]) -> None:
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC), "unshare")
        mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing of this execution propagates anywhere
        for fd in procs:  # join the execution's cgroup (pids, memory) before the request comes
            os.write(fd, b"0")
            os.close(fd)
        line = read_all(go)
        os.close(go)
        if not line:
            os._exit(0)
        req = json.loads(line)
        stage(req)
        out = os.open(host(req["stdout"]), os.O_WRONLY | os.O_TRUNC)
        err = os.open(host(req["stderr"]), os.O_WRONLY | os.O_TRUNC)
        _check(_libc.umount2(HOST.encode(), MNT_DETACH), "umount /host")  # the host's files are gone from here on
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except BaseException as exc:  # noqa: BLE001 - the keeper reports it
        os.write(status_w, f"E{type(exc).__name__}: {exc}"[:1000].encode())
        os._exit(1)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.closerange(3, status_w)
    os.closerange(status_w + 1, 65536)
    drop_privileges()
    for name, value in req["rlimits"].items():
        resource.setrlimit(RLIMITS[name], tuple(value))
    os.chdir(f"{SANDBOX}/work")
    pid = os.fork()
    if pid == 0:
        os.close(status_w)
        run_code(f"{SANDBOX}/main.py")
    status = 0
    while True:  # reap everything; the code's status is what the execution returns
        try:
            got, st = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if got == pid:
            status = st
            break
    os.write(status_w, str(status).encode())
    os._exit(0)


def drop_privileges() -> None:
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: no such cap
            _check(-1, "drop capabilities")
    os.setresuid(NOBODY, NOBODY, NOBODY)  # from root to a non-root uid: every capability set is cleared
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    # A change of uid makes a process non-dumpable (its /proc files root's); as on the cold path, an execution may
    # read its own /proc/<pid>/environ. Nothing outside its PID namespace can see it, and it holds nothing of root's.
    _check(_libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "dumpable")
    if os.getuid() != NOBODY or os.geteuid() != NOBODY or os.getgroups():
        os._exit(126)


# ----- the code: a fresh __main__ in the preloaded interpreter -------------------------------------------------
def run_code(path: str) -> None:
    status = 0
    try:
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        if "numpy.random" in sys.modules:  # a forked child shares the zygote's random state: draw a fresh one
            sys.modules["numpy.random"].seed()
        main = types.ModuleType("__main__")
        main.__file__ = path
        main.__builtins__ = builtins  # type: ignore[attr-defined]
        sys.modules["__main__"] = main
        sys.argv = [path]
        with open(path, "rb") as f:
            source = f.read()
        try:
            code = compile(source, path, "exec")
            exec(code, main.__dict__)
        except SystemExit as exc:
            status = exit_status(exc)
        except BaseException as exc:  # noqa: BLE001 - printed as Python would, then exit 1
            tb = exc.__traceback__.tb_next if not isinstance(exc, SyntaxError) else None
            traceback.print_exception(type(exc), exc, tb)
            status = 1
        try:
            threading._shutdown()  # type: ignore[attr-defined]  # wait for non-daemon threads, as Python does
            atexit._run_exitfuncs()
        except SystemExit as exc:
            status = exit_status(exc)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001 - a closed or broken stream
                pass
        os._exit(status)


def exit_status(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1
