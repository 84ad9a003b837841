"""Chaos soak: many MCP-v0 episodes over the hostile stdio server (tests/hostile_server.py), each injecting one
fault at random (a 20 MB reply, a notification flood, a non-JSON line, a reply with a wrong id, a hang, the server
exiting mid-call, an error full of control characters, malformed content) or none, with resource samples along the
way; and Code-v0 episodes running hostile programs in the sandbox. Used by ``tests/mcp/test_soak.py``,
``tests/envs/code/test_code_chaos.py`` (short) and ``benchmarks/soak.py`` (long).
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

from aworld_gym.rollout.engines import AsyncEngine
from aworld_gym.rollout.policies import ScriptedPolicy
from aworld_gym.rollout.stream import stream

ROOT = Path(__file__).resolve().parents[1]
# fault -> (tool, arguments, the error kind its tool result must carry)
FAULTS: dict[str, tuple[str, dict[str, Any], str | None]] = {
    "none": ("ok", {"text": "fine"}, None),
    "huge": ("huge", {"mb": 20}, "tool_error"),
    "flood": ("flood", {"n": 5000}, None),
    "garbage": ("garbage", {}, "timeout"),
    "wrong_id": ("wrong_id", {}, "timeout"),
    "hang": ("hang", {}, "timeout"),
    "die": ("die", {}, "server_died"),
    "nul_error": ("nul_error", {}, "tool_error"),
    "weird": ("weird", {}, "tool_error"),
}


# Faults whose reply takes real work to produce and carry (20 MB; 5,000 notifications): on a loaded machine they may
# reach their timeout first, which still ends the call in time and leaves the session working.
SLOW_UNDER_LOAD = {"huge", "flood"}


def plan(episodes: int, seed: int = 0) -> list[dict[str, Any]]:
    """One task per episode, each naming its fault."""
    rng = random.Random(seed)
    kinds = list(FAULTS)
    faults = [rng.choice(kinds) for _ in range(episodes)]
    return [{"id": f"chaos-{i}", "prompt": f"Fault {f}: call its tool, then answer.", "answer": "done",
             "metadata": {"fault": f}} for i, f in enumerate(faults)]  # fmt: skip


class ChaosPolicy(ScriptedPolicy):
    """Calls the task's fault tool once, then answers."""

    name = "chaos"

    def decide(self, env: Any) -> str:
        import json

        if not any(t.get("tool_results") for t in env.turns):
            tool, args, _ = FAULTS[env.task.metadata["fault"]]
            return f"<tool_call>{json.dumps({'name': tool, 'arguments': args})}</tool_call>"
        return "<answer>done</answer>"


def env_kwargs(tasks: list[dict[str, Any]], timeout: float) -> dict[str, Any]:
    server = {"command": sys.executable, "args": ["-m", "tests.hostile_server"], "cwd": str(ROOT), "timeout": timeout}
    return {"mcp_config": {"mcpServers": {"h": server}}, "tasks": tasks, "max_turns": 4}


def hostile_processes() -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "tests.hostile_server" in cmd:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    found.append(p)
            except psutil.Error:
                continue
    return found


def descendants() -> dict[tuple[int, float], str]:
    """This process's live descendants (zombies excluded): (pid, start time) -> command line. A pid the kernel gave to
    a new process is a new key, so a set difference names the processes, where counts can trade one for another."""
    found = {}
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                found[(p.pid, p.create_time())] = " ".join(p.cmdline())[:200]
        except psutil.Error:
            continue
    return found


def left_running(before: dict[tuple[int, float], str], grace_s: float = 10.0) -> list[dict[str, Any]]:
    """The descendants not in ``before`` (those a part started) that still run after ``grace_s`` to stop: returns as
    soon as none is left. A process that left the tree (reparented to init) is not seen here: the MCP part also looks
    for its servers machine-wide (:func:`hostile_processes`)."""
    deadline = time.monotonic() + grace_s
    while True:
        left = {key: cmd for key, cmd in descendants().items() if key not in before}
        if not left or time.monotonic() > deadline:
            return [{"pid": pid, "started": started, "cmd": cmd} for (pid, started), cmd in sorted(left.items())]
        time.sleep(0.1)


def close_shared_sandboxes() -> None:
    """Close this process's shared sandboxes (their warm zygotes), as the process's exit would: they outlive every env
    by design (``shared_sandbox``), so what still runs after this is what an env left behind."""
    from aworld_gym.sandbox import runner

    runner._close_shared()  # the atexit hook of shared_sandbox; a later env starts a new one


def lost_episodes(seeds: Counter[int], episodes: int) -> list[int]:
    """The episodes with no record: ``stream`` resets episode ``i`` with seed ``i`` (its default seed 0), and its
    record carries that seed."""
    return [i for i in range(episodes) if not seeds[i]]


def sample() -> dict[str, float]:
    me = psutil.Process()
    return {"fds": me.num_fds(), "threads": threading.active_count(), "rss_mb": me.memory_info().rss / 2**20,
            "children": len(me.children(recursive=True))}  # fmt: skip


def sample_at(samples: dict[str, dict[str, float]], n: int, episodes: int) -> None:
    """Take the steady-state samples: after a third of the episodes and after two thirds."""
    if n == episodes // 3:
        samples["one third"] = sample()
    if n == 2 * episodes // 3:
        samples["two thirds"] = sample()


def run(episodes: int, concurrency: int, timeout: float = 1.5, seed: int = 0) -> dict[str, Any]:
    """Run the soak; returns the records' facts, the faults injected and the resource samples."""
    tasks = plan(episodes, seed)
    fault_of = {t["id"]: t["metadata"]["fault"] for t in tasks}
    injected = Counter(fault_of.values())
    seen: Counter[str] = Counter()
    kinds_expected: Counter[str] = Counter()
    kinds_seen: Counter[str] = Counter()
    mismatches: list[str] = []
    slow: Counter[str] = Counter()  # faults that ended by their timeout instead (a 20 MB reply on a loaded machine)
    terminations: Counter[str] = Counter()
    samples: dict[str, dict[str, float]] = {"start": sample()}
    before = descendants()
    t0 = time.perf_counter()
    n = 0
    for record in stream("AWorld/MCP-v0", ChaosPolicy(), episodes=episodes, engine=AsyncEngine(concurrency),
                         env_kwargs=env_kwargs(tasks, timeout)):  # fmt: skip
        n += 1
        tid = record["task_id"]
        seen[tid] += 1
        terminations[record.get("termination") or "none"] += 1
        fault = fault_of[tid]
        want, got, problem = check(record, fault)
        kinds_expected[str(want)] += 1
        kinds_seen[str(got)] += 1
        if problem == "slow":
            slow[fault] += 1
        elif problem:
            mismatches.append(problem)
        sample_at(samples, n, episodes)
    wall = time.perf_counter() - t0
    left = left_running(before)  # closing envs stop their servers
    samples["end"] = sample()
    return {
        "episodes": episodes, "concurrency": concurrency, "records": n, "wall_s": wall,
        "lost": sorted(t for t in fault_of if seen[t] == 0), "doubled": sorted(t for t, c in seen.items() if c > 1),
        "injected": dict(injected), "kinds_expected": dict(kinds_expected), "kinds_seen": dict(kinds_seen),
        "mismatches": mismatches, "timed_out_instead": dict(slow), "terminations": dict(terminations), "samples": samples,
        "left_running": left,
        "orphans": sorted({p.pid for p in hostile_processes()} | {p["pid"] for p in left}), "pid": os.getpid(),
    }  # fmt: skip


def check(record: dict[str, Any], fault: str) -> tuple[str | None, str | None, str | None]:
    """(the error kind the fault's tool result must carry, the kind it carries, what is wrong: None, "slow" for a
    slow fault that ended by its timeout instead, or a line saying what differs)."""
    want = FAULTS[fault][2]
    results = [r for turn in record["turns"] for r in turn.get("tool_results") or []]
    got = results[0]["error"] if results else "no call"
    if got == want:
        return want, got, None
    if got == "timeout" and fault in SLOW_UNDER_LOAD:
        return want, got, "slow"
    text = results[0]["text"][:120] if results else ""
    return want, got, f"{record['task_id']} ({fault}): expected {want}, got {got}: {text}"


def growth(result: dict[str, Any]) -> dict[str, float]:
    """Growth of each sampled resource in steady state: from a third of the episodes to two thirds."""
    s = result["samples"]
    return {k: s["two thirds"][k] - s["one third"][k] for k in s["one third"]}


# ----- Code-v0: hostile code in the sandbox ------------------------------------------------------------------------
# fault -> (the code run with run_python, a phrase its result must show)
CODE_FAULTS: dict[str, tuple[str, str]] = {
    "fine": ("print(sum(range(10)))", "45"),
    "loop": ("while True:\n    pass", "wall-clock"),
    "self-kill": ("import os\nos.kill(os.getpid(), 9)", "SIGKILL"),
    "fork-bomb": ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", "killed"),
    "flood": ("print('x' * 5_000_000)", "truncated"),
    "crash": ("raise RuntimeError('boom')", "RuntimeError: boom"),
    "syntax": ("def f(:\n", "SyntaxError"),
}


class CodeChaosPolicy(ScriptedPolicy):
    """Runs a random hostile program with ``run_python``, then submits the right solution or a broken one."""

    name = "code-chaos"

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.rng = random.Random(seed)
        self.right = True

    def decide(self, env: Any) -> str:
        import json

        from aworld_gym.envs.code.tasks import solution_of

        if not any(t.get("tool_results") for t in env.turns):
            code, _ = CODE_FAULTS[self.rng.choice(list(CODE_FAULTS))]
            self.right = self.rng.random() < 0.5
            return f"<tool_call>{json.dumps({'name': 'run_python', 'arguments': {'code': code}})}</tool_call>"
        solution = solution_of(env.task) if self.right else "def broken(:\n    pass"
        return f"<answer>```python\n{solution}```</answer>"


def run_code(episodes: int, concurrency: int, exec_timeout_s: float = 2.0) -> dict[str, Any]:
    """Code-v0 episodes with hostile programs; each record checked against what its program should have shown."""
    fault_of_code = {code: name for name, (code, _) in CODE_FAULTS.items()}
    seen: Counter[tuple[str, int]] = Counter()
    injected: Counter[str] = Counter()
    mismatches: list[str] = []
    scores: Counter[str] = Counter()
    samples: dict[str, dict[str, float]] = {"start": sample()}
    before = descendants()
    seeds: Counter[int] = Counter()
    t0 = time.perf_counter()
    n = 0
    policies = iter(range(10**6))
    for record in stream("AWorld/Code-v0", lambda: CodeChaosPolicy(next(policies)), episodes=episodes,
                         engine=AsyncEngine(concurrency),
                         env_kwargs={"exec_timeout_s": exec_timeout_s, "max_turns": 4}):  # fmt: skip
        n += 1
        seen[(record["task_id"], record["sample"])] += 1
        seeds[record["seed"]] += 1
        results = [r for turn in record["turns"] for r in turn.get("tool_results") or []]
        calls = [turn["action"] for turn in record["turns"]]
        fault = next((f for code, f in fault_of_code.items() if calls and json_in(code, calls[0])), "unknown")
        injected[fault] += 1
        phrase = CODE_FAULTS.get(fault, ("", "?"))[1]
        if not results or phrase not in results[0]["text"]:
            mismatches.append(f"{record['task_id']} ({fault}): {results[0]['text'][:160] if results else 'no result'}")
        right = bool(calls) and "def broken(" not in calls[-1]
        scores[f"{'right' if right else 'broken'} -> {record.get('score')}"] += 1
        sample_at(samples, n, episodes)
    wall = time.perf_counter() - t0
    samples["end"] = sample()  # the process's shared warm sandbox still up: the steady state's end
    close_shared_sandboxes()
    left = left_running(before)
    return {"episodes": episodes, "records": n, "wall_s": wall, "lost": lost_episodes(seeds, episodes),
            "doubled": [k for k, c in seen.items() if c > 1], "injected": dict(injected), "mismatches": mismatches,
            "scores": dict(scores), "samples": samples, "left_running": left,
            "orphans": [p["pid"] for p in left]}  # fmt: skip


def json_in(code: str, action: str) -> bool:
    import json

    return json.dumps(code)[1:-1] in action
