"""The Ray engine's actor plan (no Ray needed): actors sized from each node's CPUs, spread, slots split evenly."""

from aworld_gym.rollout.engines.ray_pool import plan_actors, split


def test_actors_per_node_follow_its_cpus_and_interleave():
    nodes = {"a": 4.0, "b": 1.0, "c": 2.0}
    order = plan_actors(nodes, None, 1.0, 64)
    assert sorted(order) == ["a"] * 4 + ["b"] + ["c"] * 2
    assert order[:3] == ["a", "b", "c"]  # the first actors land on different nodes
    assert plan_actors(nodes, None, 0.5, 64).count("a") == 2 and plan_actors(nodes, None, 0.1, 64).count("b") == 1
    assert plan_actors(nodes, None, 1.0, 2) == ["a", "b"]  # cut (e.g. to the concurrency), still spread


def test_a_given_number_of_actors_is_shared_by_cpus():
    nodes = {"a": 2.0, "b": 1.0, "c": 1.0}
    assert sorted(plan_actors(nodes, 8, 1.0, 64)) == ["a"] * 4 + ["b"] * 2 + ["c"] * 2
    assert sorted(plan_actors(nodes, 3, 1.0, 64)) == ["a", "b", "c"]  # largest remainders
    assert len(plan_actors(nodes, 5, 1.0, 64)) == 5 and plan_actors({}, 4, 1.0, 64) == []


def test_slots_split_evenly():
    assert split(64, 2) == [32, 32] and split(10, 3) == [4, 3, 3] and sum(split(256, 7)) == 256
