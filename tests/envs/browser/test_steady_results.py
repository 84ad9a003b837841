"""Browser-v0 shows the model Playwright's answers without run-dependent text, and leaves the hub's ToolResults as
they came back: the steadied text is in copies (``ToolResult.with_text``), which the step shows and records."""

from __future__ import annotations

import asyncio
import json

from aworld_gym.base.calls import ToolCall
from aworld_gym.base.errors import ServerError
from aworld_gym.envs.browser.env import BrowserEnv
from aworld_gym.mcp.results import ToolResult
from tests.envs.browser.test_browser import browser_env
from tests.envs.browser.test_browser import pytestmark as needs_browser

PAGES = "http://127.0.0.1:43210/t0ken"
RAW = (
    f"### Page\n- Page URL: {PAGES}/miniwob/click-button.html\n"
    "### New console entries\n- console-2026-01-01T00-00-00.log\n"
)


def test_with_text_is_a_copy_and_leaves_the_result_alone():
    result = ToolResult(ToolCall("browser_click", {"target": "#b"}, "c1"), RAW, server="browser", latency_s=0.5)
    copy = result.with_text("short")
    assert (copy.text, result.text) == ("short", RAW)
    assert (copy.call, copy.server, copy.latency_s, copy.error) == (result.call, "browser", 0.5, None)
    assert result.with_text(RAW) is result


class Stub:
    """Just what ``BrowserEnv.acheck_task`` reads before it asks the page (which fails here)."""

    pages = PAGES

    async def _read_state(self):
        raise ServerError("no browser in this test")


def test_acheck_task_puts_steadied_copies_in_the_step_results():
    result = ToolResult(ToolCall("browser_click", {"target": "#b"}, "c1"), RAW, server="browser")
    results = [result]
    state = asyncio.run(BrowserEnv.acheck_task(Stub(), None, results))
    assert state is not None and "no browser" in state.crash
    assert result.text == RAW  # the hub's result is not changed
    (shown,) = results
    assert shown is not result and shown.call is result.call
    assert PAGES not in shown.text and "console-" not in shown.text
    assert "- Page URL: /miniwob/click-button.html" in shown.text


def tool_call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def spied(raw) -> list[tuple[ToolResult, str]]:
    """Every result the hub gives the env (either face), with its text as it came back."""
    seen: list[tuple[ToolResult, str]] = []
    hub_call, hub_acall = raw.hub.call, raw.hub.acall

    def call(calls):
        results = hub_call(calls)
        seen.extend((r, r.text) for r in results)
        return results

    async def acall(calls):
        results = await hub_acall(calls)
        seen.extend((r, r.text) for r in results)
        return results

    raw.hub.call, raw.hub.acall = call, acall
    return seen


def check(raw, seen, step) -> None:
    (result, text), (obs, *_, info) = seen[-1], step
    assert raw.pages in text  # Playwright's answer names the per-run page server...
    assert result.text == text  # ...and the hub's result still says so
    shown = info["tool_results"][0]["text"]
    assert raw.pages not in shown and raw.pages not in obs
    assert shown in obs and raw.turns[-1]["tool_results"][0]["text"] == shown


@needs_browser
def test_the_hubs_results_are_unchanged_and_the_step_shows_them_steadied():
    with browser_env(task="click-button") as env:
        raw = env.unwrapped
        seen = spied(raw)
        env.reset(seed=0)
        check(raw, seen, env.step(tool_call("browser_snapshot")))


@needs_browser
def test_the_async_face_shows_them_steadied_too():
    with browser_env(task="click-button") as env:
        raw = env.unwrapped
        seen = spied(raw)

        async def main():
            await raw.areset(seed=0)
            step = await raw.astep(tool_call("browser_snapshot"))
            await raw.hub.aclose()
            return step

        check(raw, seen, asyncio.run(main()))
