"""A worker process of :class:`~aworld_gym.rollout.engines.process_engine.ProcessEngine`:

    python -m aworld_gym.rollout.engines.process_worker SLOTS

Frames in on stdin: ``("spec", cloudpickled (Work, policy_timeout_s))`` once, then ``("jobs", [Job, ...])`` (never
more than ``SLOTS`` running at once) and ``("close",)``. Frames out on stdout: ``("done", job index, record or None,
error text or None)`` as each episode ends. At ``close`` or the end of stdin (the engine is gone) the worker stops its
episodes, closes its envs (their MCP sessions and server processes) and exits.
"""

from __future__ import annotations

import asyncio
import os
import sys
import traceback
from typing import Any


def _private_stdio() -> tuple[int, int]:
    """The frames' own descriptors; fd 0 becomes /dev/null and fd 1 goes to stderr, so nothing the envs, their
    servers or the policies print can corrupt a frame."""
    fin, fout = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return fin, fout


async def serve(slots: int, fin: int, fout: int) -> None:
    import cloudpickle

    import aworld_gym  # noqa: F401 - registers the ids
    from aworld_gym.rollout.engines.process_engine import read_frame, write_frame
    from aworld_gym.rollout.pool import EnvPool

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**26)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fin, "rb", buffering=0))
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, os.fdopen(fout, "wb", 0))
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    work: Any = None
    error = ""
    timeout: float | None = None
    pool: EnvPool | None = None
    policies: list[Any] = []
    tasks: set[asyncio.Task[None]] = set()
    sem = asyncio.Semaphore(slots)

    async def one(job: Any) -> None:
        assert work is not None and pool is not None
        async with sem:
            try:
                policy = policies.pop() if policies else work.policy()
                try:
                    traj = await work.run(pool, policy, job, policy_timeout_s=timeout)
                    out = ("done", job.index, traj.to_record(), None)
                finally:
                    policies.append(policy)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a bug below the driver: the engine records it, never a hang
                out = ("done", job.index, None, traceback.format_exc())
        writer.write(write_frame(out))
        await writer.drain()

    try:
        while True:
            try:
                frame = await read_frame(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            if frame[0] == "spec":
                try:
                    work, timeout = cloudpickle.loads(frame[1])
                    pool = EnvPool(work.make, max_idle=slots)
                except Exception:  # noqa: BLE001 - every job of this worker then says why
                    error = traceback.format_exc()
                    work = None
            elif frame[0] == "jobs":
                for job in frame[1]:
                    if work is None:
                        writer.write(write_frame(("done", job.index, None, f"the run's spec did not load:\n{error}")))
                        continue
                    task = asyncio.create_task(one(job))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
            elif frame[0] == "close":
                break
    finally:
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if pool is not None:
            await pool.aclose()
        try:
            await writer.drain()
        except ConnectionError:
            pass


def main() -> None:
    slots = int(sys.argv[1])
    fin, fout = _private_stdio()
    asyncio.run(serve(slots, fin, fout))


if __name__ == "__main__":
    main()
