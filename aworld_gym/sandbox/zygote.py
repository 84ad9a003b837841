"""The warm sandbox's fork server (zygote): a standalone program (standard library only) run inside bubblewrap.

The host starts it once per :class:`~aworld_gym.sandbox.runner.Sandbox` as ``python -I -X utf8 zygote.py``
inside a bubblewrap sandbox of its own (read-only system and Python, no network, its own PID, IPC and UTS
namespaces), as root with its capabilities, and with the host's file system at ``/host`` (only this trusted
program ever sees it). It imports the preloaded modules once, then reads one JSON request per line on fd 0 and
answers one JSON line per execution on fd 1. It never holds an execution's code, data or output: only paths
and limits. Each execution is three forks away from it::

    zygote (root, never runs untrusted code)
      -> keeper (root): new mount, PID, network and IPC namespaces; a fresh /sandbox (the code read-only at
         /sandbox/main.py, the work folder read-write at /sandbox/work, the task's files read-only), a fresh
         /tmp and /dev/shm; /host detached; waits for the execution with the wall-clock limit and reports
        -> init (PID 1 of the new namespace): joins the execution's cgroup, mounts /proc, drops to `nobody`
           (no capabilities, empty bounding set, no_new_privs), sets the rlimits; reaps, and when it exits
           the kernel kills everything left in the namespace
          -> the code (PID 2): a fresh __main__ from the preloaded interpreter; exits like ``python main.py``
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import ctypes
import gc
import json
import os
import resource
import select
import signal
import sys
import threading
import time
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


# ----- an execution's cgroup and its spare init, made ahead of its request ----------------------------------
class Cgroup:
    """The execution's cgroup (``pids`` and ``memory``; v1 or v2), made by the zygote, removed after the reply.

    Its files are opened when it is made; the limits are written when the request comes."""

    def __init__(self, spec: dict, n: int) -> None:
        self.name = f"{spec['prefix']}{n}-{os.urandom(4).hex()}"
        self.parents = [os.open(host(b), os.O_RDONLY | os.O_DIRECTORY) for b in spec["bases"]]
        for fd in self.parents:
            os.mkdir(self.name, 0o755, dir_fd=fd)
        dirs = [host(f"{b}/{self.name}") for b in spec["bases"]]
        self.procs = [os.open(f"{d}/cgroup.procs", os.O_WRONLY) for d in dirs]
        self.v1 = spec["version"] == 1
        names = [(dirs[0], "pids.max"), (dirs[-1], "memory.limit_in_bytes" if self.v1 else "memory.max"),
                 (dirs[-1], "memory.memsw.limit_in_bytes" if self.v1 else "memory.swap.max")]  # fmt: skip
        self.limits = []
        for d, name in names:
            try:
                self.limits.append(os.open(f"{d}/{name}", os.O_WRONLY))
            except FileNotFoundError:  # no swap accounting here
                self.limits.append(-1)

    def limit(self, max_pids: int, memory: int) -> None:
        values = [str(max_pids), str(memory), str(memory) if self.v1 else "0"]
        for i, (fd, value) in enumerate(zip(self.limits, values, strict=True)):
            if fd >= 0:
                try:
                    os.write(fd, value.encode())
                except OSError:
                    if i != 2:  # swap accounting is best effort
                        raise

    def close_files(self) -> None:
        for fd in (*self.procs, *self.limits):
            if fd >= 0:
                os.close(fd)
        self.procs, self.limits = [], []

    def remove(self) -> bool:
        """Remove it (its processes are gone); False while the kernel still holds it (try again shortly)."""
        self.close_files()
        for fd in list(self.parents):
            try:
                os.rmdir(self.name, dir_fd=fd)
            except FileNotFoundError:
                pass
            except OSError:
                return False
            os.close(fd)
            self.parents.remove(fd)
        return True


class Spare:
    """An execution made ahead of its request: its init is PID 1 of a new PID namespace, in its own mount, network
    and IPC namespaces and its own cgroup, waiting on a pipe for the request."""

    def __init__(self, config: dict, n: int, pidns: int, keep_closed: list[int]) -> None:
        spec = config.get("cgroup")
        self.cgroup = Cgroup(spec, n) if spec else None
        go_r, self.go = os.pipe()
        self.status, status_w = os.pipe()
        _check(_libc.unshare(CLONE_NEWPID), "unshare")  # the next child is PID 1 of a new namespace
        try:
            self.pid = os.fork()
        except OSError:
            _check(_libc.setns(pidns, CLONE_NEWPID), "setns")
            raise
        if self.pid == 0:
            try:
                z_side = [*self.cgroup.parents, *(fd for fd in self.cgroup.limits if fd >= 0)] if self.cgroup else []
                for fd in (*keep_closed, self.go, self.status, *z_side):
                    os.close(fd)
                init(go_r, status_w, self.cgroup.procs if self.cgroup else [])
            finally:
                os._exit(127)
        _check(_libc.setns(pidns, CLONE_NEWPID), "setns")  # and only that one
        os.close(go_r)
        os.close(status_w)
        if self.cgroup:
            for fd in self.cgroup.procs:
                os.close(fd)
            self.cgroup.procs = []
        self.pidfd = os.pidfd_open(self.pid)
        self.request: dict | None = None
        self.deadline = 0.0
        self.timed_out = False

    def fds(self) -> list[int]:
        own = [self.go, self.status, self.pidfd]
        if self.cgroup:
            own += [*self.cgroup.parents, *(fd for fd in self.cgroup.limits if fd >= 0)]
        return [fd for fd in own if fd >= 0]

    def start(self, line: bytes, req: dict) -> None:
        """Hand the request to the waiting init."""
        self.request = req
        if self.cgroup:
            self.cgroup.limit(int(req["max_pids"]), int(req["memory"]))
        os.write(self.go, line)
        os.close(self.go)
        self.go = -1
        self.deadline = time.monotonic() + float(req["wall"])

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)  # the namespace's init: all in it die with it

    def finish(self) -> dict:
        """The reply, once the init has exited."""
        reply: dict = {"id": self.request["id"] if self.request else None, "status": None,
                       "timed_out": self.timed_out, "error": None}  # fmt: skip
        data = os.read(self.status, 1100).decode(errors="replace")
        if data.startswith("E"):
            reply["error"] = data[1:]
        elif data:
            reply["status"] = int(data)
        elif not self.timed_out:
            reply["error"] = "the execution's init died without a status"
        for fd in (self.status, self.pidfd, self.go):
            if fd >= 0:
                os.close(fd)
        self.status = self.pidfd = self.go = -1
        return reply


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


# ----- the zygote ----------------------------------------------------------------------------------------------
def main() -> None:
    requests, replies = os.dup(0), os.dup(1)
    buf = b""
    while b"\n" not in buf:  # the first line: the settings
        chunk = os.read(requests, 1 << 16)
        if not chunk:
            os._exit(0)
        buf += chunk
    first, buf = buf.split(b"\n", 1)
    config = json.loads(first)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)  # a stray print can never corrupt the replies
    os.close(null)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # inits are reaped by the kernel; their pidfds say when
    loaded = []
    for name in config.get("preload", []):
        try:
            __import__(name)
            loaded.append(name)
        except Exception:  # noqa: BLE001 - a module that is not installed is simply not preloaded
            pass
    # Everything loaded so far stays out of the collector's reach: a collection in a forked child would otherwise
    # write to every object's header and copy nearly every page of the zygote (copy-on-write), once per execution.
    gc.freeze()
    Zygote(config, requests, replies, buf, loaded).serve()


class Zygote:
    """The event loop: spares made ahead, requests handed to them, exits and deadlines watched, replies sent."""

    def __init__(self, config: dict, requests: int, replies: int, buf: bytes, loaded: list[str]) -> None:
        self.config, self.requests, self.replies, self.buf = config, requests, replies, buf
        self.pidns = os.open("/proc/self/ns/pid", os.O_RDONLY)
        self.want = max(1, int(config.get("spares", 2)))
        self.spares: list[Spare] = []
        self.running: dict[int, Spare] = {}  # pidfd -> execution
        self.removing: list[Cgroup] = []
        self.made = 0
        for _ in range(self.want):
            self.add_spare()
        os.write(replies, (json.dumps({"ready": True, "preloaded": loaded}) + "\n").encode())

    def add_spare(self) -> Spare:
        self.made += 1
        own = [self.requests, self.replies, self.pidns]
        for other in (*self.spares, *self.running.values()):
            own += other.fds()
        for cg in self.removing:
            own += cg.parents
        spare = Spare(self.config, self.made, self.pidns, own)
        self.spares.append(spare)
        return spare

    def reply(self, reply: dict) -> None:
        os.write(self.replies, (json.dumps(reply) + "\n").encode())

    def done(self, ex: Spare) -> None:
        if ex.cgroup and not ex.cgroup.remove():
            self.removing.append(ex.cgroup)

    def handle(self, line: bytes) -> None:
        req = json.loads(line)
        try:
            if not self.spares:
                self.add_spare()
            ex = self.spares.pop(0)
            ex.start(line, req)
        except OSError as exc:  # no spare could be made, or it died: the host gets a clear error
            self.reply({"id": req["id"], "status": None, "timed_out": False, "error": f"{type(exc).__name__}: {exc}"})
            return
        self.running[ex.pidfd] = ex
        while len(self.spares) < self.want:
            try:
                self.add_spare()
            except OSError:
                break

    def serve(self) -> None:
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                self.handle(line)
            now = time.monotonic()
            timeout = min((ex.deadline - now for ex in self.running.values() if not ex.timed_out), default=None)
            if self.removing:
                timeout = 0.02 if timeout is None else min(timeout, 0.02)
            waiting = [self.requests, *self.running, *(sp.pidfd for sp in self.spares)]
            ready = select.select(waiting, [], [], None if timeout is None else max(0.0, timeout))[0]
            for fd in ready:
                if fd == self.requests:
                    chunk = os.read(self.requests, 1 << 16)
                    if not chunk:
                        self.shut_down()  # the host closed the pipe: it closed the sandbox, or it is gone
                    self.buf += chunk
                elif fd in self.running:
                    ex = self.running.pop(fd)
                    self.reply(ex.finish())
                    self.done(ex)
                else:  # a spare died before its request (nothing ran in it)
                    spare = next(sp for sp in self.spares if sp.pidfd == fd)
                    self.spares.remove(spare)
                    spare.finish()
                    self.done(spare)
            now = time.monotonic()
            for ex in self.running.values():
                if not ex.timed_out and now >= ex.deadline:
                    ex.timed_out = True
                    ex.kill()
            self.removing = [cg for cg in self.removing if not cg.remove()]

    def shut_down(self) -> None:
        """Kill every execution and spare, remove their cgroups (for up to ~3 s), exit."""
        everyone = [*self.spares, *self.running.values()]
        for ex in everyone:
            ex.kill()
        pidfds = [ex.pidfd for ex in everyone]
        deadline = time.monotonic() + 3.0
        while pidfds and time.monotonic() < deadline:
            done = select.select(pidfds, [], [], max(0.0, deadline - time.monotonic()))[0]
            pidfds = [fd for fd in pidfds if fd not in done]
        self.removing += [ex.cgroup for ex in everyone if ex.cgroup]
        while self.removing and time.monotonic() < deadline:
            self.removing = [cg for cg in self.removing if not cg.remove()]
            time.sleep(0.02)
        os._exit(0)


if __name__ == "__main__":
    main()
