"""Episodes in flight (issue 48): every pool on the path sized from the run, said once where it caps the run, and
nothing lost at the edge (429s and reset connections at a few hundred in flight)."""

from __future__ import annotations

import asyncio
import collections
import json
import sys
import warnings

import pytest

from aworld_gym.base import capacity
from aworld_gym.base.capacity import CapacityWarning, ensure_descriptors
from aworld_gym.base.errors import ConfigError
from aworld_gym.rollout.collect import collect
from aworld_gym.rollout.engines import check_shared
from aworld_gym.rollout.policies.openai_policy import OpenAIPolicy
from benchmarks.peers import ADD_SERVER, StandIn, tasks_for

SDK_DEFAULT = 1000  # the OpenAI SDK's DEFAULT_CONNECTION_LIMITS.max_connections, which capped every run before


class Ask:
    """The least an env gives OpenAIPolicy.request: one question."""

    preamble = ""

    def __init__(self, question: str) -> None:
        self.tools: list = []
        self.messages = [{"role": "user", "content": question}]


async def _client_limits(policy: OpenAIPolicy, aiohttp: bool) -> tuple[int, int]:
    client, _ = policy._async_client(aiohttp)
    try:
        transport = client._client._transport
        if aiohttp:
            return transport.limits.max_connections, transport.limits.max_keepalive_connections
        return transport._pool._max_connections, transport._pool._max_keepalive_connections
    finally:
        await policy.aclose()


@pytest.mark.parametrize("aiohttp", [True, False], ids=["aiohttp", "httpx"])
def test_the_model_clients_connections_follow_max_concurrency_or_max_connections(aiohttp):
    pytest.importorskip("aiohttp")
    policy = OpenAIPolicy(model="m", base_url="http://127.0.0.1:9/v1", max_concurrency=4096)
    assert asyncio.run(_client_limits(policy, aiohttp)) == (4096, 4096)  # every request in flight its connection
    policy = OpenAIPolicy(model="m", base_url="http://127.0.0.1:9/v1", max_concurrency=64, max_connections=2000)
    assert asyncio.run(_client_limits(policy, aiohttp)) == (2000, 2000)
    with pytest.raises(ConfigError, match="at least 1"):
        OpenAIPolicy(model="m", base_url="http://127.0.0.1:9/v1", max_connections=0)


def test_policies_of_one_configuration_share_one_http_client_on_a_loop_closed_by_the_last():
    """A Ray actor or a worker process makes a policy per slot: each had its own client (about 30 ms and 0.85 MB, its
    TLS context), 7 GB for an actor of 8,192 slots. Policies asking for the same client share it; it closes when the
    last one lets go."""

    def policy(**kw):
        return OpenAIPolicy(model="m", base_url="http://127.0.0.1:9/v1", max_concurrency=512, **kw)

    async def run() -> None:
        a, b, other = policy(), policy(), policy(max_connections=1024)
        ca, sa = a._async_client()
        cb, sb = b._async_client()
        assert ca is cb and sa is not sb  # one client; each policy's own bound on requests in flight
        assert other._async_client()[0] is not ca  # another configuration, another client
        await a.aclose()
        assert not ca.is_closed()  # b still holds it
        await b.aclose()
        assert ca.is_closed()
        fresh = policy()
        assert fresh._async_client()[0] is not ca  # a new client once the old one closed
        await fresh.aclose()
        await other.aclose()

    asyncio.run(run())
    seen = []

    async def on_a_new_loop() -> None:
        p = policy()
        seen.append(p._async_client()[0])
        await p.aclose()

    asyncio.run(on_a_new_loop())
    asyncio.run(on_a_new_loop())
    assert seen[0] is not seen[1]  # a client is never shared across event loops


def test_fewer_connections_than_requests_in_flight_is_said_once():
    policy = OpenAIPolicy(model="m", base_url="http://127.0.0.1:9/v1", max_concurrency=300, max_connections=100)

    async def twice() -> None:
        for _ in range(2):
            policy._async_client()
            await policy.aclose()

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")  # Python's own rule: a warning with the same text is shown once
        asyncio.run(twice())
        asyncio.run(twice())  # a second run, a second loop: still once
    said = [str(w.message) for w in seen if issubclass(w.category, CapacityWarning)]
    assert len(said) == 1
    assert "max_concurrency=300" in said[0] and "max_connections=100" in said[0] and "at most 100" in said[0]


def test_more_slots_sharing_one_policy_than_its_max_concurrency_is_said_once():
    policy = OpenAIPolicy(model="m", base_url="http://127.0.0.1:9/v1", max_concurrency=4)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        for sharing in range(1, 9):
            check_shared(policy, sharing, 8)
    said = [str(w.message) for w in seen if issubclass(w.category, CapacityWarning)]
    assert len(said) == 1 and "8 episodes in flight" in said[0] and "max_concurrency=4" in said[0]


def test_the_descriptor_limit_is_raised_to_the_hard_limit_and_a_low_hard_limit_is_a_clear_error(monkeypatch):
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard < 600:
        pytest.skip(f"this process's hard limit ({hard}) leaves nothing to raise to")
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))
        assert ensure_descriptors(10) == hard  # raised from 512 to the hard limit
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, 4096))
    with pytest.raises(ConfigError) as err:
        ensure_descriptors(8192)
    text = str(err.value)
    need = capacity.FDS_BASE + capacity.FDS_PER_EPISODE * 8192
    assert f"8192 episodes in flight may need about {need} open files" in text
    assert "at most 4096" in text and f"ulimit -n {need}" in text


def test_the_descriptor_check_counts_what_an_episode_of_the_env_holds_of_its_own(monkeypatch):
    """Shared servers cost an episode nothing, its own stdio server 3 and its own HTTP session 1, beside the model's
    connection; a factory that says nothing gets the general estimate. 8,192 episodes in flight on shared servers fit
    a hard limit of 20,000 (the general estimate, 4 each, refused them)."""
    from aworld_gym.rollout.envs import MakeEnv, descriptors_per_episode

    http = {"type": "streamable-http", "url": "http://127.0.0.1:9/mcp"}
    shared = {"mcpServers": {"s": {"command": "x", "share": True}, "h": {**http, "share_session": True},
                             "p": {"command": "y", "pool": 4}}}  # fmt: skip
    own = {"mcpServers": {"s": {"command": "x"}, "h": http}}
    assert descriptors_per_episode(MakeEnv.of("AWorld/MCP-v0", {"mcp_config": shared})) == capacity.FDS_MODEL == 1
    assert descriptors_per_episode(MakeEnv.of("AWorld/MCP-v0", {"mcp_config": own})) == 1 + 3 + 1
    assert descriptors_per_episode(MakeEnv.of("AWorld/Code-v0")) == capacity.FDS_PER_EPISODE  # its sandbox is its own
    assert descriptors_per_episode(lambda: None) == capacity.FDS_PER_EPISODE
    bad = {"mcpServers": {"s": {"command": "x", "share": "often"}}}  # the env reports it when made
    assert descriptors_per_episode(MakeEnv.of("AWorld/MCP-v0", {"mcp_config": bad})) == capacity.FDS_PER_EPISODE

    resource = pytest.importorskip("resource")
    monkeypatch.setattr(resource, "getrlimit", lambda _: (20000, 20000))
    assert ensure_descriptors(8192, capacity.FDS_MODEL) == 20000
    with pytest.raises(ConfigError, match="about 33024 open files"):
        ensure_descriptors(8192)


def test_a_run_reaches_more_requests_in_flight_than_the_sdks_default_allowed():
    """1,200 requests at once through one policy, each held 2 s by the stand-in: all in flight together (the SDK's
    default pool allowed 1,000: at max_connections=1000 the peak is 1,000 and the run takes two waves, 6.1 s against
    4.1 s). About 4 s on 2 cores."""
    pytest.importorskip("aiohttp")
    n = 1200
    with StandIn(latency_s=2.0, backlog=4096) as server:
        policy = OpenAIPolicy(model="stand-in", base_url=server.base_url, max_concurrency=n, retries=0)

        async def run() -> list:
            try:
                asks = [Ask(t["question"]) for t in tasks_for(n, 0)]
                return await asyncio.gather(*(policy.aact(ask, "", {}) for ask in asks))
            finally:
                await policy.aclose()

        actions = asyncio.run(run())
    assert len(actions) == n and all("<tool_call>" in a.text for a in actions)
    assert server.counts.requests == n
    assert server.counts.peak_in_flight == n > SDK_DEFAULT


def test_nothing_is_lost_at_the_edge_429s_and_reset_connections_at_300_in_flight(tmp_path):
    """300 episodes at once (2 model calls, 1 tool call each on one shared stdio server); the stand-in answers about
    1% of requests with 429 and resets about 1% of connections: every episode is recorded once, retried to its
    answer (or void), and the stand-in saw exactly one retry per fault."""
    pytest.importorskip("aiohttp")
    n = 300
    server_py = tmp_path / "add_server.py"
    server_py.write_text(ADD_SERVER)
    tasks = tasks_for(n, 1)
    env_kwargs = {
        "mcp_config": {"mcpServers": {"calc": {"command": sys.executable, "args": [str(server_py)], "share": True}}},
        "tasks": [{"id": t["id"], "prompt": t["question"], "answer": str(t["answer"])} for t in tasks],
    }
    out = tmp_path / "records.jsonl"
    with StandIn(latency_s=0.2, faults={"429": 0.01, "reset": 0.01}) as server:
        policy = OpenAIPolicy(model="stand-in", base_url=server.base_url, tool_mode="native", max_concurrency=n,
                              backoff_s=0.05, timeout_s=30)  # fmt: skip
        summary = collect("AWorld/MCP-v0", policy, episodes=n, concurrency=n, env_kwargs=env_kwargs, sink=out,
                          progress=False)  # fmt: skip
        counts = server.counts
    records = [json.loads(line) for line in out.read_text().splitlines()]
    ids = collections.Counter(r["task_id"] for r in records)
    assert len(records) == n == summary.recorded and set(ids) == {t["id"] for t in tasks}
    assert max(ids.values()) == 1  # none duplicated
    injected = sum(counts.injected.values())
    assert counts.injected.get("429", 0) >= 1 and counts.injected.get("reset", 0) >= 1, counts.injected
    endings = collections.Counter(r["termination"] for r in records)
    assert set(endings) <= {"answer", "policy_error"}, endings  # retried to the answer, or void: never lost
    answered = endings["answer"]
    assert answered == n, endings  # 4 retries of a 1-in-50 fault: every episode got through
    assert counts.requests == 2 * n + injected  # each fault cost exactly one more request, nothing else did
    assert counts.tool_results_ok == n and max(counts.per_episode.values()) == 2
    assert counts.in_flight == 0
