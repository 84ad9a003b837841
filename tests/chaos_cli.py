"""Every fault family in one run: the real ``aworld-gym rollout`` command on Ray actors, its policy a model endpoint
(a local stand-in, :class:`ChaosModel`) that fails at random (429, 500, a non-JSON 200, a dropped connection, a
hang) and otherwise asks for the hostile tool each task names (tests/chaos.py: a 20 MB reply, a notification flood,
garbage, a wrong id, a hang, the server exiting mid-call, ...); Ray actors SIGKILLed while they run episodes; and
the driver itself SIGKILLed once and started again with ``--resume``. Used by ``tests/rollout/test_chaos_cli.py``
(short) and ``benchmarks/soak.py --mixed`` (long).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from tests import chaos
from tests.fake_openai import FakeOpenAI

ROOT = Path(__file__).resolve().parents[1]


class ChaosModel(FakeOpenAI):
    """Plays :class:`tests.chaos.ChaosPolicy` as a model endpoint: the tool of the fault named in the task's prompt,
    then the answer. ``chaos`` (the share of requests that fail) comes from :class:`FakeOpenAI`."""

    def __init__(self) -> None:
        super().__init__()
        self.requests = deque(maxlen=32)  # type: ignore[assignment] - a soak sends thousands

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        question = next(_text(m["content"]) for m in messages if m["role"] == "user")
        fault = re.search(r"Fault (\w+):", question).group(1)
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if any(m["role"] == "assistant" for m in messages):
            message["content"] = "<answer>done</answer>"
            return message
        tool, args, _ = chaos.FAULTS[fault]
        if body.get("tools"):
            message["tool_calls"] = [{"id": "c1", "type": "function",
                                      "function": {"name": tool, "arguments": json.dumps(args)}}]  # fmt: skip
        else:
            message["content"] = f"<tool_call>{json.dumps({'name': tool, 'arguments': args})}</tool_call>"
        return message


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def marked(marker: str) -> list[psutil.Process]:
    """Live processes started by this run (the driver, Ray's, the actors, their servers)."""
    found = []
    for p in psutil.process_iter(["environ"]):
        try:
            if (p.info["environ"] or {}).get("AWORLD_CHAOS_MARKER") == marker and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


def actors_of(driver: int) -> list[psutil.Process]:
    """The driver's Ray episode actors (worker processes titled ``ray::EpisodeWorker...``)."""
    try:
        kids = psutil.Process(driver).children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for p in kids:
        try:
            if "EpisodeWorker" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            continue
    return out


class ActorKiller(threading.Thread):
    """SIGKILLs one of the driver's episode actors (at random) every ``every_s`` seconds, but only once the run has
    recorded an episode since the last kill (``progress``: the records so far). Kills paced by the clock alone starve
    a run on a loaded machine: a fresh actor slower to start than ``every_s`` is killed before it finishes anything,
    so every episode ends as a crash past its retries, which tests the machine's load, not the engine."""

    def __init__(self, every_s: float, progress: Callable[[], int], seed: int = 0) -> None:
        super().__init__(daemon=True)
        self.every_s, self.progress, self.rng = every_s, progress, random.Random(seed)
        self.driver: int | None = None
        self.kills = 0
        self._halt = threading.Event()

    def run(self) -> None:
        last, driver = -1, None  # the records when the last kill was made; the driver they were made under
        while not self._halt.wait(self.every_s):
            if self.driver != driver:  # a new (resumed) driver: its actors first record something
                last, driver = self.progress(), self.driver
            actors = actors_of(self.driver) if self.driver else []
            done = self.progress()
            if actors and done > last:
                try:
                    self.rng.choice(actors).send_signal(signal.SIGKILL)
                    self.kills += 1
                    last = done
                except psutil.Error:
                    continue

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0  # bytes: a line may be half written


def run_mixed(work: Path, episodes: int, concurrency: int = 16, endpoint_faults: float = 0.1,
              kill_every_s: float = 4.0, driver_kill_at: float = 0.4, timeout: float = 1.5) -> dict[str, Any]:  # fmt: skip
    """Run the mixed soak in ``work``; returns what was injected, what was recorded and what was left running."""
    marker = f"chaos-{os.getpid()}-{time.monotonic_ns()}"
    tasks = chaos.plan(episodes)
    fault_of = {t["id"]: t["metadata"]["fault"] for t in tasks}
    (work / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    out = work / "out.jsonl"
    env_kwargs = chaos.env_kwargs(str(work / "tasks.jsonl"), timeout)  # type: ignore[arg-type] - a path
    killer = ActorKiller(kill_every_s, progress=lambda: _lines(out))
    t0 = time.perf_counter()
    with ChaosModel() as model:
        model.chaos, model.chaos_hang_s = endpoint_faults, 2.0
        env = {**os.environ, "AWORLD_CHAOS_MARKER": marker, "RAY_AUTH_MODE": "disabled", "LLM_API_KEY": "k"}
        argv = [str(Path(sys.executable).parent / "aworld-gym"), "rollout", "--env", "AWorld/MCP-v0", "--policy",
                "openai", "--model", "chaos", "--base-url", model.url, "--episodes", str(episodes), "--concurrency",
                str(concurrency), "--ray", "--env-kwargs", json.dumps(env_kwargs), "--out", str(out),
                "--no-progress", "--policy-timeout", "60"]  # fmt: skip
        killer.start()
        driver_kills = 0
        first = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        killer.driver = first.pid
        while first.poll() is None and _lines(out) < driver_kill_at * episodes:
            time.sleep(0.1)
        if first.poll() is None:
            first.send_signal(signal.SIGKILL)  # no chance to close anything
            first.wait(10)
            driver_kills = 1
        killer.driver = None
        written_before_kill = _lines(out)
        # Its Ray processes, actors and servers see it gone and exit.
        deadline = time.monotonic() + 60
        while marked(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        left_after_kill = [p.pid for p in marked(marker)]
        second = subprocess.Popen([*argv, "--resume"], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE)  # fmt: skip
        killer.driver = second.pid
        _, err = second.communicate(timeout=1800)
        killer.stop()
        endpoint = dict(model.injected)
    wall = time.perf_counter() - t0
    deadline = time.monotonic() + 30
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    keys = Counter((r["task_id"], r["sample"]) for r in rows)
    ends = Counter(r.get("termination") or "none" for r in rows)
    mismatches, slow = [], Counter()
    for r in rows:
        end = r.get("termination")
        if end == "env_crash" and "ActorDiedError" in (r.get("error") or ""):
            continue  # its actor was killed (a "die" fault also ends as env_crash, checked as a tool fault below)
        if end == "policy_error":
            continue  # the endpoint failed past the retries; checked below
        _, _, problem = chaos.check(r, fault_of[r["task_id"]])
        if problem == "slow":
            slow[fault_of[r["task_id"]]] += 1
        elif problem:
            mismatches.append(problem)
    policy_errors = [r.get("error") or "" for r in rows if r.get("termination") == "policy_error"]
    return {
        "episodes": episodes, "concurrency": concurrency, "records": len(rows), "wall_s": wall,
        "returncode": second.returncode, "stderr_tail": err.decode()[-2000:],
        "lost": sorted(t for t in fault_of if (t, 0) not in keys), "doubled": sorted(k for k, c in keys.items() if c > 1),
        "injected": {"tool": dict(Counter(fault_of.values())), "endpoint": endpoint, "actor_kills": killer.kills,
                     "driver_kills": driver_kills},
        "written_before_driver_kill": written_before_kill, "left_after_driver_kill": left_after_kill,
        "terminations": dict(ends), "mismatches": mismatches, "timed_out_instead": dict(slow),
        "actor_crashes": sum("ActorDiedError" in (r.get("error") or "") for r in rows), "policy_errors": policy_errors,
        "actor_reruns": sum(int(r.get("actor_attempts") or 1) > 1 for r in rows),
        "orphans": [p.pid for p in marked(marker)],
    }  # fmt: skip
