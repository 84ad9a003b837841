"""GAIA-v0 under chaos: each episode first makes one hostile tool call at random (a path out of the attachments, a
missing file, a loopback or ``file:`` URL, a program that loops or fork-bombs the sandbox, wrong arguments, a tool
that does not exist), then solves its task by the reference plan. The hostile call must come back as the error it
should be, and the task must still be solved: one bad call does not break the env. Used by
``tests/envs/gaia/test_gaia_chaos.py`` (short) and ``benchmarks/soak.py`` (long).
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from types import SimpleNamespace
from typing import Any

from aworld_gym.envs.gaia.reference import GAIAReferencePolicy
from aworld_gym.rollout.engines import AsyncEngine
from aworld_gym.rollout.stream import stream
from tests.chaos import close_shared_sandboxes, descendants, left_running, lost_episodes, sample, sample_at

# fault -> (tool, arguments, a phrase its result must show (lower case), the error kind it must carry)
GAIA_FAULTS: dict[str, tuple[str, dict[str, Any], str, str | None]] = {
    "none": ("list_files", {}, "", None),
    "traversal": ("read_file", {"path": "../../../../etc/passwd"}, "", "tool_error"),
    "missing": ("read_file", {"path": "no-such-file.txt"}, "", "tool_error"),
    "loopback": ("fetch_url", {"url": "http://127.0.0.1:9/secret"}, "", "tool_error"),
    "file-url": ("fetch_url", {"url": "file:///etc/passwd"}, "", "tool_error"),
    "loop": ("run_python", {"code": "while True:\n    pass"}, "wall-clock", None),
    "fork-bomb": (
        "run_python",
        {"code": "import os\nwhile True:\n    os.fork()"},
        "blockingioerror",
        None,
    ),  # the pids limit stops it
    "bad-args": ("read_file", {"file": 3}, "unknown argument", "bad_arguments"),
    "unknown-tool": ("no_such_tool", {}, "", "unknown_tool"),
}


class GAIAChaosPolicy(GAIAReferencePolicy):
    """One random hostile call on the first turn, then the task's reference plan."""

    name = "gaia-chaos"

    def __init__(self, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rng = random.Random(seed)
        self.fault = "none"

    def decide(self, env: Any) -> str:
        if env.turn == 0:
            self.fault = self.rng.choice(list(GAIA_FAULTS))
            tool, args, _, _ = GAIA_FAULTS[self.fault]
            return f"<tool_call>{json.dumps({'name': tool, 'arguments': args})}</tool_call>"
        # The plan, as if the hostile turn had not happened.
        return super().decide(SimpleNamespace(task=env.task, turn=env.turn - 1, turns=env.turns[1:]))


def fault_of(record: dict[str, Any]) -> str:
    """Which fault an episode injected, read back from its first action."""
    first = record["turns"][0]["action"] if record["turns"] else ""
    for name, (tool, args, _, _) in GAIA_FAULTS.items():
        if json.dumps({"name": tool, "arguments": args}) in first:
            return name
    return "unknown"


def run_gaia(episodes: int, concurrency: int, exec_timeout_s: float = 3.0) -> dict[str, Any]:
    """GAIA-v0 episodes over the bundled sample set, each after one hostile call; checks every record."""
    seen: Counter[tuple[str, int]] = Counter()
    injected: Counter[str] = Counter()
    mismatches: list[str] = []
    unsolved: list[str] = []
    samples: dict[str, dict[str, float]] = {"start": sample()}
    before = descendants()
    episode_seeds: Counter[int] = Counter()
    seeds = iter(range(10**6))
    t0 = time.perf_counter()
    n = 0
    for record in stream("AWorld/GAIA-v0", lambda: GAIAChaosPolicy(next(seeds)), episodes=episodes,
                         engine=AsyncEngine(concurrency),
                         env_kwargs={"exec_timeout_s": exec_timeout_s, "max_turns": 8}):  # fmt: skip
        n += 1
        seen[(record["task_id"], record["sample"])] += 1
        episode_seeds[record["seed"]] += 1
        fault = fault_of(record)
        injected[fault] += 1
        _, _, phrase, kind = GAIA_FAULTS.get(fault, ("", {}, "?", "?"))
        results = record["turns"][0].get("tool_results") or [] if record["turns"] else []
        text = (results[0]["text"] if results else "no result").lower()
        got = results[0].get("error") if results else "no result"
        if got != kind or phrase not in text or "\x00" in text:
            mismatches.append(f"{record['task_id']} ({fault}): expected {kind}/{phrase!r}, got {got}: {text[:160]}")
        if record.get("score") != 1.0:
            unsolved.append(f"{record['task_id']} ({fault}): {record.get('termination')} {record.get('error', '')}")
        sample_at(samples, n, episodes)
    wall = time.perf_counter() - t0
    samples["end"] = sample()
    close_shared_sandboxes()
    left = left_running(before)
    return {"episodes": episodes, "records": n, "wall_s": wall, "lost": lost_episodes(episode_seeds, episodes),
            "doubled": [k for k, c in seen.items() if c > 1], "injected": dict(injected), "mismatches": mismatches,
            "unsolved": unsolved, "samples": samples, "left_running": left,
            "orphans": [p["pid"] for p in left]}  # fmt: skip
