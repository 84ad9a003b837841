"""anyio's benign race on a Unix socket's cancelled read (issue 46 item 4): Browser-v0 rollouts printed
``Exception in callback Future.set_result(None)`` / ``InvalidStateError`` tracebacks while exiting 0. The race is
made here deterministically: the socket turns readable and the reading task is cancelled in the same turn of the
loop. Without :func:`quiet_cancelled_reads` the loop reports it (so this test fails if the race is gone from anyio:
then the workaround can go); with it, that case is dropped and any other error still reaches the loop's handler."""

from __future__ import annotations

import asyncio
import socket
import tempfile
from pathlib import Path

import anyio

from aworld_gym.mcp.transports.http import cancelled_read_race, quiet_cancelled_reads


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


def test_a_cancelled_read_on_a_unix_socket_prints_no_traceback():
    before = asyncio.run(race(quiet=False))
    assert before == [("Exception in callback Future.set_result(None)", True), ("another error", False)]
    assert asyncio.run(race(quiet=True)) == [("another error", False)]
