"""ProcessEngine: episodes in worker processes on this machine (real subprocesses, a real MCP server per env)."""

import asyncio
import functools
import json
import os

import psutil
import pytest

import aworld_gym
from aworld_gym.rollout.collect import collect
from aworld_gym.rollout.engines.process_engine import ProcessEngine
from aworld_gym.rollout.policies.plan import PlanPolicy
from aworld_gym.rollout.stream import stream
from tests.helpers import DiesOncePolicy, DyingPolicy, demo_env_kwargs, registered_ids

ENV = "AWorld/MCP-v0"


class LoudPolicy(PlanPolicy):
    """Prints to stdout and writes to fd 1 at every turn: the engine's frames must not be corrupted."""

    def decide(self, env):
        print("a policy that talks on stdout", flush=True)
        os.write(1, b"\x00\x00\x00\x05junk\n")
        return super().decide(env)


def rows_of(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def descendants() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE}


def test_the_process_engine_collects_everything_once_over_its_workers(tmp_path):
    before = descendants()
    engine = ProcessEngine(concurrency=6, processes=2)
    out = tmp_path / "p.jsonl"
    s = collect(ENV, functools.partial(LoudPolicy, latency_s=0.05), episodes=12, engine=engine,
                env_kwargs=demo_env_kwargs(6), sink=out, progress=False)  # fmt: skip
    rows = rows_of(out)
    assert (s.recorded, s.successes, s.engine) == (12, 12, "process")
    assert sorted((r["task_id"], r["sample"]) for r in rows) == sorted({(r["task_id"], r["sample"]) for r in rows})
    assert engine.last_run.workers == 2 and engine.last_run.workers_lost == 0 and engine.last_run.duplicates == 0
    assert descendants() - before == set()  # workers and their servers gone


def test_engine_by_name_and_settings():
    from aworld_gym.rollout.stream import make_engine

    e = make_engine("process", 16, None, None, 5.0, None)
    assert isinstance(e, ProcessEngine) and (e.concurrency, e.policy_timeout_s) == (16, 5.0)
    assert ProcessEngine(concurrency=8, processes=3).plan(100) == [3, 3, 2]
    assert ProcessEngine(concurrency=8, processes=4).plan(2) == [1, 1]  # never more workers than episodes
    try:
        make_engine("process", 4, "auto", None, None, None)
    except ValueError as exc:
        assert "not settings of engine='process'" in str(exc)
    else:
        raise AssertionError("ray_address accepted by the process engine")


def test_a_killed_workers_jobs_are_run_again(tmp_path):
    out, engine = tmp_path / "k.jsonl", ProcessEngine(concurrency=4, processes=2)
    s = collect(ENV, functools.partial(DiesOncePolicy, str(tmp_path / "died")), episodes=10, engine=engine,
                env_kwargs=demo_env_kwargs(10), sink=out, progress=False)  # fmt: skip
    rows, stats = rows_of(out), engine.last_run
    assert len({(r["task_id"], r["sample"]) for r in rows}) == len(rows) == 10  # every episode once
    assert s.successes == 10 and s.failures == {}  # the lost episodes re-ran: none recorded as env_crash
    add3 = next(r for r in rows if r["task_id"] == "add-3")
    assert add3["worker_attempts"] == 2 and stats.workers_lost == 1 and stats.duplicates == 0
    assert stats.attempts[3] == 2 and 3 in stats.reruns and stats.workers == 3  # a new worker took the slots


def test_a_job_that_always_kills_its_worker_is_given_up_after_the_retries(tmp_path):
    out, engine = tmp_path / "k.jsonl", ProcessEngine(concurrency=2, processes=2, job_retries=1)
    s = collect(ENV, DyingPolicy, episodes=10, engine=engine, env_kwargs=demo_env_kwargs(10), sink=out,
                progress=False)  # fmt: skip
    rows, stats = rows_of(out), engine.last_run
    assert len({(r["task_id"], r["sample"]) for r in rows}) == len(rows) == 10
    crashed = [r for r in rows if r["termination"] == "env_crash"]
    assert [r["task_id"] for r in crashed] == ["add-3"] and crashed[0]["status"] == "void"
    assert "worker process died 2 times" in crashed[0]["error"] and crashed[0]["worker_attempts"] == 2
    assert s.successes == 9 and stats.workers_lost == 2 and stats.gave_up == [3] and list(stats.reruns) == [3]


def test_leaving_a_stream_early_stops_the_workers():
    before = descendants()
    engine = ProcessEngine(concurrency=4, processes=2)
    with stream(ENV, functools.partial(PlanPolicy, latency_s=0.2), episodes=40, engine=engine,
                env_kwargs=demo_env_kwargs(8)) as s:  # fmt: skip
        first = next(iter(s))
    assert first.score == 1.0
    s.close()
    assert descendants() - before == set()


def test_an_unpicklable_factory_fails_every_job_with_the_reason(tmp_path):
    import threading

    lock = threading.Lock()  # cloudpickle cannot pickle a lock

    def policy():
        with lock:
            return PlanPolicy()

    try:
        collect(ENV, policy, episodes=2, engine=ProcessEngine(concurrency=2, processes=1),
                env_kwargs=demo_env_kwargs(2), progress=False)  # fmt: skip
    except TypeError as exc:
        assert "lock" in str(exc)
    else:
        raise AssertionError("an unpicklable policy factory was accepted")


class StrayCancelPolicy(PlanPolicy):
    """Raises a CancelledError nobody asked for on task add-3 (a cancellation that escaped the layer it was for)."""

    async def aact(self, env, obs, info):
        if env.task.id == "add-3":
            raise asyncio.CancelledError
        return self.act(env, obs, info)


@pytest.mark.timeout(120)  # before the fix, the run waited for ever for the record its dead worker never sent
@pytest.mark.parametrize("engine", ["async", "process"])
def test_a_stray_cancellation_ends_its_episode_as_env_crash_not_the_run(engine, tmp_path):
    out = tmp_path / "s.jsonl"
    s = collect(ENV, StrayCancelPolicy, episodes=6, concurrency=3, engine=engine, env_kwargs=demo_env_kwargs(6),
                sink=out, progress=False)  # fmt: skip
    rows = rows_of(out)
    assert sorted(r["task_id"] for r in rows) == [f"add-{i}" for i in range(6)]
    crashed = [r for r in rows if r["termination"] == "env_crash"]
    assert [r["task_id"] for r in crashed] == ["add-3"] and crashed[0]["status"] == "void"
    assert "CancelledError" in crashed[0]["error"] and s.successes == 5


class EnvironPolicy(PlanPolicy):
    """Writes its worker's admission variables to ``folder/<pid>`` (what the engine gave the worker process)."""

    def __init__(self, folder: str, **kw):
        super().__init__(**kw)
        self.folder = folder

    def decide(self, env):
        seen = {k: os.environ.get(k) for k in ("LAB_SLOTS", "AWORLD_GYM_BROWSER_ACTIVE")}
        with open(os.path.join(self.folder, str(os.getpid())), "w") as f:
            json.dump(seen, f)
        return super().decide(env)


def lab_share(processes: int, cpus: float | None) -> dict[str, str]:
    return {"LAB_SLOTS": f"12/{processes}"}


def test_the_workers_get_the_envs_declared_share_and_no_other(tmp_path, monkeypatch):
    monkeypatch.delenv("AWORLD_GYM_BROWSER_ACTIVE", raising=False)
    monkeypatch.delenv("LAB_SLOTS", raising=False)
    ids = {"Lab/Shared-v0": lab_share, "Lab/Plain-v0": None}
    with registered_ids(*ids):
        for env_id, share in ids.items():
            aworld_gym.register(env_id, "aworld_gym.core.env:MCPEnv", worker_share=share)
            folder = tmp_path / env_id.replace("/", "_")
            folder.mkdir()
            s = collect(env_id, functools.partial(EnvironPolicy, str(folder)), episodes=4, progress=False,
                        engine=ProcessEngine(concurrency=2, processes=2), env_kwargs=demo_env_kwargs(4))  # fmt: skip
            seen = [json.loads(p.read_text()) for p in folder.iterdir()]
            assert s.successes == 4 and len(seen) == 2  # both workers wrote
            slots = "12/2" if share else None  # the share of one of 2 workers; an env without one: nothing
            assert all(x == {"LAB_SLOTS": slots, "AWORLD_GYM_BROWSER_ACTIVE": None} for x in seen), seen
