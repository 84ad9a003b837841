"""Collect many episodes concurrently and stream their trajectories to a sink.

Each worker owns one env and pulls the next episode as soon as its last one ends (no lock-step). This
thread-pool collector is the in-process engine; the async and Ray engines plug in behind the same
:func:`collect` signature.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

import aworld_gym  # noqa: F401 - registers the ids
from aworld_gym.rollout.policies import Policy
from aworld_gym.rollout.runner import run_episode
from aworld_gym.rollout.sinks import JSONLSink, Sink


@dataclass
class Summary:
    """What a collection run did."""

    env_id: str
    episodes: int
    recorded: int
    successes: int
    mean_reward: float
    wall_s: float
    terminations: dict[str, int] = field(default_factory=dict)
    path: str | None = None

    @property
    def success_rate(self) -> float:
        return self.successes / self.recorded if self.recorded else 0.0

    @property
    def episodes_per_s(self) -> float:
        return self.recorded / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "success_rate": self.success_rate, "episodes_per_s": self.episodes_per_s}

    def render(self) -> str:
        ends = ", ".join(f"{k} {v}" for k, v in sorted(self.terminations.items()))
        lines = [
            f"episodes      {self.recorded}/{self.episodes} recorded ({ends})",
            f"success rate  {100 * self.success_rate:.1f}% ({self.successes}/{self.recorded})",
            f"mean reward   {self.mean_reward:.3f}",
            f"throughput    {self.episodes_per_s:.2f} episodes/s (wall {self.wall_s:.1f} s)",
        ]
        if self.path:
            lines.append(f"trajectories  {self.path}")
        return "\n".join(lines)


def is_success(record: Mapping[str, Any]) -> bool:
    """An episode succeeded when its task score is 1 (all tests passed, the answer matched)."""
    score = record.get("score")
    return score is not None and float(score) >= 1.0 - 1e-9


def collect(
    env_id: str,
    policy: Policy | Callable[[], Policy],
    *,
    episodes: int,
    concurrency: int = 8,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    sink: Sink | str | Path | None = None,
    task_order: str = "cycle",
    progress: bool = True,
) -> Summary:
    """Run ``episodes`` episodes of ``env_id`` with ``concurrency`` envs and stream records to ``sink``.

    Args:
        env_id: a registered id (``AWorld/Code-v0``).
        policy: a policy, or a zero-argument factory (one policy per worker).
        episodes: how many episodes to record.
        concurrency: how many envs run at once (each in its own worker).
        seed: episode ``i`` resets with ``seed + i``.
        env_kwargs: passed to ``gym.make``.
        sink: a sink, or a JSONL path; ``None`` keeps records only in the summary counts.
        task_order: ``"cycle"`` (episode ``i`` takes task ``i mod n``) or ``"sample"`` (the env's seeded RNG).
        progress: show a progress bar on stderr.
    """
    if episodes < 1 or concurrency < 1:
        raise ValueError("episodes and concurrency must be at least 1")
    if task_order not in ("cycle", "sample"):
        raise ValueError("task_order must be 'cycle' or 'sample'")
    if isinstance(sink, str | Path):
        sink = JSONLSink(sink)
    kwargs = dict(env_kwargs or {})
    jobs: queue.Queue[int] = queue.Queue()
    for i in range(episodes):
        jobs.put(i)
    lock = threading.Lock()
    rewards: list[float] = []
    ends: Counter[str] = Counter()
    successes = 0
    errors: list[BaseException] = []
    bar = _progress(episodes, progress, env_id)
    n_tasks: list[int] = []

    def worker() -> None:
        nonlocal successes
        try:
            env = gym.make(env_id, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported after the run
            errors.append(exc)
            return
        is_factory = isinstance(policy, type) or not hasattr(policy, "act")
        pol = policy() if is_factory else policy  # type: ignore[operator]
        try:
            with lock:
                if not n_tasks:
                    n_tasks.append(len(env.unwrapped.tasks))
            while True:
                try:
                    i = jobs.get_nowait()
                except queue.Empty:
                    return
                options = {"task_index": i % n_tasks[0]} if task_order == "cycle" else None
                record = run_episode(env, pol, env_id=env_id, seed=seed + i, options=options, sample=i)
                if sink is not None:
                    sink.write(record)
                with lock:
                    rewards.append(record["reward"])
                    ends[record["termination"] or "unknown"] += 1
                    successes += is_success(record)
                    if bar is not None:
                        bar.update(1)
                        bar.set_postfix(success=f"{successes}/{len(rewards)}")
        finally:
            env.close()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, name=f"rollout-{k}") for k in range(min(concurrency, episodes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    if sink is not None:
        sink.close()
    if errors and not rewards:
        raise errors[0]
    return Summary(
        env_id=env_id,
        episodes=episodes,
        recorded=len(rewards),
        successes=successes,
        mean_reward=sum(rewards) / len(rewards) if rewards else 0.0,
        wall_s=wall,
        terminations=dict(ends),
        path=str(sink.path) if sink is not None else None,
    )


def _progress(total: int, enabled: bool, desc: str) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="ep", dynamic_ncols=True)
