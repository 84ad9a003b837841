"""A step whose calls ignore their cancellation is still bounded (aworld_gym.mcp.tools.guard): each call has its own
deadline, but a library that swallowed the cancellation would otherwise hang the episode and the whole rollout."""

from __future__ import annotations

import asyncio
import threading
import time

from aworld_gym.base.calls import ToolCall
from aworld_gym.mcp.functions import function_server
from aworld_gym.mcp.hub import ToolHub
from aworld_gym.mcp.results import TIMEOUT


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_a_step_whose_call_swallows_its_cancellation_ends_at_the_guard(monkeypatch):
    hub = ToolHub(servers={"tools": function_server([add])}).start()
    try:
        assert hub.call([ToolCall("add", {"a": 1, "b": 2})])[0].text == "3"
        real = hub._call_one
        swallowed, finished, release = [], [], threading.Event()

        async def stubborn(call):  # a wait that no cancellation ends: only the test's release (or 60 s) does
            end = time.monotonic() + 60.0
            while not release.is_set() and time.monotonic() < end:
                try:
                    await asyncio.sleep(0.05)
                except asyncio.CancelledError:
                    swallowed.append(call.name)
            finished.append(call.name)
            return await real(call)

        monkeypatch.setattr(hub, "_call_one", stubborn)
        monkeypatch.setattr(hub, "_step_timeout_s", 0.5)
        try:
            res = hub.call([ToolCall("add", {"a": 1, "b": 2}), ToolCall("add", {"a": 3, "b": 4})])
            # the step ended while both calls still held on (no clock): without the guard it would wait for them
            assert finished == [], f"the step waited for calls that ignored their cancellation: {finished}"
            assert [r.error for r in res] == [TIMEOUT, TIMEOUT], res
            assert "did not finish within 0.5 s and was abandoned" in res[0].text
            assert swallowed and not any(c.alive for c in hub._conns)  # cancelled, ignored it; the session restarts
        finally:
            release.set()
        monkeypatch.setattr(hub, "_call_one", real)
        assert hub.call([ToolCall("add", {"a": 5, "b": 6})])[0].text == "11"  # the next step: a fresh session
    finally:
        hub.close()


def test_a_cancellation_that_escapes_a_call_ends_the_step_as_timeouts_not_the_episode(monkeypatch):
    """The step's task ends cancelled though the step was not (a deadline's cancellation let through from below, as
    a soak run showed: four episode workers died of it and the rollout waited for their records for ever)."""
    hub = ToolHub(servers={"tools": function_server([add])}).start()
    try:
        real = hub._call_one

        async def escaped(call):
            raise asyncio.CancelledError  # what a leaked cancellation looks like to the step

        monkeypatch.setattr(hub, "_call_one", escaped)
        res = hub.call([ToolCall("add", {"a": 1, "b": 2})])
        assert [r.error for r in res] == [TIMEOUT] and "interrupted at its deadline" in res[0].text
        assert not any(c.alive for c in hub._conns)  # marked dead: restarted at the next step
        monkeypatch.setattr(hub, "_call_one", real)
        assert hub.call([ToolCall("add", {"a": 5, "b": 6})])[0].text == "11"
    finally:
        hub.close()
