"""A local server is ready when its own process tree listens on its port, not when anything answers there.

Between ``free_port()`` and the server's bind another process may take the port (under ``pytest -n 2`` the other
worker's servers pick ports the same way). The old check took any answer on the port, and 0.1 s later the new
server was still importing: every env of the process then talked to the stranger for the process's life (a restart
keeps the port). With a parallel worker's sandbox server as the stranger (it refuses our token) that is the
symptom of a ``-n 2`` run where every Code-v0 episode of one worker ended ``env_crash``: a candidate cause, the
race was not caught in that run.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from aworld_gym.base.errors import ServerError
from aworld_gym.mcp.transports.shared import SharedServer, free_port, listening_sockets, owns_socket, wait_port

# A stand-in server: takes a moment to start (as a Python server importing the MCP SDK does), then binds its port,
# or (with "child") has a child process bind it; exits 1 when the port is taken.
SERVER = """
import socket, subprocess, sys, time
port, how = int(sys.argv[1]), sys.argv[2]
time.sleep(0.3)
if how == "child":
    sys.exit(subprocess.call([sys.executable, "-c", sys.argv[3], str(port)]))
s = socket.socket()
try:
    s.bind(("127.0.0.1", port))
except OSError:
    sys.exit(1)
s.listen()
time.sleep(120)
"""
BIND = """
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
time.sleep(120)
"""


class StandIn(SharedServer):
    def __init__(self, how: str = "self") -> None:
        super().__init__("stand-in", start_timeout=20.0)
        self.how = how

    def command(self, port: int) -> list[str]:
        return [sys.executable, "-c", SERVER, str(port), self.how, BIND]


def start(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", *args], start_new_session=True)


@pytest.fixture
def stranger():
    """A socket of this test process listening on a free port: not part of any server's process tree."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_a_port_another_process_listens_on_is_not_our_servers(stranger):
    assert listening_sockets(stranger)  # the table sees it...
    proc = start([SERVER, str(stranger), "self"])
    try:
        t0 = time.monotonic()
        assert wait_port(stranger, proc, 20) is False  # ...but ours exits on "address in use": not ready
        assert proc.returncode == 1 and time.monotonic() - t0 < 15
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("how", ["self", "child"])
def test_our_process_or_its_child_listening_is_ready(how):
    port = free_port()
    proc = start([SERVER, str(port), how, BIND])
    try:
        assert wait_port(port, proc, 20) is True
        assert owns_socket([proc.pid], listening_sockets(port) or set()) is (how == "self")
    finally:
        subprocess.run(["pkill", "-KILL", "-s", str(proc.pid)], check=False)
        proc.wait()


def test_a_shared_server_never_takes_a_strangers_port(stranger):
    """The restart of a server keeps its port: when a stranger holds it, the restart fails loudly instead of
    pointing every env at the stranger (it returned the stranger's URL before)."""
    server = StandIn()
    try:
        url = server.acquire()
        assert server.port is not None and url.endswith(f":{server.port}/mcp") and server.alive
        server.proc.kill()  # the server dies; its port is kept for the restart...
        server.proc.wait()
        server.port = stranger  # ...and (as if another process took it meanwhile) someone else listens there
        server.start_timeout = 5.0
        with pytest.raises(ServerError, match=f"did not start(.|\\n)*port {stranger} is held by another process"):
            server.ensure_alive()
        assert server.url is None
    finally:
        server.shutdown()


def test_where_proc_cannot_tell_a_connection_to_a_live_server_is_the_check(monkeypatch):
    """No ``/proc/net/tcp`` (not Linux) or an empty one (WSL1): a server that listens is still found ready, by the
    old check (it answers, and still runs 0.1 s later), instead of waiting out the start timeout."""
    import aworld_gym.mcp.transports.shared as shared

    for table in (None, set()):
        monkeypatch.setattr(shared, "listening_sockets", lambda port, table=table: table)
        port = free_port()
        proc = start([SERVER, str(port), "self"])
        try:
            t0 = time.monotonic()
            assert wait_port(port, proc, 20) is True and time.monotonic() - t0 < 10
        finally:
            proc.kill()
            proc.wait()


def test_only_listeners_that_127_0_0_1_reaches_count():
    """A socket on ::1 alone is not where the server's URL (127.0.0.1) points."""
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    with socket.socket(socket.AF_INET6) as s:
        try:
            s.bind(("::1", 0))
        except OSError as exc:
            pytest.skip(f"no ::1 here: {exc}")
        s.listen()
        port = s.getsockname()[1]
        assert listening_sockets(port) == set()
        with socket.socket() as v4:
            v4.bind(("127.0.0.1", port))
            v4.listen()
            assert len(listening_sockets(port) or ()) == 1
