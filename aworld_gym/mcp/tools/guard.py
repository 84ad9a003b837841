"""A bound on one step's tool calls that does not rely on the calls honouring cancellation.

Every call has its own deadline (the hub's watchdog), a probe after it is bounded, a restart is bounded: a step
should never outlast its slowest call plus a restart. But each of those bounds works by cancelling a task, and a
library below us that swallows a cancellation (or a wait nobody thought to bound) would leave the step, and with it
the episode and a whole rollout waiting for that episode, hanging for ever. Here the step's calls run as a task of
their own that the step waits for with a timeout: past it the step returns a timeout result for every call, the
task is cancelled but not waited for, and the step's sessions are marked dead so the next step starts them afresh.
A step task that ends cancelled while the step itself was not (a deadline's cancellation that a library below let
escape, or that arrived as the call ended) is the same: timeout results, never a ``CancelledError`` that would end
the episode's worker without a record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from aworld_gym.base.calls import ToolCall
from aworld_gym.mcp.redact import module_logger
from aworld_gym.mcp.results import TIMEOUT, ToolResult
from aworld_gym.mcp.transports.connection import Connection

logger = module_logger(__name__)


async def run_calls(
    call_one: Callable[[ToolCall], Awaitable[ToolResult]], calls: Sequence[ToolCall], sequential: bool
) -> list[ToolResult]:
    """One step's calls: concurrently, or in order when ``sequential`` (or when there is just one)."""
    if len(calls) > 1 and not sequential:
        return list(await asyncio.gather(*(call_one(c) for c in calls)))
    return [await call_one(c) for c in calls]  # no extra task for the common case


async def guarded_step(
    step: Awaitable[list[ToolResult]], calls: Sequence[ToolCall], conns: Sequence[Connection], limit: float
) -> list[ToolResult]:
    """``step``'s results, or past ``limit`` seconds a ``timeout`` result per call (the step abandoned, ``conns``
    marked dead). A cancellation of the caller cancels the step and propagates."""
    task = asyncio.ensure_future(step)
    try:
        done, _ = await asyncio.wait({task}, timeout=limit)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if done and not task.cancelled():
        return task.result()
    if done:  # cancelled, though its caller was not: a call's deadline whose cancellation escaped its handling
        for conn in conns:
            conn.mark_dead()
        names = ", ".join(repr(c.name) for c in calls)
        logger.warning("tool calls %s were cancelled from below (a deadline's cancellation that escaped); ended as "
                       "timeouts, their servers restarted at the next step", names)  # fmt: skip
        text = "was interrupted at its deadline and abandoned (its server is restarted)."
        return [ToolResult(c, f"Error: tool {c.name!r} {text}", TIMEOUT) for c in calls]
    task.cancel()  # not awaited: a task that ignores its cancellation must not hold the step
    task.add_done_callback(_retrieve)
    for conn in conns:
        conn.mark_dead()
    names = ", ".join(repr(c.name) for c in calls)
    logger.warning("tool calls %s did not end within %g s (a bound the calls' own timeouts should have kept); "
                   "abandoned, their servers restarted at the next step", names, limit)  # fmt: skip
    text = f"did not finish within {limit:g} s and was abandoned (its server is restarted)."
    return [ToolResult(c, f"Error: tool {c.name!r} {text}", TIMEOUT) for c in calls]


def _retrieve(task: asyncio.Future[list[ToolResult]]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: an abandoned step's late error is not "never retrieved"
