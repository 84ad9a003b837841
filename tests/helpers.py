"""Shared test helpers: real MCP servers on real transports."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from aworld_gym.mcp.transports.shared import free_port, wait_port

ROOT = Path(__file__).resolve().parents[1]
EVERYTHING_JS = ROOT / "node_modules/@modelcontextprotocol/server-everything/dist/index.js"

TASKS = [
    {"id": "add", "prompt": "What is 2 + 3? Use the add tool.", "answer": "5"},
    {"id": "mul", "prompt": "What is 6 * 7? Use the multiply tool.", "answer": "42"},
    {"id": "echo", "prompt": "Echo the word 'héllo'.", "answer": "héllo"},
]


def stdio_config(name: str = "demo") -> dict:
    return {"mcpServers": {name: {"command": sys.executable, "args": ["-m", "aworld_gym.mcp.demo_server"]}}}


def http_config(url: str, name: str = "demo") -> dict:
    return {"mcpServers": {name: {"type": "streamable-http", "url": url, "headers": {"X-Test": "1"}}}}


@contextlib.contextmanager
def http_demo_server(transport: str = "streamable-http") -> Iterator[str]:
    """Run the demo server over streamable HTTP (or SSE) on 127.0.0.1; yields its URL."""
    args = ["-m", "aworld_gym.mcp.demo_server", "--transport", transport]
    with http_server(args, "sse" if transport == "sse" else "mcp") as url:
        yield url


@contextlib.contextmanager
def http_server(args: list[str], path: str = "mcp") -> Iterator[str]:
    """Run ``python <args> --port N`` (an HTTP MCP server on 127.0.0.1); yields ``http://127.0.0.1:N/<path>``."""
    with listening(lambda port: [sys.executable, *args, "--port", str(port)], 60) as port:
        yield f"http://127.0.0.1:{port}/{path}"


@contextlib.contextmanager
def listening(command: Callable[[int], list[str]], timeout: float) -> Iterator[int]:
    """Run ``command(port)`` (a server on a free port the kernel picked) until it listens; yields the port, and
    stops the server after.

    Should another process (a parallel test worker) take the port before the server binds it, the server exits and
    is started again on another port."""
    for _ in range(3):
        port = free_port()
        argv = command(port)
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            up = wait_port(port, proc, timeout)
            exited = proc.poll() is not None
            if up:
                yield port
                return
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        if not exited:  # neither listening nor gone: not a lost port
            break
    raise RuntimeError(f"the server {argv} did not start")


@contextlib.contextmanager
def redis_server(folder: Path, password: str | None = None) -> Iterator[str]:
    """Debian's ``redis-server`` on 127.0.0.1 (a free port, no persistence, its files in ``folder``); yields its URL.

    Skips the test when the server is not installed (``make`` installs it)."""
    import shutil

    import pytest

    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (make setup installs Debian's package)")
    auth = ["--requirepass", password] if password else []

    def command(port: int) -> list[str]:
        return [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(folder), "--daemonize", "no", "--loglevel", "warning", *auth]  # fmt: skip

    with listening(command, 30) as port:
        yield f"redis://{':' + password + '@' if password else ''}127.0.0.1:{port}/0"


def child_pids() -> set[int]:
    """Live descendants of this test process (zombies excluded)."""
    import psutil

    out = set()
    for p in psutil.Process(os.getpid()).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if p.status() != psutil.STATUS_ZOMBIE:
                out.add(p.pid)
    return out


def meeting_server(n: int, timeout: float = 60.0):
    """A factory of in-process demo servers that also have ``meet``: a call returns "met" once ``n`` calls (to any
    of the servers it made) are waiting at once, "alone" after ``timeout`` s. Calls that met were in flight
    together, however slow the machine: concurrency shown without a clock."""
    import threading

    from aworld_gym.mcp.demo_server import build_server

    barrier = threading.Barrier(n, timeout=timeout)

    def build():
        server = build_server()

        @server.tool()
        def meet() -> str:
            """Wait for the other callers."""
            try:
                barrier.wait()
            except threading.BrokenBarrierError:
                return "alone"
            return "met"

        return server

    return build


def wait_until(pred, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def plan_tasks(n: int = 8, crash_every: int = 0) -> list[dict]:
    """Calculator tasks for AWorld/MCP-v0 with the demo server, each with a reference plan (PlanPolicy)."""
    tasks = []
    for i in range(n):
        turns = [[{"name": "add", "arguments": {"a": i, "b": 1}}]]
        if crash_every and i % crash_every == crash_every - 1:
            turns = [[{"name": "crash", "arguments": {}}], *turns]
        tasks.append(
            {
                "id": f"add-{i}",
                "prompt": f"What is {i} + 1? Use the add tool.",
                "answer": f"{i + 1}.0",
                "reference": {"turns": turns, "pattern": r"([\d.]+)\s*$"},
            }
        )
    return tasks


def demo_env_kwargs(n: int = 8, transport: str = "inprocess", crash_every: int = 0) -> dict:
    """gym.make kwargs of AWorld/MCP-v0 on the demo server with plan tasks."""
    from aworld_gym.mcp.demo_server import build_server

    config = {"mcpServers": {"demo": build_server}} if transport == "inprocess" else stdio_config()
    return {"mcp_config": config, "tasks": plan_tasks(n, crash_every)}


def bonus_hook(ctx) -> dict:
    """A shaping hook: +10 on the answer step."""
    return {"bonus": 10.0} if ctx.answer is not None else {}


def shaped_env(n: int = 4):
    """AWorld/MCP-v0 (demo server, plan tasks) inside RewardShaping(bonus): a picklable env factory."""
    import gymnasium as gym

    import aworld_gym  # noqa: F401
    from aworld_gym.wrappers import RewardShaping

    return RewardShaping(gym.make("AWorld/MCP-v0", **demo_env_kwargs(n)), [bonus_hook])


# The components of a solved plan task in shaped_env: the task score and the bonus, on the answer step.
SHAPED = {"task": 1.0, "bonus": 10.0}


def count_group(group) -> list[dict]:
    """A group reward hook: each member gets the group's size and its rank by reward (for the group tests)."""
    order = sorted(range(len(group)), key=lambda i: -group[i]["reward"])
    return [{"group_size": float(len(group)), "rank": float(order.index(i))} for i in range(len(group))]


def grouped_env(n: int = 4):
    """shaped_env plus a group hook (weight 0.1)."""
    from aworld_gym.core.rewards import Hook
    from aworld_gym.wrappers import RewardShaping

    return RewardShaping(shaped_env(n), [Hook(count_group, on="group", weight=0.1)])


class TextScript:
    """A text policy that sends ``texts[k]`` on turn ``k`` (the last one from then on): the same turns on every face."""

    name = "script"

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def act(self, env, obs, info) -> str:
        return self.texts[min(len(env.turns), len(self.texts) - 1)]


def scripted_tokens(chat, texts: list[str], task_id: str, env_kwargs: dict, budget: int = 400):
    """The driver's token-mode Trajectory of AWorld/MCP-v0 on ``task_id`` with the model turns ``texts``: what every
    token-exact face must reproduce."""
    import gymnasium as gym

    from aworld_gym.trainers.seam.token_rollout import scripted_episode

    env = gym.make("AWorld/MCP-v0", **env_kwargs)
    try:
        return scripted_episode(env, chat, texts, options={"task_id": task_id}, budget=budget)
    finally:
        env.close()


# Scripted model turns on the demo server's add tasks (task add-2: 2 + 1): a call, a call that kills the server, the answer.
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 1}}\n</tool_call>'
CRASH = '<tool_call>\n{"name": "crash", "arguments": {}}\n</tool_call>'
ANSWER = "<answer>3.0</answer>"


def _plan_policy() -> type:
    from aworld_gym.rollout.policies.plan import PlanPolicy

    return PlanPolicy


class DyingPolicy(_plan_policy()):  # type: ignore[misc]
    """Kills its own worker process (a Ray actor, an engine's worker) whenever it meets task add-3."""

    def decide(self, env):
        if env.task.id == "add-3":
            os._exit(1)
        return super().decide(env)


class DiesOncePolicy(_plan_policy()):  # type: ignore[misc]
    """Kills its worker process the first time any worker meets task add-3 (a marker file says it happened)."""

    def __init__(self, marker: str, **kw):
        super().__init__(**kw)
        self.marker = marker

    def decide(self, env):
        if env.task.id == "add-3" and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        return super().decide(env)


@contextlib.contextmanager
def registered_ids(*ids: str) -> Iterator[None]:
    """What the block registers under ``ids`` is dropped at its end (Gymnasium's registration and aworld_gym's)."""
    import gymnasium as gym

    from aworld_gym.core import registry

    try:
        yield
    finally:
        for env_id in ids:
            gym.registry.pop(env_id, None)
            registry.DECLARED.discard(env_id)
            for table in (registry.REFERENCE_POLICIES, registry.WORKER_SHARES):
                table.pop(env_id, None)


@contextlib.contextmanager
def logged(logger: logging.Logger, level: int = logging.WARNING):
    """The messages ``logger`` (a module's own logger object) emits at ``level`` or above, caught on that very object:
    AReaL's ``getLogger`` replaces the logging root and manager, so after its tests in the same process a record of
    ours never reaches pytest's ``caplog`` (which listens on the new root)."""
    said: list[str] = []
    handler = logging.Handler(level)
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    before, logger.disabled = logger.disabled, False
    logger.addHandler(handler)
    try:
        yield said
    finally:
        logger.removeHandler(handler)
        logger.disabled = before
