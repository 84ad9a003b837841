"""A Playwright action that times out: the model's mistake when the page gave a reason (the element is disabled,
covered, hidden...), the machine's when it gave none (a starved browser never got to a verdict). The first is an
error observation and the episode goes on; the second ends the episode ``void``, never with reward 0."""

from __future__ import annotations

import dataclasses
import json

import pytest

from aworld_gym.base.calls import ToolCall
from aworld_gym.envs.browser.answers import as_timeout, starved
from aworld_gym.mcp.results import TIMEOUT, TOOL_ERROR, ToolResult
from aworld_gym.rollout.driver import run_episode
from tests.envs.browser.test_browser import browser_env
from tests.envs.browser.test_browser import pytestmark as needs_browser

# As the 32- and 64-env runs of benchmarks/browser_scale.py saw it on a starved machine (before admission control):
# the element found, the click attempted, no verdict from the page within 5 s.
STARVED = (
    "### Error\nTimeoutError: browserBackend.callTool: Timeout 5000ms exceeded.\nCall log:\n"
    '  - waiting for locator(\'#tt\')\n    - locator resolved to <input id="tt" type="text">\n'
    "  - attempting click action\n    - waiting for element to be visible, enabled and stable\n"
)


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def result(text: str, name: str = "browser_click", error: str | None = TOOL_ERROR) -> ToolResult:
    return ToolResult(ToolCall(name, {"target": "#tt"}, "c1"), text, error, server="browser")


def test_a_timeout_with_no_reason_from_the_page_is_the_machines():
    assert starved(STARVED)
    assert as_timeout(result(STARVED)).error == TIMEOUT
    assert as_timeout(result(STARVED, "browser_wait_for")).error == TOOL_ERROR  # the wait the model asked for
    assert not starved('### Error\nError: "#nothere" does not match any elements.')
    # progress only, but the element was never resolved (it may have gone): not sure, so the model's
    assert not starved("TimeoutError: Timeout 5000ms exceeded.\nCall log:\n  - waiting for locator('#tt')\n")
    busy = STARVED + "      - element is visible, enabled and stable\n      - scrolling into view if needed\n"
    assert starved(busy + "      - done scrolling\n    - performing click action\n    - waiting 20ms\n")
    assert as_timeout(result("### Result\nTimeout 5000ms exceeded", error=None)).error is None  # not an error


@pytest.mark.parametrize(
    "reason", ["element is not enabled", "element is not visible", "<div></div> intercepts pointer events",
               "element is outside of the viewport", "element was detached from the DOM, retrying",
               "did not find some options", "option being selected is not enabled", "a line no list knows"],
)  # fmt: skip
def test_a_timeout_the_page_gave_a_reason_for_is_the_models(reason):
    text = STARVED + f"      - {reason}\n    - retrying click action\n"
    assert not starved(text)
    assert as_timeout(result(text)).error == TOOL_ERROR


# Playwright's own words, from a real browser: a disabled button, then one under a full-page overlay.
DISABLE = "() => { document.querySelector('#subbtn').disabled = true; }"
COVER = """() => {
  document.querySelector('#subbtn').disabled = false;
  const cover = document.createElement('div');
  cover.style = 'position:fixed;left:0;top:0;width:100%;height:100%;z-index:9';
  document.body.appendChild(cover);
}"""


@needs_browser
def test_playwright_names_the_reason_and_the_episode_goes_on():
    with browser_env(task="click-test") as env:
        raw = env.unwrapped
        env.reset(seed=1)
        for script, reason in ((DISABLE, "element is not enabled"), (COVER, "intercepts pointer events")):
            raw.hub.run_sync(raw.hub.acall_internal("browser_evaluate", {"function": script}))
            _, reward, terminated, truncated, info = env.step(call("browser_click", target="#subbtn"))
            (shown,) = info["tool_results"]
            assert shown["error"] == TOOL_ERROR and "Timeout 5000ms exceeded" in shown["text"], shown
            assert reason in shown["text"]
            assert not (terminated or truncated) and reward <= 0.0  # an error observation (charged to the model)


@needs_browser
def test_a_starved_click_ends_the_episode_void_not_with_reward_0():
    """The hub's answer to the click is replaced by the starved one (a starved machine cannot be made to order);
    everything else is the real env and driver."""
    from aworld_gym.envs.browser.reference import BrowserReferencePolicy

    with browser_env(task="click-test") as env:
        raw = env.unwrapped
        real_call = raw.hub.call

        def starved_call(calls):
            return [dataclasses.replace(r, text=STARVED, error=TOOL_ERROR) for r in real_call(calls)]

        raw.hub.call = starved_call
        traj = run_episode(env, BrowserReferencePolicy(), seed=3)
        assert traj.void and traj.score is None and traj.termination == "tool_timeout", traj.termination
        raw.hub.call = real_call
        assert run_episode(env, BrowserReferencePolicy(), seed=4).score == 1.0  # a new session next time


@needs_browser
def test_the_reference_policy_presses_a_covered_button_from_the_keyboard():
    """Seed 85001 of click-test-2: MiniWoB++ put button TWO over the middle of ONE, the click on ONE times out
    (TWO intercepts it: the page's reason, so an error observation), and the policy presses ONE from the keyboard."""
    from aworld_gym.envs.browser.reference import BrowserReferencePolicy

    with browser_env() as env:
        traj = run_episode(env, BrowserReferencePolicy(), seed=85001, options={"task_id": "click-test-2"})
    calls = [(r["name"], r["error"]) for t in traj.turns for r in t["tool_results"]]
    assert calls == [("browser_click", TOOL_ERROR), ("browser_type", None)], calls
    assert "intercepts pointer events" in traj.turns[0]["tool_results"][0]["text"]
    assert traj.status == "ok" and traj.score == 1.0
