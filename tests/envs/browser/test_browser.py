"""AWorld/Browser-v0 on a real headless Chromium through the real @playwright/mcp server (no mocks)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import gymnasium as gym
import numpy as np
import psutil
import pytest

import aworld_gym
from aworld_gym.base.errors import ConfigError
from aworld_gym.envs.browser.env import AGENT_TOOLS
from aworld_gym.envs.browser.reference import REFERENCE_TASKS, BrowserReferencePolicy
from aworld_gym.envs.browser.tasks import miniwob_tasks, task_names
from tests.helpers import ROOT, child_pids, wait_until

pytestmark = pytest.mark.skipif(
    shutil.which("chromium") is None
    or shutil.which("node") is None
    or not (ROOT / "node_modules/@playwright/mcp/cli.js").is_file(),
    reason="needs Chromium (apt) and @playwright/mcp (npm); `make test` installs both",
)


@contextlib.contextmanager
def browser_env(**kwargs):
    env = aworld_gym.async_face(gym.make("AWorld/Browser-v0", **kwargs))
    try:
        yield env
    finally:
        env.close()


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def solve(env, seed: int, task: str) -> tuple[float, dict]:
    """Run the reference policy on ``task``; returns (score, last info)."""
    policy = BrowserReferencePolicy()
    obs, info = env.reset(seed=seed, options={"task_id": task})
    done = False
    while not done:
        obs, _, terminated, truncated, info = env.step(policy.act(env.unwrapped, obs, info))
        done = terminated or truncated
    return info.get("score"), info


def chromium_pids() -> set[int]:
    out = set()
    for pid in child_pids():
        try:
            if "chromium" in psutil.Process(pid).name():
                out.add(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def test_the_task_list_comes_from_the_miniwob_package():
    names = task_names()
    assert len(names) >= 120 and {"click-button", "enter-text", "login-user"} <= set(names)
    assert [t.id for t in miniwob_tasks("click-button")] == ["click-button"]
    with pytest.raises(ConfigError, match="unknown MiniWoB"):
        miniwob_tasks(["click-button", "no-such-task"])


def test_the_reference_policy_solves_its_tasks_through_the_tools():
    assert len(REFERENCE_TASKS) >= 10
    with browser_env(tasks=list(REFERENCE_TASKS)) as env:
        scores = {task: solve(env, seed, task)[0] for seed, task in enumerate(REFERENCE_TASKS)}
    assert all(s is not None and s >= 0.9 for s in scores.values()), scores


def test_first_observation_has_the_instruction_and_a_snapshot_and_reset_is_seeded():
    with browser_env(task="enter-text") as env:
        obs, info = env.reset(seed=7)
        utterance = env.unwrapped.utterance
        assert "Enter" in utterance and "Task:" not in obs  # the instruction once: the page's own, in its snapshot
        assert utterance.split('"')[0].strip() in obs and "127.0.0.1" not in obs
        assert "textbox [ref=e" in obs and 'button "Submit"' in obs
        assert sorted(t["function"]["name"] for t in info["tools"]) == sorted(AGENT_TOOLS)
        assert env.reset(seed=7)[0] == obs  # same seed, same problem, same refs (fresh context per episode)
        assert env.reset(seed=8)[0] != obs


def test_check_env_passes():
    from gymnasium.utils.env_checker import check_env

    with browser_env(task="click-button", render_mode="rgb_array") as env:
        check_env(env.unwrapped, skip_render_check=False)


def test_wrong_action_gets_the_page_reward_and_terminates():
    with browser_env(task="click-test-2") as env:
        env.reset(seed=0)
        wrong = "TWO" if "ONE" in env.unwrapped.utterance else "ONE"
        obs, reward, terminated, truncated, info = env.step(call("browser_click", target=f'button:text-is("{wrong}")'))
        assert terminated and not truncated
        assert info["score"] == -1.0 and reward == -1.0  # MiniWoB's raw reward for a wrong click
        assert info["task_state"]["done"] is True


def test_unsafe_tools_and_file_arguments_are_not_available():
    with browser_env(task="click-button") as env:
        env.reset(seed=0)
        for tool in ("browser_evaluate", "browser_run_code_unsafe", "browser_file_upload", "browser_tabs"):
            obs, *_, info = env.step(call(tool, function="() => 1"))
            assert info["tool_results"][0]["error"] == "unknown_tool", tool
        obs, *_, info = env.step(call("browser_snapshot", filename="/tmp/aworld-leak.yml"))
        assert info["tool_results"][0]["error"] == "bad_arguments"
        assert not Path("/tmp/aworld-leak.yml").exists()


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "data:text/html,<h1>hi</h1>",
        "javascript:alert(1)",
        "https://example.com/",
        "http://127.0.0.1:1/",
        "http://localhost:{port}/miniwob/click-button.html",
        "http://user:pw@127.0.0.1:{port}/miniwob/click-button.html",
    ],
)
def test_navigation_off_the_task_site_is_refused(url):
    with browser_env(task="click-button") as env:
        env.reset(seed=0)
        port = env.unwrapped.origin.rsplit(":", 1)[1]
        obs, reward, terminated, truncated, info = env.step(call("browser_navigate", url=url.format(port=port)))
        assert info["tool_results"][0]["error"] == "refused"
        assert "is refused: only pages of the task's site" in obs
        assert not (terminated or truncated) and reward < 0
        assert info["task_state"]["url"].endswith("/miniwob/click-button.html")  # the page did not change


def test_navigating_within_the_site_is_allowed_but_ends_the_task():
    with browser_env(task="click-button") as env:
        env.reset(seed=0)
        url = env.unwrapped.origin + "/miniwob/enter-text.html"
        obs, reward, terminated, truncated, info = env.step(call("browser_navigate", url=url))
        assert info["tool_results"][0]["error"] is None
        assert terminated and info["score"] == 0.0 and "left the task's page" in obs


def test_envs_share_one_browser_with_isolated_contexts():
    a = gym.make("AWorld/Browser-v0", task="enter-text")
    b = gym.make("AWorld/Browser-v0", task="enter-text")
    try:
        a.reset(seed=1)
        b.reset(seed=2)
        assert a.unwrapped.utterance != b.unwrapped.utterance
        # b types into its own page; a's page is untouched
        b.step(call("browser_type", target="#tt", text="typed in b"))
        a_obs = a.step(call("browser_snapshot"))[0]
        assert "typed in b" not in a_obs
        browsers = [p for p in chromium_pids() if "--type=" not in " ".join(psutil.Process(p).cmdline())]
        assert len(browsers) == 1  # one Chromium for both envs
        assert solve(a, 3, "enter-text")[0] == 1.0 and solve(b, 4, "enter-text")[0] == 1.0
    finally:
        a.close()
        b.close()


def test_resets_and_steps_wait_for_a_turn_at_the_admission_gate():
    """``active_browsers=1``: while another env drives a browser (the test holds the one slot), a reset and a step
    wait at the gate, on both faces, and go on when the slot is given back."""
    with browser_env(task="click-test", active_browsers=1) as env:
        gate = env.unwrapped.admission
        assert gate.limit == 1

        def blocked(work) -> None:
            gate.acquire_sync()
            done = threading.Event()
            worker = threading.Thread(target=lambda: (work(), done.set()))
            worker.start()
            assert not done.wait(1.5) and gate.waiting == 1  # nothing reached the browser yet
            gate.release()
            assert done.wait(60)
            worker.join()

        blocked(lambda: env.reset(seed=1))
        blocked(lambda: env.step(call("browser_snapshot")))
        assert gate.held == 0 and gate.queued >= 2

    async def on_one_loop() -> float:
        env = aworld_gym.async_face(gym.make("AWorld/Browser-v0", task="click-test", active_browsers=1))
        try:
            for work in (lambda: env.areset(seed=1), lambda: env.astep(call("browser_click", target="button"))):
                await gate.acquire()
                running = asyncio.create_task(work())
                await asyncio.sleep(1.5)
                assert not running.done() and gate.waiting == 1
                gate.release()
                out = await asyncio.wait_for(running, 60)
            return out[1]
        finally:
            await env.aclose()

    assert asyncio.run(on_one_loop()) == 1.0  # click-test solved through the gate


def test_killing_chromium_mid_episode_truncates_with_env_crash_and_the_next_reset_works():
    with browser_env(task="click-checkboxes") as env:
        env.reset(seed=0)
        victims = chromium_pids()
        assert victims
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        obs, reward, terminated, truncated, info = env.step(call("browser_click", target="#subbtn"))
        assert truncated and not terminated and info["truncation_reason"] == "env_crash"
        score, _ = solve(env, 1, "click-checkboxes")
        assert score == 1.0


def test_killing_the_playwright_server_mid_episode_truncates_and_the_next_reset_reconnects():
    with browser_env(task="click-checkboxes") as env:
        env.reset(seed=0)
        server = env.unwrapped.local_server("browser")
        starts = server.starts
        for pid in server.pids:  # the server first: its browser may be gone (its pipe closed) before its turn
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        obs, reward, terminated, truncated, info = env.step(call("browser_click", target="#subbtn"))
        assert truncated and info["truncation_reason"] == "env_crash"
        assert solve(env, 1, "click-checkboxes")[0] == 1.0  # a new server on the same URL, a new session
        assert server.starts == starts + 1


def test_when_the_playwright_server_dies_its_browser_goes_too_and_reset_restarts_both():
    with browser_env(task="click-test") as env:
        env.reset(seed=0)
        server = env.unwrapped.local_server("browser")
        old = chromium_pids()

        def alive() -> set[int]:
            out = set()
            for pid in old:
                with contextlib.suppress(psutil.NoSuchProcess):
                    if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                        out.add(pid)
            return out

        os.kill(server.proc.pid, signal.SIGKILL)  # only Node; Chromium talks to it over a pipe
        server.proc.wait()
        assert wait_until(lambda: not alive(), 20)  # no orphaned browser
        env.reset(seed=1)
        assert solve(env, 2, "click-test")[0] == 1.0


def test_a_reload_by_the_agent_ends_the_task_with_score_zero():
    with browser_env(task="enter-text") as env:
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step(call("browser_navigate", url=env.unwrapped.page_url))
        assert terminated and not truncated and info["score"] == 0.0 and "task is over" in obs


@pytest.mark.parametrize("browser", ["shared", "own"])
def test_no_browser_process_is_left_after_close(browser):
    before = child_pids()
    env = gym.make("AWorld/Browser-v0", task="click-test", browser=browser)
    env.reset(seed=0)
    assert chromium_pids()
    env.close()
    assert wait_until(lambda: not chromium_pids() and not (child_pids() - before), 20), child_pids() - before


def test_render_rgb_array_is_a_screenshot():
    with browser_env(task="click-button", render_mode="rgb_array") as env:
        env.reset(seed=0)
        frame = env.render()
        assert isinstance(frame, np.ndarray) and frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
        assert frame.shape[0] >= 200 and frame.shape[1] >= 160 and len(np.unique(frame.reshape(-1, 3), axis=0)) > 5


def test_collect_runs_eight_at_once_and_can_store_screenshots(tmp_path):
    from aworld_gym.rollout.collect import collect

    out = tmp_path / "runs.jsonl"
    summary = collect(
        "AWorld/Browser-v0",
        BrowserReferencePolicy,
        episodes=8,
        concurrency=8,
        env_kwargs={"tasks": list(REFERENCE_TASKS[:8]), "render_mode": "rgb_array"},
        sink=out,
        screenshots=tmp_path / "shots",
        progress=False,
    )
    assert summary.recorded == 8 and summary.successes == 8
    records = [json.loads(line) for line in out.read_text().splitlines()]
    for rec in records:
        shots = [rec["screenshot"]] + [t["screenshot"] for t in rec["turns"]]
        assert all(Path(s).is_file() and Path(s).read_bytes()[:4] == b"\x89PNG" for s in shots)
    # screenshots are off by default
    summary = collect("AWorld/Browser-v0", BrowserReferencePolicy, episodes=1, sink=tmp_path / "b.jsonl",
                      env_kwargs={"task": "click-test"}, progress=False)  # fmt: skip
    rec = json.loads((tmp_path / "b.jsonl").read_text())
    assert "screenshot" not in rec and all("screenshot" not in t for t in rec["turns"])


def test_cli_rollout_with_the_reference_policy(tmp_path):
    from aworld_gym.cli import main

    summary = tmp_path / "summary.json"
    argv = ["rollout", "--env", "AWorld/Browser-v0", "--policy", "reference", "--concurrency", "8",
            "--episodes", "8", "--out", str(tmp_path / "r.jsonl"), "--summary-json", str(summary), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    data = json.loads(summary.read_text())
    assert data["recorded"] == 8 and data["success_rate"] == 1.0 and data["episodes_per_s"] > 0


def test_scrolling_by_an_amount_and_going_back():
    """browser_mouse_wheel scrolls (the task goes on); browser_navigate_back leaves the task page, which ends the
    task with score 0 (not an env crash); no coordinate click is exposed."""
    with browser_env(task="click-button") as env:
        _, info = env.reset(seed=0)
        names = {t["function"]["name"] for t in info["tools"]}
        assert {"browser_mouse_wheel", "browser_navigate_back"} <= names and "browser_mouse_click_xy" not in names
        _, _, terminated, truncated, info = env.step(call("browser_mouse_wheel", deltaX=0, deltaY=300))
        assert info["tool_results"][0]["error"] is None and not (terminated or truncated)
        _, _, terminated, truncated, info = env.step(call("browser_navigate_back"))
        assert terminated and not truncated and info["score"] == 0.0, info.get("truncation_reason")


@pytest.mark.parametrize("browser", ["shared", "own"])
def test_a_process_that_used_a_browser_leaves_no_folder_behind(browser):
    """The shared browser's socket folder and every output folder are removed by the time the process exits.
    (A short temp folder: a Unix socket's path must stay under 108 bytes.)"""
    script = (
        "import gymnasium as gym, aworld_gym\n"
        f"env = gym.make('AWorld/Browser-v0', task='click-test', browser={browser!r})\n"
        "env.reset(seed=0)\nenv.close()\n"
    )
    tmp = Path(tempfile.mkdtemp(prefix="awg"))
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp)},
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    left = [p.name for p in tmp.iterdir() if p.name.startswith("aworld-playwright")]
    shutil.rmtree(tmp, ignore_errors=True)
    assert left == []


def test_envs_made_and_closed_again_and_again_keep_nothing_between_them():
    """Closing the last env stops the page server and the browser; the next env starts them again, the page server
    on a new port, so a new browser server for that site. Each cycle used to keep the old servers' log files (and
    their descriptors) and the browser's socket folder until exit; now nothing of them is kept while no env is
    open, and the descriptors stay as many."""
    script = (
        "import gc, json, os, gymnasium as gym, aworld_gym\n"
        "for i in range(3):\n"
        "    env = gym.make('AWorld/Browser-v0', task='click-test')\n"
        "    env.reset(seed=i)\n"
        "    env.close()\n"
        "    del env; gc.collect()\n"
        "    print(json.dumps({'fds': len(os.listdir('/proc/self/fd')), 'left': sorted(n for n in\n"
        "        os.listdir(os.environ['TMPDIR']) if n.startswith('aworld-'))}), flush=True)\n"
    )
    tmp = Path(tempfile.mkdtemp(prefix="awg"))
    try:
        done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp)},
                              capture_output=True, text=True, timeout=180)  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["left"] for r in rows] == [[], [], []]
    assert len({r["fds"] for r in rows}) == 1, rows
