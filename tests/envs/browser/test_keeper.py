"""One env on a shared browser: its Chromium lives across episodes (the keeper session), and after the browser is
SIGKILLed the new one lives across episodes too. Without the keeper Playwright MCP closed the browser with the last
context, at every reset, and launched a new one at the next (about 0.35 CPU-seconds and 0.25 s per reset on 2 cores)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym

import aworld_gym  # noqa: F401
from aworld_gym.envs.browser.faults import browser_processes
from aworld_gym.envs.browser.keeper import EVERY_S, Keeper
from aworld_gym.envs.browser.playwright import processes_with
from aworld_gym.envs.browser.reference import REFERENCE_TASKS
from tests.envs.browser.test_browser import pytestmark as needs_browser
from tests.helpers import wait_until

TASKS = list(REFERENCE_TASKS)[:3]


def browsers_over_resets(env, server, n: int, first_seed: int) -> list[int | None]:
    seen = []
    for i in range(n):
        env.reset(seed=first_seed + i, options={"task_id": TASKS[i % len(TASKS)]})
        seen.append(browser_processes(server)[0])
    return seen


@needs_browser
def test_one_envs_browser_lives_across_episodes_and_after_a_crash():
    env = gym.make("AWorld/Browser-v0", tasks=TASKS)
    try:
        env.reset(seed=0, options={"task_id": TASKS[0]})
        server = env.unwrapped.local_server("browser")
        assert wait_until(lambda: server.keeper is not None and server.keeper.pokes >= 1, timeout=30)
        first = browser_processes(server)[0]
        assert first is not None
        assert browsers_over_resets(env, server, 4, 1) == [first] * 4  # one Chromium, four episodes

        os.kill(first, signal.SIGKILL)  # the whole browser: the next reset opens a new session on a new one
        assert wait_until(lambda: browser_processes(server)[0] != first, timeout=30)
        env.reset(seed=10, options={"task_id": TASKS[0]})
        assert browser_processes(server)[0] not in (None, first)
        time.sleep(EVERY_S)  # resets poke the keeper at most this often
        pokes = server.keeper.pokes
        env.reset(seed=11, options={"task_id": TASKS[1]})
        assert wait_until(lambda: server.keeper.pokes > pokes, timeout=30)  # the keeper's context on the new browser
        second = browser_processes(server)[0]
        assert second not in (None, first)
        assert browsers_over_resets(env, server, 3, 12) == [second] * 3
    finally:
        env.close()


def test_processes_are_found_by_any_of_several_folders(tmp_path):
    """The scan behind the orphan counts: a process whose command line names the second folder is found too (it
    read the command line once per folder, so only the first folder's processes were ever found)."""
    folders = [tmp_path / "a", tmp_path / "b"]
    procs = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(f / "profile")]) for f in folders
    ]
    try:  # a child shows its own command line only once it has exec'd: wait for that, then scan
        assert wait_until(lambda: all(str(f).encode() in Path(f"/proc/{p.pid}/cmdline").read_bytes()
                                      for p, f in zip(procs, folders, strict=True)), timeout=30)  # fmt: skip
        found = processes_with(None, tuple(f"{f}/" for f in folders))
        assert {p.pid for p in procs} <= set(found)
        assert set(processes_with(None, (f"{folders[1]}/",))) & {p.pid for p in procs} == {procs[1].pid}
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_keeper_that_cannot_connect_fails_quietly_and_closes(tmp_path, caplog):
    """The keeper is an optimisation: a server it cannot reach is a logged failure (a warning, once), never an
    exception for the env that poked it, and close() returns at once and stops later pokes."""
    keeper = Keeper("http://127.0.0.1:9/mcp", str(tmp_path / "no.sock"))
    with caplog.at_level("WARNING", logger="aworld_gym.envs.browser.keeper"):
        keeper.poke().result(60)  # returns normally: the failure stays inside the keeper
        keeper.poke().result(60)
    assert keeper.pokes == 0 and keeper.failures == 2
    assert sum("browser keeper session failed" in r.getMessage() for r in caplog.records) == 1
    keeper.close(timeout=5)
    assert keeper.poke() is None  # closed: nothing more is sent
