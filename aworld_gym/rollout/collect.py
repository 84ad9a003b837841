"""Collect many episodes concurrently and stream their trajectories to a sink as each one finishes.

Two engines behind one :func:`collect`:

- ``"async"`` (in-process): ``concurrency`` envs on one asyncio loop, each pulling the next episode as soon as its
  last one ends (no lock-step) — the right engine for latency-bound work (model endpoints, remote tools);
- ``"ray"``: a pool of Ray actors spread over the cluster's nodes, each running several envs the same way; a dead
  actor loses only its in-flight episodes (recorded as truncated, ``env_crash``) and is replaced.

Episodes are keyed by ``(task_id, sample)``: with ``group_size=G`` each task runs G samples in a row (a GRPO
group); ``resume=True`` skips the keys already in the output and never writes one twice.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

import aworld_gym  # noqa: F401 - registers the ids
from aworld_gym.core.faces import check_async
from aworld_gym.core.rewards import apply_group_hooks
from aworld_gym.rollout.envs import EnvLike, env_factory, env_name, run_coroutine
from aworld_gym.rollout.policies import Policy
from aworld_gym.rollout.runner import EpisodeRecorder, arun_episode
from aworld_gym.rollout.sinks import Sink, open_sink
from aworld_gym.wrappers.reward_shaping import group_hooks

SUCCESS = "answer"


@dataclass(frozen=True)
class Job:
    """One episode to run: which task, which sample of it, which seed."""

    index: int
    task_index: int
    sample: int
    seed: int
    group: int = 0


@dataclass
class Summary:
    """What a collection run did."""

    env_id: str
    episodes: int
    recorded: int = 0
    skipped: int = 0
    successes: int = 0
    total_reward: float = 0.0
    total_turns: int = 0
    wall_s: float = 0.0
    terminations: dict[str, int] = field(default_factory=dict)
    engine: str = "async"
    concurrency: int = 1
    path: str | None = None

    @property
    def success_rate(self) -> float:
        return self.successes / self.recorded if self.recorded else 0.0

    @property
    def mean_reward(self) -> float:
        return self.total_reward / self.recorded if self.recorded else 0.0

    @property
    def mean_turns(self) -> float:
        return self.total_turns / self.recorded if self.recorded else 0.0

    @property
    def episodes_per_s(self) -> float:
        return self.recorded / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def failures(self) -> dict[str, int]:
        """Episodes that did not end with an answer, by kind (turn_limit, env_crash, policy_error, ...)."""
        return {k: v for k, v in sorted(self.terminations.items()) if k != SUCCESS}

    def add(self, record: Mapping[str, Any]) -> None:
        self.recorded += 1
        self.successes += is_success(record)
        self.total_reward += float(record.get("reward") or 0.0)
        self.total_turns += int(record.get("num_turns") or 0)
        kind = record.get("termination") or "unknown"
        self.terminations[kind] = self.terminations.get(kind, 0) + 1

    def to_dict(self) -> dict[str, Any]:
        return {
            **{k: v for k, v in self.__dict__.items()},
            "success_rate": self.success_rate,
            "mean_reward": self.mean_reward,
            "mean_turns": self.mean_turns,
            "episodes_per_s": self.episodes_per_s,
            "failures": self.failures,
        }

    def render(self) -> str:
        failures = ", ".join(f"{k} {v}" for k, v in self.failures.items()) or "none"
        rows = [
            ("episodes", f"{self.recorded}/{self.episodes} recorded" + (f" ({self.skipped} resumed)" if self.skipped else "")),
            ("success rate", f"{100 * self.success_rate:.1f}% ({self.successes}/{self.recorded})"),
            ("mean reward", f"{self.mean_reward:.3f}"),
            ("mean turns", f"{self.mean_turns:.2f}"),
            ("failures", failures),
            ("throughput", f"{self.episodes_per_s:.2f} episodes/s (wall {self.wall_s:.1f} s, {self.engine}, "
                           f"concurrency {self.concurrency})"),
        ]  # fmt: skip
        if self.path:
            rows.append(("trajectories", self.path))
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def is_success(record: Mapping[str, Any]) -> bool:
    """An episode succeeded when its task score is 1 (all tests passed, the answer matched)."""
    score = record.get("score")
    return score is not None and float(score) >= 1.0 - 1e-9


def plan_jobs(n_tasks: int, episodes: int, group_size: int, seed: int, task_order: str) -> list[Job]:
    """Episode ``i`` belongs to group ``i // G``; groups take tasks in order (``cycle``) or drawn with ``seed``."""
    import numpy as np

    groups = math.ceil(episodes / group_size)
    if task_order == "cycle":
        order = [g % n_tasks for g in range(groups)]
    else:
        order = [int(x) for x in np.random.default_rng(seed).integers(n_tasks, size=groups)]
    seen: Counter[int] = Counter()
    jobs = []
    for i in range(episodes):
        g, k = divmod(i, group_size)
        task = order[g]
        if k == 0:
            seen[task] += 1
        jobs.append(Job(index=i, task_index=task, sample=(seen[task] - 1) * group_size + k, seed=seed + i, group=g))
    return jobs


def collect(
    env: EnvLike,
    policy: Policy | Callable[[], Policy],
    *,
    episodes: int,
    concurrency: int = 8,
    group_size: int = 1,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    sink: Sink | str | Path | None = None,
    resume: bool = False,
    task_order: str = "cycle",
    engine: str = "async",
    ray_address: str | None = None,
    ray_actors: int | None = None,
    policy_timeout_s: float | None = None,
    progress: bool = True,
    screenshots: str | Path | None = None,
) -> Summary:
    """Run ``episodes`` episodes of ``env`` and stream each record to ``sink`` as it finishes.

    Args:
        env: a registered id (``AWorld/Code-v0``) or a zero-argument factory returning an env, wrappers included
            (picklable for Ray: a module-level function or :class:`~aworld_gym.rollout.envs.MakeEnv`). The engines
            drive the outermost env on its async face.
        policy: a policy, or a picklable zero-argument factory (one policy per worker; required for Ray).
        episodes: how many episodes in all (``resume`` counts those already recorded).
        concurrency: episodes running at once.
        group_size: samples per task in a row (GRPO groups start G episodes on one task). The env's group reward
            hooks (its own and its wrappers') run on each complete group before its records are written.
        seed: episode ``i`` resets with ``seed + i``.
        env_kwargs: passed to ``gym.make`` (with an id).
        sink: a sink or an output path (``.jsonl`` or ``.parquet``); ``None`` keeps only the summary.
        resume: skip the ``(task_id, sample)`` pairs already in the output.
        task_order: ``"cycle"`` (group ``g`` takes task ``g mod n``) or ``"sample"`` (drawn with ``seed``).
        engine: ``"async"`` (in-process) or ``"ray"``.
        ray_address: Ray cluster to join (``None``: a new local one; ``"auto"``: the running one).
        ray_actors: Ray actors in the pool (default: the cluster's CPUs, at most ``concurrency``).
        policy_timeout_s: a policy turn that takes longer ends its episode as ``policy_error``.
        progress: show a progress bar on stderr.
        screenshots: a folder for a PNG per step of envs made with ``render_mode="rgb_array"`` (in-process
            engine; off by default).
    """
    if episodes < 1 or concurrency < 1 or group_size < 1:
        raise ValueError("episodes, concurrency and group_size must be at least 1")
    if task_order not in ("cycle", "sample"):
        raise ValueError("task_order must be 'cycle' or 'sample'")
    if engine not in ("async", "ray"):
        raise ValueError("engine must be 'async' or 'ray'")
    if screenshots is not None and engine != "async":
        raise ValueError("screenshots are written by the in-process engine only (engine='async')")
    make = env_factory(env, env_kwargs)
    if isinstance(sink, str | Path):
        sink = open_sink(sink, resume=resume)
    factory = _factory(policy)
    probe = make()  # validates the config early and tells how many tasks there are
    t0 = time.perf_counter()
    summary: Summary | None = None
    bar = None
    groups: Groups | None = None

    def write(record: dict[str, Any]) -> None:
        assert summary is not None
        if sink is not None:
            sink.write(record)
        summary.add(record)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(
                success=f"{summary.successes}/{summary.recorded}",
                eps=f"{summary.recorded / max(time.perf_counter() - t0, 1e-9):.2f}",
            )

    def on_record(job: Job, record: dict[str, Any]) -> None:  # the Ray engine's driver loop
        assert groups is not None
        for rec in groups.score(groups.add(job, record)):
            write(rec)

    async def on_record_async(job: Job, record: dict[str, Any]) -> None:  # in-process: hooks off the loop
        assert groups is not None
        ready = groups.add(job, record)
        if ready and groups.rubric is not None:
            ready = await asyncio.to_thread(groups.score, ready)
        for rec in ready:
            write(rec)

    try:
        env_id = env_name(env, probe)
        check_async(probe)
        tasks = probe.unwrapped.tasks
        jobs = plan_jobs(len(tasks), episodes, group_size, seed, task_order)
        done = sink.done_keys() if (sink is not None and resume) else set()
        todo = [j for j in jobs if (tasks[j.task_index].id, j.sample) not in done]
        groups = Groups(group_hooks(probe), group_size, jobs, todo)
        summary = Summary(env_id, episodes, skipped=len(jobs) - len(todo), engine=engine, concurrency=concurrency)
        summary.path = str(sink.path) if sink is not None else None
        bar = _progress(len(todo), progress, env_id)
        t0 = time.perf_counter()
        if engine == "async":
            asyncio.run(
                _collect_async(
                    env_id, make, factory, todo, concurrency, on_record_async, policy_timeout_s, probe, screenshots
                )
            )
        else:
            probe.close()
            from aworld_gym.rollout.ray_engine import collect_ray

            collect_ray(
                env_id, make, factory, todo, concurrency, on_record, policy_timeout_s, ray_address, ray_actors,
                task_ids=tasks.ids,
            )  # fmt: skip
    finally:
        if groups is not None:
            for rec in groups.score(groups.flush()):  # groups cut short (an interrupted run) still reach the sink
                write(rec)
        if summary is not None:
            summary.wall_s = time.perf_counter() - t0
        if bar is not None:
            bar.close()
        if sink is not None:
            sink.close()
        probe.close()
    return summary


class Groups:
    """Holds a GRPO group's records until the group is complete, then hands them over to be scored by the group
    reward hooks (each record says ``group_complete``: False for a group cut short, or split by a resume)."""

    def __init__(self, rubric: Any, group_size: int, jobs: list[Job], todo: list[Job]) -> None:
        self.rubric = rubric if group_size > 1 else None
        self.size: Counter[int] = Counter(j.group for j in jobs)
        self.expected: Counter[int] = Counter(j.group for j in todo)
        self.held: dict[int, list[dict[str, Any]]] = {}
        self.group_of: dict[int, int] = {}

    def add(self, job: Job, record: dict[str, Any]) -> list[dict[str, Any]]:
        """The records that are ready: this one alone (no group hooks), or its whole group once complete."""
        if self.rubric is None:
            return [record]
        held = self.held.setdefault(job.group, [])
        held.append(record)
        self.group_of[id(record)] = job.group
        if len(held) < self.expected[job.group]:
            return []
        return self.held.pop(job.group)

    def flush(self) -> list[dict[str, Any]]:
        out = []
        for key in list(self.held):
            out += self.held.pop(key)
        return out

    def score(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.rubric is None or not records:
            return records
        by_group: dict[int, list[dict[str, Any]]] = {}
        for rec in records:
            by_group.setdefault(self.group_of.pop(id(rec)), []).append(rec)
        for g, members in by_group.items():
            apply_group_hooks(self.rubric, members, run_coroutine)
            for rec in members:
                rec["group_complete"] = len(members) == self.size[g]
        return records


def _factory(policy: Policy | Callable[[], Policy]) -> Callable[[], Policy]:
    if isinstance(policy, type) or not hasattr(policy, "act"):
        return policy  # type: ignore[return-value]
    return lambda: policy  # type: ignore[return-value]


async def run_job(
    env: gym.Env[str, str],
    policy: Policy,
    env_id: str,
    job: Job,
    policy_timeout_s: float | None,
    screenshots: str | Path | None = None,
) -> dict[str, Any]:
    """Run ``job`` (its task, seed and sample) as one episode on ``env``."""
    return await arun_episode(
        env,
        policy,
        env_id=env_id,
        seed=job.seed,
        options={"task_index": job.task_index},
        sample=job.sample,
        policy_timeout_s=policy_timeout_s,
        screenshots=screenshots,
    )


def failed_record(
    env_id: str, job: Job, task_id: str | None, kind: str, exc: BaseException, policy: Any = None
) -> dict[str, Any]:
    """The record of an episode that never ran (its env could not be created, its actor died)."""
    rec = EpisodeRecorder(env_id, policy, job.seed, job.sample)
    rec.record["task_id"] = task_id
    rec.failed(kind, exc)
    return rec.finish()


async def _collect_async(
    env_id: str,
    make: Callable[[], gym.Env[str, str]],
    factory: Callable[[], Policy],
    jobs: list[Job],
    concurrency: int,
    on_record: Callable[[Job, dict[str, Any]], Awaitable[None]],
    policy_timeout_s: float | None,
    first_env: gym.Env[str, str] | None = None,
    screenshots: str | Path | None = None,
) -> None:
    queue = deque(jobs)
    tasks = first_env.unwrapped.tasks if first_env is not None else None

    async def worker(k: int) -> None:
        env = None
        policy = factory()
        try:
            while queue:
                job = queue.popleft()  # taken before any await: workers never race for the last job
                task_id = tasks[job.task_index].id if tasks is not None else None
                if env is None:
                    try:
                        env = await asyncio.to_thread(make)
                    except Exception as exc:  # noqa: BLE001 - this episode is recorded as failed
                        await on_record(job, failed_record(env_id, job, task_id, "env_error", exc, policy))
                        continue
                record = await run_job(env, policy, env_id, job, policy_timeout_s, screenshots)
                if record.get("task_id") is None:
                    record["task_id"] = task_id  # reset failed before the env could name its task
                await on_record(job, record)
                if record["termination"] == "env_error":  # a broken env is replaced, not reused
                    await _aclose(env)
                    env = None
        finally:
            if env is not None:
                await _aclose(env)

    await asyncio.gather(*(worker(k) for k in range(min(concurrency, len(jobs)))))


async def _aclose(env: gym.Env[str, str]) -> None:
    try:
        await env.aclose()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - closing a broken env must not stop the run
        pass


def _progress(total: int, enabled: bool, desc: str) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="ep", dynamic_ncols=True)
