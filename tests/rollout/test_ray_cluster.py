"""A simulated multi-node Ray cluster: actors land on every node, and a rollout survives losing a node."""

import functools
import os
import threading
import time

import pytest

from aworld_gym.rollout.collect import collect
from aworld_gym.rollout.plan import PlanPolicy
from tests.helpers import demo_env_kwargs

ENV = "AWorld/MCP-v0"


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    os.environ["RAY_AUTH_MODE"] = "disabled"
    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    workers = [c.add_node(num_cpus=1) for _ in range(2)]
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    # Warm every node up (a worker process started on each) so that placement sees three ready nodes.
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0)
    def where() -> str:
        return ray.get_runtime_context().get_node_id()

    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    refs = [where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote() for n in nodes]
    assert sorted(ray.get(refs, timeout=120)) == sorted(nodes)
    yield ray, c, workers
    ray.shutdown()
    c.shutdown()


def test_actors_spread_over_every_node(cluster):
    ray, c, _ = cluster
    from aworld_gym.rollout.engines import Work
    from aworld_gym.rollout.envs import MakeEnv
    from aworld_gym.rollout.ray_engine import EpisodeWorker, spread

    remote = ray.remote(num_cpus=0)(EpisodeWorker)
    work = Work(ENV, MakeEnv.of(ENV), PlanPolicy, [])
    actors = [remote.options(scheduling_strategy=spread(i)).remote(work, 1, None) for i in range(6)]
    nodes = {ray.get(a.node.remote())[0] for a in actors}
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert nodes == alive and len(nodes) == 3
    for a in actors:
        ray.kill(a)


def test_rollout_completes_after_a_node_is_removed(cluster, tmp_path):
    import json

    ray, c, workers = cluster
    out = tmp_path / "n.jsonl"
    done = {}

    def run():
        done["summary"] = collect(ENV, functools.partial(PlanPolicy, latency_s=0.3), episodes=24, concurrency=6,
                                  engine="ray", ray_address=c.address, ray_actors=3, env_kwargs=demo_env_kwargs(8),
                                  sink=out, progress=False)  # fmt: skip

    t = threading.Thread(target=run)
    t.start()
    deadline = time.time() + 60
    while time.time() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 4):
        time.sleep(0.2)
    c.remove_node(workers[1])  # a node goes away mid-rollout
    t.join(timeout=240)
    assert not t.is_alive()
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    keys = {(r["task_id"], r["sample"]) for r in rows}
    s = done["summary"]
    assert len(rows) == 24 and len(keys) == 24 and s.recorded == 24
    assert s.successes + s.failures.get("env_crash", 0) == 24
