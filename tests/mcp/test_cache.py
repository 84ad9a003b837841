"""Record and replay of tool calls (issue 49): a run recorded against a live stdio server, replayed strictly with the
server gone (identical trajectories), a reworded question missing exactly its new calls, replay recording what it
lacks, 8 processes recording the same keys, and a store that cannot be used; each store (SQLite, a real Redis server)
keeps the same contract. The cluster's shared store: tests/rollout/test_ray_cluster.py."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from aworld_gym.base.errors import ConfigError
from aworld_gym.core.trajectory import Termination
from aworld_gym.mcp.cache import HubCache, cache_settings, server_cache
from aworld_gym.mcp.cache.keys import EpisodeScope, call_key
from aworld_gym.mcp.cache.store import CacheError, Recorded, SqliteStore, open_store
from aworld_gym.mcp.config import parse_mcp_config
from aworld_gym.rollout.collect import collect
from aworld_gym.rollout.policies.plan import PlanPolicy
from tests.helpers import redis_server

# search(q) answers differently at every call (a live web search, a month later: its answer counts the calls logged so
# far by every process); add(k) keeps a
# running total per episode (a stateful server). argv[2] says which of the two this process serves; every call is
# logged to argv[1].
SERVER = '''
import sys
from mcp.server.mcpserver import MCPServer

LOG = sys.argv[1]
server = MCPServer("lab", version="1.2")
totals = {}


def log(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")


def search(q: str) -> str:
    """Search the web."""
    log(f"search {q}")
    with open(LOG) as f:
        n = len(f.readlines())
    return f"about {q}: fact-{len(q)} (answer #{n})"


def add(k: int, episode: str) -> int:
    """Add k to the episode's running total."""
    log(f"add {k}")
    totals[episode] = totals.get(episode, 0) + k
    return totals[episode]


server.tool()(search if sys.argv[2] == "search" else add)
server.run()
'''


def _task(i: int, query: str) -> dict:
    plan = {"turns": [[{"name": "search", "arguments": {"q": query}}],
                      [{"name": "add", "arguments": {"k": i, "episode": f"e{i}"}}]],
            "pattern": r"fact-(\d+)"}  # fmt: skip
    return {"id": f"t{i}", "prompt": f"Look up {query}.", "answer": str(len(query)), "metadata": {"reference": plan}}


def _env(tmp_path: Path, tasks: list[dict], cache: dict, command: str = sys.executable) -> dict:
    server = tmp_path / "lab.py"
    server.write_text(SERVER)
    log = str(tmp_path / "calls.log")
    entry = {"command": command, "args": [str(server), log, "search"], "cache": {"scope": "stateless"}}
    stateful = {"command": command, "args": [str(server), log, "add"]}  # says nothing: episode-scoped
    return {"mcp_config": {"mcpServers": {"web": entry, "lab": stateful}}, "tasks": tasks, "tool_cache": cache}


def _live_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def _run(tmp_path: Path, tasks: list[dict], cache: dict, name: str, episodes: int = 0, **kw) -> list[dict]:
    out = tmp_path / f"{name}.jsonl"
    collect("AWorld/MCP-v0", PlanPolicy(), episodes=episodes or len(tasks), concurrency=max(2, episodes), sink=str(out),
            progress=False, env_kwargs=_env(tmp_path, tasks, cache, **kw))  # fmt: skip
    records = [json.loads(line) for line in out.read_text().splitlines()]
    return sorted(records, key=lambda r: r["task_id"])


def _seen(record: dict) -> list:
    """What an episode saw and earned: each turn's observation and reward, the ending."""
    return [[(t.get("observation"), t.get("reward")) for t in record["turns"]], record["reward"],
            record["termination"]]  # fmt: skip


def test_a_recorded_run_replays_strictly_identical_with_the_server_gone(tmp_path):
    tasks = [_task(i, q) for i, q in enumerate(["moon landing", "tallest tree", "deepest lake"])]
    db = str(tmp_path / "tools.sqlite")
    recorded = _run(tmp_path, tasks, {"store": db, "mode": "record"}, "record")
    live = _live_calls(tmp_path)
    assert len(live) == 6 and all(r["termination"] == "answer" and r["reward"] == 1.0 for r in recorded)

    # the server's command no longer exists: replay-strict never starts it, and the run is the same
    replayed = _run(tmp_path, tasks, {"store": db, "mode": "replay-strict"}, "strict", command="/nonexistent/python")
    assert _live_calls(tmp_path) == live
    assert [_seen(r) for r in replayed] == [_seen(r) for r in recorded]

    # live again: the search answers differently (a month later), so the identity above is the store's doing
    again = _run(tmp_path, tasks, {"store": str(tmp_path / "other.sqlite"), "mode": "record"}, "again")
    assert len(_live_calls(tmp_path)) == 12 and [_seen(r) for r in again] != [_seen(r) for r in recorded]


def test_strict_replay_of_a_reworded_question_misses_exactly_its_new_call(tmp_path):
    tasks = [_task(i, q) for i, q in enumerate(["moon landing", "tallest tree", "deepest lake"])]
    db = str(tmp_path / "tools.sqlite")
    _run(tmp_path, tasks, {"store": db, "mode": "record"}, "record")
    tasks[1] = _task(1, "tallest tree on earth")  # one question reworded: its search is a call never recorded
    replayed = _run(tmp_path, tasks, {"store": db, "mode": "replay-strict"}, "strict", command="/nonexistent/python")
    ends = {r["task_id"]: (r["termination"], r["status"]) for r in replayed}
    assert ends == {"t0": ("answer", "ok"), "t1": (Termination.CACHE_MISS, "void"), "t2": ("answer", "ok")}
    miss = next(r for r in replayed if r["task_id"] == "t1")
    (result,) = miss["turns"][0]["tool_results"]
    assert result["error"] == "cache_miss" and "was recorded" in result["text"]


def test_replay_serves_what_was_kept_and_records_what_was_not(tmp_path):
    tasks = [_task(i, q) for i, q in enumerate(["moon landing", "tallest tree"])]
    db = str(tmp_path / "tools.sqlite")
    first = _run(tmp_path, tasks, {"store": db, "mode": "replay"}, "first")  # an empty cache: all live, all kept
    assert len(_live_calls(tmp_path)) == 4
    second = _run(tmp_path, tasks, {"store": db, "mode": "replay"}, "second")
    assert len(_live_calls(tmp_path)) == 4 and [_seen(r) for r in second] == [_seen(r) for r in first]
    tasks.append(_task(2, "deepest lake"))
    _run(tmp_path, tasks, {"store": db, "mode": "replay"}, "third")
    assert _live_calls(tmp_path)[4:] == ["search deepest lake", "add 2"]  # only the new task's calls went live
    assert SqliteStore(db).stats()["calls"] == 6


def test_the_samples_of_a_group_making_the_same_call_at_once_reach_the_server_once(tmp_path):
    """Four samples of one task at once in `replay` mode on an empty store: their one search goes to the server once
    (the others wait for it); each sample's episode-scoped call is its own."""
    records = _run(tmp_path, [_task(0, "moon landing")], {"store": str(tmp_path / "t.sqlite"), "mode": "replay"},
                   "group", episodes=4)  # fmt: skip
    assert len(records) == 4 and all(r["reward"] == 1.0 for r in records)
    assert sorted(_live_calls(tmp_path)) == ["add 0"] * 4 + ["search moon landing"]
    assert len({r["turns"][0]["observation"] for r in records}) == 1  # one answer, served to all four


def test_replay_brings_a_stateful_server_up_to_the_episode_before_its_first_live_call(tmp_path):
    """An episode-scoped server spared the episode's first calls (served from the store) gets them, in order, before
    the first call that must reach it: its running total is the one the kept results came from."""

    def counting(ks: list[int]) -> dict:
        plan = {"turns": [[{"name": "add", "arguments": {"k": k, "episode": "e"}}] for k in ks], "pattern": r"(\d+)"}
        return {"id": "t0", "prompt": "Count.", "answer": "x", "metadata": {"reference": plan}}

    db = str(tmp_path / "tools.sqlite")
    _run(tmp_path, [counting([1, 2])], {"store": db, "mode": "replay"}, "first")
    replayed = _run(tmp_path, [counting([1, 5])], {"store": db, "mode": "replay"}, "second")
    totals = [t["observation"] for t in replayed[0]["turns"][:2]]
    assert totals == ["<tool_response>\n1\n</tool_response>", "<tool_response>\n6\n</tool_response>"]
    assert _live_calls(tmp_path) == ["add 1", "add 2", "add 1", "add 5"]  # add 1 served, then sent before add 5


def test_the_key_follows_arguments_schema_and_scope():
    args = {"q": "x", "n": 1}
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    key = call_key("web", "search", args, schema, [])
    assert key == call_key("web", "search", {"n": 1, "q": "x"}, schema, [])  # canonical arguments
    assert key != call_key("web", "search", args, {**schema, "required": ["q"]}, [])  # another schema
    assert key != call_key("web2", "search", args, schema, [])  # another server identity
    one, two = EpisodeScope("t1", 0), EpisodeScope("t1", 1)
    assert one.value("stateless", "s") == two.value("stateless", "s") == []
    assert one.value("task", "s") == two.value("task", "s") != EpisodeScope("t2", 0).value("task", "s")
    assert one.value("episode", "s") != two.value("episode", "s")  # another seed: another episode
    before = one.value("episode", "s")
    one.advance("s", key)
    assert one.value("episode", "s") != before  # the second call of an episode is not the first
    assert EpisodeScope("t1", None).value("episode", "s") is None  # no seed: no later run can name it


def test_modes_need_a_store_and_are_checked():
    specs = parse_mcp_config({"mcpServers": {"a": {"command": "x", "cache": "record"}}})
    with pytest.raises(ConfigError, match="needs a store"):
        HubCache(None, specs)
    with pytest.raises(ConfigError, match="mode 'recrod'"):
        server_cache("a", "recrod")
    with pytest.raises(ConfigError, match="scope 'session'"):
        server_cache("a", {"scope": "session"})
    with pytest.raises(ConfigError, match="on_error"):
        cache_settings({"store": "x.sqlite", "on_error": "ignore"})
    assert cache_settings("x.sqlite").mode == "replay"


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(params=["sqlite", "redis"])
def store_at(request, tmp_path):
    """A new store's address: an SQLite file, or a prefix of its own on the module's Redis server."""
    if request.param == "sqlite":
        return str(tmp_path / "tools.sqlite")
    return f"{request.getfixturevalue('redis_url')}?prefix={request.node.name}:"


def _record(key: str, server: str = "web", created: float | None = None, **result) -> Recorded:
    return Recorded(key, server, "search", "{}", {"content": [], **result}, False, created or time.time(), 0.0)


def _write(where: str, worker: int, shared: int, own: int) -> int:
    store = open_store(where)
    added = 0
    for i in range(shared):  # every process records these same keys
        added += store.put(_record(f"shared-{i}", n=worker))
    for i in range(own):
        added += store.put(_record(f"own-{worker}-{i}"))
    return added


def test_eight_processes_recording_the_same_keys_keep_one_entry_each_and_lose_none(store_at):
    open_store(store_at).close()
    with multiprocessing.get_context("spawn").Pool(8) as pool:
        added = pool.starmap(_write, [(store_at, w, 200, 50) for w in range(8)])
    keys = [r.key for r in open_store(store_at).records()]
    assert len(keys) == len(set(keys)) == 200 + 8 * 50
    assert sum(added) == 200 + 8 * 50  # each shared key added by exactly one process


def test_every_store_keeps_the_first_entry_lists_prunes_and_merges(store_at, tmp_path):
    store = open_store(store_at)
    old = time.time() - 10 * 86400
    assert store.put(_record("k1", created=old, n=1)) and not store.put(_record("k1", n=2))  # the first one stays
    assert store.put(_record("k2", server="files")) and store.put(_record("k3"))
    assert store.get("k1").result == {"content": [], "n": 1} and store.get("nope") is None
    assert [r.key for r in store.records()] == ["k1", "k2", "k3"] and [r.key for r in store.records("files")] == ["k2"]
    store.put_listing("web", [{"name": "search"}], {"name": "web", "version": "1"})
    store.put_listing("web", [{"name": "search"}, {"name": "fetch"}], None)  # the latest listing wins
    assert store.listing("web") == ([{"name": "search"}, {"name": "fetch"}], None) and store.listing("x") is None
    stats = store.stats()
    assert stats["calls"] == 3 and stats["servers"]["web"]["calls"] == 2 and stats["listed"] == ["web"]

    other = SqliteStore(tmp_path / "other.sqlite")  # a merge across kinds: SQLite into this one
    other.put(_record("k3", n=9))
    other.put(_record("k4"))
    other.put_listing("files", [{"name": "read"}], None)
    assert store.merge(other) == 1 and store.get("k3").result == {"content": []}  # k3 here stays as it was
    assert sorted(store.listings()) == ["files", "web"]
    assert store.prune(before=time.time() - 5 * 86400) == 1 and store.get("k1") is None
    assert store.prune(server="files") == 1 and [r.key for r in store.records()] == ["k3", "k4"]
    assert store.stats()["servers"].keys() == {"web"}
    with pytest.raises(ValueError, match="an age"):
        store.prune()
    read_only = open_store(store_at, read_only=True)
    with pytest.raises(CacheError):  # replay-strict never writes
        read_only.put(_record("k5"))
    assert read_only.get("k4") is not None


def test_a_redis_store_that_cannot_be_used_is_a_clear_error(redis_url, tmp_path, caplog):
    from aworld_gym.mcp.transports.shared import free_port

    dead = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(CacheError, match="cannot be used: ConnectionError"):
        open_store(dead)
    with redis_server(tmp_path, password="s3cret") as locked:
        with pytest.raises(CacheError, match="cannot be used: AuthenticationError") as wrong:
            open_store(locked.replace("s3cret", "guess"))
        assert "guess" not in str(wrong.value) and "***" in str(wrong.value)  # the password is not repeated
        assert open_store(locked).stats()["path"] == locked.replace("s3cret", "***")
    tasks = [_task(0, "moon landing")]
    stopped = _run(tmp_path, tasks, {"store": dead, "mode": "record"}, "stopped")
    assert stopped[0]["status"] == "void" and "cannot be used" in json.dumps(stopped[0])
    assert _live_calls(tmp_path) == []
    went_on = _run(tmp_path, tasks, {"store": dead, "mode": "record", "on_error": "live"}, "went_on")
    assert went_on[0]["termination"] == "answer" and len(_live_calls(tmp_path)) == 2


def test_a_store_that_cannot_be_used_is_a_clear_error_or_left_out_as_configured(tmp_path, caplog):
    bad = tmp_path / "tools.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(CacheError, match="cannot be used"):
        SqliteStore(bad)
    tasks = [_task(0, "moon landing")]
    stopped = _run(tmp_path, tasks, {"store": str(bad), "mode": "record"}, "stopped")
    assert stopped[0]["status"] == "void" and "cannot be used" in json.dumps(stopped[0])
    assert _live_calls(tmp_path) == []  # the run stopped before any call
    went_on = _run(tmp_path, tasks, {"store": str(bad), "mode": "record", "on_error": "live"}, "went_on")
    assert went_on[0]["termination"] == "answer" and len(_live_calls(tmp_path)) == 2
    assert any("cannot be used" in r.getMessage() for r in caplog.records)
    with pytest.raises(CacheError, match="no tool cache at"):
        SqliteStore(tmp_path / "missing.sqlite", read_only=True)


def test_a_store_locked_past_its_timeout_is_a_clear_error(tmp_path):
    db = tmp_path / "tools.sqlite"
    store = SqliteStore(db, busy_timeout_s=0.2)
    locker = sqlite3.connect(db, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
    try:
        with pytest.raises(CacheError, match="database is locked"):
            store.put(Recorded("k", "web", "search", "{}", {"content": []}, False, time.time(), 0.0))
    finally:
        locker.execute("ROLLBACK")
    assert store.put(Recorded("k", "web", "search", "{}", {"content": []}, False, time.time(), 0.0))


def test_the_cache_command_shows_exports_merges_and_prunes(tmp_path, capsys):
    from aworld_gym.cli import main

    a, b = str(tmp_path / "a.sqlite"), str(tmp_path / "b.sqlite")
    old = time.time() - 10 * 86400
    for where, keys in ((a, ["k1", "k2"]), (b, ["k2", "k3"])):
        store = SqliteStore(where)
        for k in keys:
            store.put(Recorded(k, "web" if k != "k3" else "files", "t", "{}", {"content": [], "k": k}, k == "k1",
                               old if k == "k1" else time.time(), 0.5))  # fmt: skip
        store.put_listing("web", [{"name": "t", "inputSchema": {"type": "object"}}], {"name": "web", "version": "1"})
        store.close()
    assert main(["cache", "merge", a, "--from", b]) == 0 and "added 1 calls" in capsys.readouterr().out
    assert main(["cache", "stats", a, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["calls"] == 3 and stats["servers"]["web"]["errors"] == 1 and stats["listed"] == ["web"]
    out = tmp_path / "a.jsonl"
    assert main(["cache", "export", a, "--out", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["listing"]["server"] == "web" and sorted(x["call"]["key"] for x in lines[1:]) == ["k1", "k2", "k3"]
    assert main(["cache", "prune", a, "--older-than", "5"]) == 0 and "deleted 1 calls" in capsys.readouterr().out
    assert main(["cache", "prune", a, "--server", "files"]) == 0 and "deleted 1 calls" in capsys.readouterr().out
    assert main(["cache", "prune", a]) == 2  # neither an age nor a server: an error, said in one line
    assert main(["cache", "stats", str(tmp_path / "missing.sqlite")]) == 2


def test_the_cache_command_merges_a_machine_cache_into_the_cluster_one(redis_url, tmp_path, capsys):
    from aworld_gym.cli import main

    local, cluster = str(tmp_path / "a.sqlite"), f"{redis_url}?prefix=cli:"
    store = SqliteStore(local)
    for k in ("k1", "k2"):
        store.put(_record(k))
    assert main(["cache", "merge", cluster, "--from", local]) == 0 and "added 2 calls" in capsys.readouterr().out
    assert main(["cache", "stats", cluster, "--json"]) == 0 and json.loads(capsys.readouterr().out)["calls"] == 2
    assert main(["cache", "prune", cluster, "--server", "web"]) == 0 and "deleted 2 calls" in capsys.readouterr().out


def test_a_redis_store_that_dies_between_runs_stops_the_run_or_is_left_out_as_configured(tmp_path, caplog):
    """The process keeps its store open across runs: a Redis server gone since the last one fails the next run's
    first lookup. ``on_error="stop"``: every episode ends void with the store's error, each recorded; ``"live"``: a
    warning, and the calls go to the servers."""
    tasks = [_task(0, "moon landing"), _task(1, "tallest tree")]
    with redis_server(tmp_path) as url:
        first = _run(tmp_path, tasks, {"store": url, "mode": "replay"}, "first")
        assert [r["termination"] for r in first] == ["answer", "answer"] and len(_live_calls(tmp_path)) == 4
    stopped = _run(tmp_path, tasks, {"store": url, "mode": "replay"}, "stopped")
    assert [(r["status"], r["task_id"]) for r in stopped] == [("void", "t0"), ("void", "t1")]
    assert all("the tool cache at" in json.dumps(r) and "failed" in json.dumps(r) for r in stopped), stopped[0]
    assert len(_live_calls(tmp_path)) == 4  # nothing reached the servers
    went_on = _run(tmp_path, tasks, {"store": url, "mode": "replay", "on_error": "live"}, "went_on")
    assert [r["termination"] for r in went_on] == ["answer", "answer"] and len(_live_calls(tmp_path)) == 8
    assert any("unkept" in r.getMessage() for r in caplog.records)
