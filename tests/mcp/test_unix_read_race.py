"""anyio's benign race on a Unix socket's cancelled read (issue 46 item 4): Browser-v0 rollouts printed
``Exception in callback Future.set_result(None)`` / ``InvalidStateError`` tracebacks while exiting 0. The race is
made here deterministically: the socket turns readable and the reading task is cancelled in the same turn of the
loop. Without :func:`quiet_cancelled_reads` the loop reports it (so this test fails if the race is gone from anyio:
then the workaround can go); with it, that case is dropped and any other error still reaches the loop's handler."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio

from aworld_gym.mcp.transports.http import cancelled_read_race, quiet_cancelled_reads
from tests.helpers import ROOT


async def race(quiet: bool) -> list[tuple[str, bool]]:
    """The errors the loop reports (message, whether it is the benign race: judged when reported, as the handle is
    cancelled afterwards) when a read on an anyio UNIX stream is cancelled as its socket turns readable."""
    loop = asyncio.get_running_loop()
    seen: list[tuple[str, bool]] = []
    loop.set_exception_handler(lambda _loop, context: seen.append((context["message"], cancelled_read_race(context))))
    if quiet:
        quiet_cancelled_reads(loop)
        quiet_cancelled_reads(loop)  # a second call does nothing
    with tempfile.TemporaryDirectory(prefix="race-") as folder, socket.socket(socket.AF_UNIX) as server:
        path = str(Path(folder) / "s")
        server.bind(path)
        server.listen(1)
        stream = await anyio.connect_unix(path)  # what httpx2's transport opens for uds=
        theirs, _ = server.accept()
        with theirs:
            reader = asyncio.ensure_future(stream.receive())
            await asyncio.sleep(0.01)  # the reader waits on its future (loop.add_reader)
            theirs.send(b"x")  # readable at the next select...
            loop.call_soon(reader.cancel)  # ...and cancelled by a callback that runs before the reader's in that turn
            await asyncio.sleep(0.05)
            assert reader.cancelled()
            await stream.aclose()
    # every other error still reaches the handler the loop had
    loop.call_exception_handler({"message": "another error", "exception": asyncio.InvalidStateError()})
    return seen


def in_a_fresh_interpreter(quiet: bool) -> list[tuple[str, bool]]:
    """:func:`race` in a new Python: the order of one loop turn is what is tested, and a module another test
    imported into this process may have patched the event loop (``nest_asyncio`` changes how a turn runs)."""
    code = f"import asyncio, json; from tests.mcp.test_unix_read_race import race; print(json.dumps(asyncio.run(race({quiet}))))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return [tuple(item) for item in json.loads(out.stdout.strip().splitlines()[-1])]


def test_a_cancelled_read_on_a_unix_socket_prints_no_traceback():
    before = in_a_fresh_interpreter(quiet=False)
    assert before == [("Exception in callback Future.set_result(None)", True), ("another error", False)]
    assert in_a_fresh_interpreter(quiet=True) == [("another error", False)]
