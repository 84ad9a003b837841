"""A simulated 3-node Ray cluster: actors land on every node, sized from its CPUs, the actors of every node share
one tool cache (a real Redis server), and a rollout that loses a node mid-run records every episode exactly once, the
lost node's jobs re-run on the others, and leaves no process."""

import json
import os
import sys
import threading

import psutil
import pytest

from aworld_gym.rollout.collect import collect
from aworld_gym.rollout.policies.plan import PlanPolicy
from tests.helpers import plan_tasks, redis_server, wait_until

ENV = "AWorld/MCP-v0"
EPISODES = 48


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    os.environ["RAY_AUTH_MODE"] = "disabled"
    if ray.is_initialized():
        ray.shutdown()
    fast = {"health_check_period_ms": 500, "health_check_timeout_ms": 500, "health_check_failure_threshold": 4}
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                      "_system_config": fast})  # fmt: skip
    workers = [c.add_node(num_cpus=1) for _ in range(2)]
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    yield ray, c, workers
    ray.shutdown()
    c.shutdown()


def live(pids):
    out = []
    for p in pids:
        try:
            if psutil.Process(p).status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def test_actors_land_on_every_node_one_per_cpu(cluster):
    ray, _, _ = cluster
    from aworld_gym.rollout.engines.ray_engine import RayEngine

    with RayEngine(concurrency=6, address="auto") as engine:
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        placed = [m.node for m in engine.pool.members]
        where = {ray.get(m.handle.ready.remote())[0] for m in engine.pool.members}
        assert sorted(placed) == sorted(alive) and where == alive  # one actor per CPU: one per node here
        assert [m.slots for m in engine.pool.members] == [2, 2, 2]


def test_the_actors_of_every_node_share_one_tool_cache(cluster, tmp_path):
    """Actors on all three nodes record into one Redis store; then, with the tool server's command gone, a strict
    replay on the cluster and one in the driver give the same episodes: every node's calls were kept where every
    process reads them."""
    ray, _, _ = cluster
    from aworld_gym.mcp.cache.store import open_store
    from aworld_gym.rollout.engines.ray_engine import RayEngine

    def run(command: str, mode: str, name: str, engine=None) -> list:
        server = {"command": command, "args": ["-m", "aworld_gym.mcp.demo_server"], "pool": 1}
        kw = {"mcp_config": {"mcpServers": {"demo": server}}, "tasks": plan_tasks(6), "tool_cache": {"store": url,
              "mode": mode}}  # fmt: skip
        out = tmp_path / f"{name}.jsonl"
        collect(ENV, PlanPolicy(), episodes=12, engine=engine, env_kwargs=kw, sink=out, progress=False)
        rows = [json.loads(x) for x in out.read_text().splitlines()]
        return sorted(((r["task_id"], r["sample"]), [t.get("observation") for t in r["turns"]], r["reward"],
                       r["termination"]) for r in rows)  # fmt: skip

    with redis_server(tmp_path) as url:
        with RayEngine(concurrency=6, address="auto") as engine:
            recorded = run(sys.executable, "record", "record", engine)
            nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
            assert set(engine.last_run.recorded_on.values()) == nodes  # every node recorded some of the episodes
            assert len(recorded) == 12 and all(end == "answer" and reward == 1.0 for *_, reward, end in recorded)
            assert open_store(url).stats()["calls"] == 12  # one add per episode, each kept once
            assert run("/nonexistent/python", "replay-strict", "strict", engine) == recorded
            assert set(engine.last_run.recorded_on.values()) == nodes
        # the driver, no actor of any node, replays what the actors recorded (a miss would end an episode void)
        assert run("/nonexistent/python", "replay-strict", "driver") == recorded


def test_a_node_removed_mid_run_loses_no_episode_and_doubles_none(cluster, tmp_path):
    ray, c, workers = cluster
    from aworld_gym.rollout.engines.ray_engine import RayEngine

    # One stdio calculator per actor process ("pool": 1): the lost node's server must go with it.
    server = {"command": sys.executable, "args": ["-m", "aworld_gym.mcp.demo_server"], "pool": 1}
    kw = {"mcp_config": {"mcpServers": {"demo": server}}, "tasks": plan_tasks(8)}
    out, done = tmp_path / "n.jsonl", {}
    victim = workers[1].node_id
    with RayEngine(concurrency=12, address="auto") as engine:

        def run():
            done["summary"] = collect(ENV, PlanPolicy(latency_s=0.3), episodes=EPISODES, engine=engine,
                                      env_kwargs=kw, sink=out, progress=False)  # fmt: skip

        t = threading.Thread(target=run)
        t.start()
        assert wait_until(lambda: out.exists() and len(out.read_text().splitlines()) >= 8, 120)

        def serving() -> bool:  # every node's actor has started its server (a busy machine starts some later)
            return len(engine.pool.pids()) == 3 and all(len(p) >= 2 for p in engine.pool.pids().values())

        assert wait_until(serving, 120), engine.pool.pids()
        pids = engine.pool.pids()  # every actor and its server, by node
        assert len(out.read_text().splitlines()) < EPISODES  # the node goes while the run is under way
        c.remove_node(workers[1])  # the node goes away with its actor, its server and its episodes in flight
        t.join(timeout=300)
        assert not t.is_alive()
        stats, s = engine.last_run, done["summary"]
        rows = [json.loads(x) for x in out.read_text().splitlines()]
        # Exactly once: every job recorded once, all solved (none recorded as env_crash), nothing dropped as a double.
        assert len(rows) == s.recorded == EPISODES and len({(r["task_id"], r["sample"]) for r in rows}) == EPISODES
        assert s.successes == EPISODES and stats.gave_up == [] and sorted(stats.recorded_on) == list(range(EPISODES))
        # The victim's jobs in flight ran again elsewhere: each lost attempt is on the victim, the record elsewhere.
        lost = {i: nodes for i, nodes in stats.attempts.items() if victim in nodes and stats.recorded_on[i] != victim}
        assert lost and stats.actors_lost == 1 and set(lost) == set(stats.reruns), (lost, stats.reruns)
        assert all(len(n) == 2 and n[0] == victim and stats.recorded_on[i] == n[1] != victim for i, n in lost.items())
        assert {r["actor_attempts"] for r in rows if "actor_attempts" in r} == {2} and stats.duplicates == 0
        assert victim not in {m.node for m in engine.pool.members}  # its replacement runs on a surviving node
        assert wait_until(lambda: not live(pids[victim]), 60), live(pids[victim])  # no orphan of the lost node
    everything = [p for ps in pids.values() for p in ps]
    assert wait_until(lambda: not live(everything), 60), live(everything)  # closed: no actor, no server left
