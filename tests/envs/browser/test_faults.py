"""Browser-v0 under faults, at a small size: 8 envs on two shared browsers (4 contexts each), one of each fault (a
renderer SIGKILLed, a page that hangs, a whole browser SIGKILLed, the Playwright MCP server SIGKILLed). Every episode
a fault reaches ends ``void`` (infrastructure's fault), never with a score; the browser and the server are replaced;
the next round solves everything; after close no process the run started is left (counted exactly)."""

from __future__ import annotations

import asyncio
import secrets

from aworld_gym.envs.browser import browsers
from aworld_gym.envs.browser.faults import RUN_MARKER, browser_folders, browser_processes, count_kinds, run_processes
from aworld_gym.envs.browser.fleet import Fleet, plan_episodes
from aworld_gym.envs.browser.reference import REFERENCE_TASKS
from tests.envs.browser.test_browser import pytestmark as needs_browser
from tests.helpers import wait_until

pytestmark = needs_browser
TASKS = list(REFERENCE_TASKS)


def by_browser(fleet: Fleet) -> dict[str, list[int]]:
    """Env slots per browser (the server's marker)."""
    out: dict[str, list[int]] = {}
    for k, env in enumerate(fleet.envs):
        out.setdefault(env.unwrapped.local_server("browser").marker, []).append(k)
    return out


async def one_round(fleet: Fleet, seed: int, faults: dict[int, str]) -> list:
    return await fleet.run(plan_episodes(fleet.n, 1, TASKS, faults=faults, first_seed=seed))


async def scenario(fleet: Fleet, run: str) -> None:
    await fleet.open()
    try:
        groups = by_browser(fleet)
        assert sorted(len(v) for v in groups.values()) == [4, 4]  # the cap: a second browser for envs 5-8
        (a, a_slots), (b, b_slots) = groups.items()
        servers = {s.marker: s for s in fleet.browsers()}
        old_browser = browser_processes(servers[a])[0]
        b_starts = servers[b].starts

        episodes = await one_round(fleet, 0, {a_slots[0]: "renderer", b_slots[0]: "hang"})
        episodes += await one_round(fleet, 10, {a_slots[1]: "browser"})
        episodes += await one_round(fleet, 20, {b_slots[1]: "server"})
        carried = [e for e in episodes if e.fault]
        injected = sorted(r["fault"] for r in fleet.policy.injected)
        assert injected == ["browser", "hang", "renderer", "server"], (injected, carried)
        assert len(carried) == 4 and all(e.status == "void" and e.score is None for e in carried), carried
        assert all(e.termination in ("env_crash", "tool_timeout") for e in carried), carried
        # an episode in reset when its browser died recovers (a new session, a new browser) and is solved
        assert all(e.status in ("void", "ok") for e in episodes), [e for e in episodes if e.status == "failed"]
        assert all(e.score == 1.0 for e in episodes if e.status == "ok")

        clean = await one_round(fleet, 30, {})  # the next resets replace what the faults killed
        assert [e.status for e in clean] == ["ok"] * 8, clean
        new_browser = browser_processes(servers[a])[0]
        assert new_browser is not None and new_browser != old_browser  # the killed browser was replaced
        assert servers[b].starts == b_starts + 1  # the killed server was restarted (once, for its 4 envs)
        running = count_kinds(run_processes(run, browser_folders()))
        assert running["chromium"] >= 2 * 6 and running["node"] == 2, running  # seen: 2 browsers' zygotes, renderers
    finally:
        await fleet.close()


def test_every_fault_ends_its_episodes_void_the_browser_is_replaced_and_nothing_is_left(monkeypatch):
    run = secrets.token_hex(6)
    monkeypatch.setenv(RUN_MARKER, run)  # every process started from here on carries it
    # browsers of its own: an earlier test's shared browser (same pages, still up) carries no run marker, so the
    # check that the run's processes are seen counted one browser of two in the full suite
    monkeypatch.setattr(browsers, "_pools", {})
    fleet = Fleet(8, {"tasks": TASKS, "contexts_per_browser": 4, "tool_timeout": 30.0})
    asyncio.run(scenario(fleet, run))
    folders = browser_folders()
    assert wait_until(lambda: not run_processes(run, folders), 20), count_kinds(run_processes(run, folders))
