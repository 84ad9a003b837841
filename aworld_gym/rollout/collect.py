"""Collect many episodes concurrently and stream their trajectories to a sink as each one finishes.

Built on :class:`~aworld_gym.rollout.stream.Rollout`: the engine (``AsyncEngine`` in-process, ``RayEngine`` on a
cluster) runs the episodes; each record (or each complete GRPO group, when the env has group reward hooks) is
written as soon as it is ready. Episodes are keyed by ``(task_id, sample)``: with ``group_size=G`` each task runs G
samples in a row (a GRPO group); ``resume=True`` skips the keys already in the output and never writes one twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

import aworld_gym  # noqa: F401 - registers the ids
from aworld_gym.base.errors import last_line
from aworld_gym.core.pass_at_k import pass_table
from aworld_gym.core.trajectory import VOID, Termination, Trajectory
from aworld_gym.rollout.engines import Engine
from aworld_gym.rollout.envs import EnvLike, MakeEnv
from aworld_gym.rollout.health import ParseHealth
from aworld_gym.rollout.jobs import SUCCESS, Job, is_success, plan_jobs
from aworld_gym.rollout.policies import Policy
from aworld_gym.rollout.sinks import Sink, open_sink
from aworld_gym.rollout.sinks.record_json import clean_record, escape_surrogates
from aworld_gym.rollout.stream import Rollout, make_engine

__all__ = ["Job", "Summary", "check_counts", "collect", "is_success", "plan_jobs"]

log = logging.getLogger(__name__)


def error_of(record: Mapping[str, Any]) -> str:
    """Why an episode failed, in one line: the last line of its error, else (an episode that a tool ended: a crashed
    server, a tool timeout, a call replay-strict never recorded) of its last failed tool call's text, else of its last turn's action error (the env's
    own infrastructure failing, e.g. while it scored the answer)."""
    text = str(record.get("error") or "").strip()
    if not text and record.get("termination") in (Termination.ENV_CRASH, Termination.TOOL_TIMEOUT,
                                                    Termination.CACHE_MISS):  # fmt: skip
        turns = record.get("turns") or []
        results = [r for turn in turns for r in turn.get("tool_results") or [] if r.get("error")]
        text = str(results[-1].get("text") or results[-1]["error"]).strip() if results else ""
        text = text or (str(turns[-1].get("action_error") or "").strip() if turns else "")
    return last_line(text)


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
    statuses: dict[str, int] = field(default_factory=dict)
    engine: str = "async"
    concurrency: int = 1
    path: str | None = None
    # task id -> [samples, successes], overall and per task level (task_meta["level"]), for pass@k
    tasks: dict[str, list[int]] = field(default_factory=dict, repr=False)
    levels: dict[str, dict[str, list[int]]] = field(default_factory=dict, repr=False)
    # termination kind -> the last line of the first error recorded with it: why a run's episodes failed, at a glance
    first_errors: dict[str, str] = field(default_factory=dict)
    # what reading the output back for --resume skipped (a torn last line, lines that are not records), one line each
    notes: list[str] = field(default_factory=list)
    # whether the model calls its tools and its calls parse (rollout/health.py), with its alarm
    health: ParseHealth = field(default_factory=ParseHealth, repr=False)

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
    def void(self) -> int:
        """Episodes that failed for infrastructure reasons (status ``void``: masked in training)."""
        return self.statuses.get(VOID, 0)

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
        if kind != SUCCESS and kind not in self.first_errors and (error := error_of(record)):
            self.first_errors[kind] = escape_surrogates(error)  # printable: a model's lone surrogate cannot end a run
        status = record.get("status") or "unknown"
        self.statuses[status] = self.statuses.get(status, 0) + 1
        self.health.add(record)
        task, ok = str(record.get("task_id")), is_success(record)
        level = (record.get("task_meta") or {}).get("level")
        for counts in (self.tasks, *([self.levels.setdefault(str(level), {})] if level is not None else [])):
            c = counts.setdefault(task, [0, 0])
            c[0] += 1
            c[1] += ok

    def pass_at_k(self) -> dict[str, Any]:
        """pass@k (unbiased estimator) for k = 1 and each power of two up to the samples per task, overall and per
        task level: ``{"overall": {"pass@1": {"value", "tasks"}, ...}, "by_level": {level: {...}}}``. Only the
        episodes recorded by this run count (not those a resumed run skipped)."""

        def table(counts: dict[str, list[int]]) -> dict[str, Any]:
            return pass_table({t: (n, c) for t, (n, c) in counts.items()})

        return {"overall": table(self.tasks), "by_level": {k: table(v) for k, v in sorted(self.levels.items())}}

    def to_dict(self) -> dict[str, Any]:
        return {
            **{k: v for k, v in self.__dict__.items() if k not in ("tasks", "levels", "health")},
            "parse_health": self.health.to_dict(),
            "pass_at_k": self.pass_at_k(),
            "success_rate": self.success_rate,
            "mean_reward": self.mean_reward,
            "mean_turns": self.mean_turns,
            "episodes_per_s": self.episodes_per_s,
            "failures": self.failures,
            "void": self.void,
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as strict JSON (what ``--summary-json`` writes): a NaN or infinite number (a mean of NaN
        rewards) is ``null``, listed under ``_sink_marks`` (see :mod:`~aworld_gym.rollout.sinks.record_json`)."""
        return escape_surrogates(json.dumps(clean_record(self.to_dict()), indent=2, ensure_ascii=False))

    def render(self) -> str:
        failures = ", ".join(f"{k} {v}" for k, v in self.failures.items()) or "none"
        rows = [
            ("episodes", f"{self.recorded}/{self.episodes} recorded" + (f" ({self.skipped} resumed)" if self.skipped else "")),
            ("success rate", f"{100 * self.success_rate:.1f}% ({self.successes}/{self.recorded})"),
            ("mean reward", f"{self.mean_reward:.3f}"),
            ("mean turns", f"{self.mean_turns:.2f}"),
            ("failures", failures),
            ("void", f"{self.void} (infrastructure's fault: masked in training, not scored 0)"),
            ("tool calls", self.health.render()),
            *self._pass_rows(),
            ("throughput", f"{self.episodes_per_s:.2f} episodes/s (wall {self.wall_s:.1f} s, {self.engine}, "
                           f"concurrency {self.concurrency})"),
        ]  # fmt: skip
        if self.path:
            rows.append(("trajectories", self.path))
        rows += [("warning", note) for note in [*self.notes, *self.health.alarms]]
        width = max(len(k) for k, _ in rows)
        lines = [f"{k:<{width}}  {v}" for k, v in rows]
        at = next(i for i, (k, _) in enumerate(rows) if k == "failures") + 1
        lines[at:at] = [f"  first {kind}: {error}" for kind, error in sorted(self.first_errors.items())]
        return "\n".join(lines)

    def _pass_rows(self) -> list[tuple[str, str]]:
        """pass@1 and pass@K rows when tasks have several samples (GRPO groups, ``--group-size K``)."""
        if max((n for n, _ in self.tasks.values()), default=0) < 2:
            return []
        p = self.pass_at_k()

        def line(t: dict[str, Any]) -> str:
            return (
                ", ".join(f"{k} {100 * v['value']:.1f}%" for k, v in t.items())
                + f" ({next(iter(t.values()))['tasks']} tasks)"
            )

        rows = [("pass@k", line(p["overall"]))]
        rows += [(f"  level {level}", line(t)) for level, t in p["by_level"].items() if t]
        return rows


def check_counts(episodes: int, group_size: int = 1, concurrency: int | None = None) -> None:
    """Refuse a count that plans no run (``episodes=0``) or no engine, before anything is made or written."""
    for name, value in (("episodes", episodes), ("group_size", group_size), ("concurrency", concurrency)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be an integer of at least 1, got {value!r}")


def collect(
    env: EnvLike,
    policy: Policy | Callable[[], Policy] | str,
    *,
    episodes: int,
    engine: Engine | str | None = None,
    group_size: int = 1,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    sink: Sink | str | Path | None = None,
    resume: bool = False,
    task_order: str = "cycle",
    progress: bool = True,
    concurrency: int | None = None,
    ray_address: str | None = None,
    ray_actors: int | None = None,
    policy_timeout_s: float | None = None,
    screenshots: str | Path | None = None,
    void_policy: str = "mask",
    retry_void: int | None = None,
    parse_health: ParseHealth | None = None,
) -> Summary:
    """Run ``episodes`` episodes of ``env`` and stream each record to ``sink`` as it finishes.

    Args:
        env: a registered id (``AWorld/Code-v0``; Gymnasium's ``"module:Id"`` imports the module first) or a
            zero-argument factory returning an env, wrappers included (picklable for Ray: a module-level function or
            :class:`~aworld_gym.rollout.envs.MakeEnv`). The engines drive the outermost env on its async face.
        policy: a policy, a picklable zero-argument factory (one policy per slot; required for Ray), or a policy's
            name for an id (``"reference"``: its registered scripted solver; ``"openai"``, ``"hf"``).
        episodes: how many episodes in all, at least 1 (``resume`` counts those already recorded). The counts and
            the env id are checked before ``sink`` is opened: a bad one leaves no file behind.
        engine: ``AsyncEngine(concurrency=..., policy_timeout_s=..., screenshots=...)`` (the default) or
            ``RayEngine(concurrency=..., address=..., actors=...)``; the strings ``"async"`` / ``"ray"`` build one
            from the keywords at the end.
        group_size: samples per task in a row (GRPO groups start G episodes on one task). The env's group reward
            hooks (its own and its wrappers') run on each complete group before its records are written.
        seed: episode ``i`` resets with ``seed + i``.
        env_kwargs: passed to ``gym.make`` (with an id).
        sink: a sink or an output path (``.jsonl`` or ``.parquet``); ``None`` keeps only the summary.
        resume: skip the ``(task_id, sample)`` pairs already in the output.
        task_order: ``"cycle"`` (group ``g`` takes task ``g mod n``) or ``"sample"`` (drawn with ``seed``).
        progress: show a progress bar on stderr.
        concurrency: episodes at once, for an engine given by name (or the default one).
        ray_address: the Ray cluster of ``engine="ray"``.
        ray_actors: the number of Ray actors of ``engine="ray"``.
        policy_timeout_s: a policy turn longer than this ends the episode as ``policy_error``.
        screenshots: a folder for a PNG per step (the in-process engine only).
        void_policy: what a void episode (infrastructure's fault) becomes: ``"mask"`` (recorded with weight 0),
            ``"retry"`` (run again, ``retry_void`` times, default 2) or ``"zero"``.
        retry_void: how many times a void episode is run again.
        parse_health: the run's parse health and its alarm (:class:`~aworld_gym.rollout.health.ParseHealth`: its
            window and thresholds; ``ParseHealth(alarm=False)`` keeps the counts and never warns). Default: a window of
            200 episodes, alarms at 95% of them without a tool call or 20% of their turns failing to parse.
    """
    check_counts(episodes, group_size, concurrency)
    engine = make_engine(engine, concurrency, ray_address, ray_actors, policy_timeout_s, screenshots)
    rollout = Rollout(env, policy, episodes=episodes, engine=engine, group_size=group_size, seed=seed,
                      task_order=task_order, env_kwargs=env_kwargs, void_policy=void_policy,
                      retry_void=retry_void)  # fmt: skip
    if isinstance(rollout.make, MakeEnv) and rollout.make.spec is None:
        gym.spec(rollout.make.env_id)  # not registered: Gymnasium's error (its "Did you mean"), before any file
    if isinstance(sink, str | Path):
        sink = open_sink(sink, resume=resume)
    notes = list(getattr(sink, "notes", None) or [])
    for note in notes:
        log.warning("resume: %s", note)
    rollout.skip = sink.done_keys() if (sink is not None and resume) else set()
    summary: Summary | None = None
    bar = None
    t0 = time.perf_counter()

    def write(trajectories: list[Trajectory]) -> None:
        assert summary is not None
        for traj in trajectories:
            record = traj.to_record()
            if sink is not None:
                sink.write(record)
            summary.add(record)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(
                    success=f"{summary.successes}/{summary.recorded}",
                    eps=f"{summary.recorded / max(time.perf_counter() - t0, 1e-9):.2f}",
                )

    async def run() -> None:
        async for ready in rollout.items():
            write(ready)

    try:
        rollout.open()
        summary = Summary(rollout.env_id, episodes, skipped=len(rollout.jobs) - len(rollout.todo),
                          engine=getattr(engine, "name", type(engine).__name__), concurrency=engine.concurrency,
                          health=parse_health if parse_health is not None else ParseHealth())  # fmt: skip
        summary.path = str(sink.path) if sink is not None else None
        summary.notes = notes
        bar = _progress(len(rollout.todo), progress, rollout.env_id)
        t0 = time.perf_counter()
        asyncio.run(run())
    finally:
        try:  # groups cut short (an interrupted run) still reach the sink, unless the sink itself failed
            if summary is not None and getattr(sink, "failed", None) is None:
                for rest in rollout.leftovers():
                    write(rest)
        finally:  # a sink that failed (a full disk) still lets the envs and the sink close
            if summary is not None:
                summary.wall_s = time.perf_counter() - t0
            if bar is not None:
                bar.close()
            try:
                if sink is not None:
                    sink.close()
            finally:
                rollout.close()
    return summary


def _progress(total: int, enabled: bool, desc: str) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="ep", dynamic_ncols=True)
