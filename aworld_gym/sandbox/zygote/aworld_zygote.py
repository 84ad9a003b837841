"""The warm sandbox's fork server (zygote): a standalone program (standard library only) run inside bubblewrap.

The host starts it once per :class:`~aworld_gym.sandbox.runner.Sandbox` as ``python -I -X utf8 aworld_zygote.py``
(this folder bound read-only at ``/sandbox/zygote``) inside a bubblewrap sandbox of its own (read-only system and
Python, no network, its own PID, IPC and UTS namespaces; it is PID 1 there), as root with its capabilities, and with
the host's file system at ``/host`` (only this trusted program ever sees it). The first line on fd 0 is its
settings; it imports the preloaded modules once, then reads one JSON request per line and answers one JSON line
per execution on fd 1. It never holds an execution's code, data or output: only paths and limits. Each execution
is two processes, its init made ahead as a spare::

    zygote (root, never runs untrusted code): the event loop: spares, requests, pidfds, deadlines, replies
      -> init (PID 1 of a new PID namespace; its own mount, network and IPC namespaces; its cgroup joined ahead):
         on the request, a fresh /sandbox (the code read-only at /sandbox/main.py, the work folder read-write, the
         task's files read-only), a fresh /tmp and /dev/shm, /host detached, /proc mounted, `nobody` without
         capabilities, the rlimits; reaps, and when it exits the kernel kills everything left in the namespace
        -> the code (PID 2): a fresh __main__ from the preloaded interpreter; exits like ``python main.py``
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from aworld_zygote_execution import (
    CLONE_NEWPID,
    _check,
    _libc,
    host,
    init,
)

sys.path.pop(0)  # executions inherit a sys.path without this folder


# ----- an execution's cgroup and its spare init, made ahead of its request ----------------------------------
class Cgroup:
    """The execution's cgroup (``pids`` and ``memory``; v1 or v2), made by the zygote, removed after the reply.

    Its files are opened when it is made; the limits are written when the request comes."""

    def __init__(self, spec: dict, n: int) -> None:
        self.name = f"{spec['prefix']}{n}-{os.urandom(4).hex()}"
        self.parents: list[int] = []
        self.procs: list[int] = []
        self.limits: list[int] = []
        try:
            for b in spec["bases"]:
                self.parents.append(os.open(host(b), os.O_RDONLY | os.O_DIRECTORY))
                os.mkdir(self.name, 0o755, dir_fd=self.parents[-1])
            self._open(spec)
        except OSError:  # half made (no memory, no pids left): nothing of it stays behind
            self.remove()
            raise

    def _open(self, spec: dict) -> None:
        dirs = [host(f"{b}/{self.name}") for b in spec["bases"]]
        self.procs = [os.open(f"{d}/cgroup.procs", os.O_WRONLY) for d in dirs]
        self.v1 = spec["version"] == 1
        names = [(dirs[0], "pids.max"), (dirs[-1], "memory.limit_in_bytes" if self.v1 else "memory.max"),
                 (dirs[-1], "memory.memsw.limit_in_bytes" if self.v1 else "memory.swap.max")]  # fmt: skip
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
        try:
            go_r, self.go = os.pipe()
            self.status, status_w = os.pipe()
        except OSError:
            if self.cgroup:
                self.cgroup.remove()
            raise
        _check(_libc.unshare(CLONE_NEWPID), "unshare")  # the next child is PID 1 of a new namespace
        try:
            self.pid = os.fork()
        except OSError:
            _check(_libc.setns(pidns, CLONE_NEWPID), "setns")
            for fd in (go_r, self.go, self.status, status_w):
                os.close(fd)
            if self.cgroup:
                self.cgroup.remove()  # no process ever joined it
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
        self.reply({"ready": True, "preloaded": loaded})

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
        """One line to the host, with the names of the cgroups made ahead for the spares: every other cgroup of this
        zygote is an execution's, and none is left once its reply has gone out."""
        spares = [sp.cgroup.name for sp in self.spares if sp.cgroup]
        os.write(self.replies, (json.dumps({**reply, "spare_cgroups": spares}) + "\n").encode())

    def done(self, ex: Spare) -> None:
        """Give the execution's cgroup back before its reply goes out; the kernel may hold it a few ms after its last
        process (an OOM kill), so it is retried briefly, then in the background."""
        if not ex.cgroup:
            return
        for _ in range(20):
            if ex.cgroup.remove():
                return
            time.sleep(0.005)
        self.removing.append(ex.cgroup)

    def handle(self, line: bytes) -> None:
        req = json.loads(line)
        ex = None
        try:
            if not self.spares:
                self.add_spare()
            ex = self.spares.pop(0)
            ex.start(line, req)
        except OSError as exc:  # no spare could be made, or it died: the host gets a clear error
            if ex is not None:  # a spare that could not take the request: it goes, with its cgroup
                ex.kill()
                select.select([ex.pidfd], [], [], 1.0)
                ex.finish()
                self.done(ex)
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
                    result = ex.finish()
                    self.done(ex)
                    self.reply(result)
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
