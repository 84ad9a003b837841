"""`aworld-gym serve-env` treats its clients as hostile: a client cannot widen what the env reads (its own task, its
file paths), a web page cannot drive it (Origin, Host), every route is bounded (sessions, bodies, frames, actions,
echoed values), malformed input is answered in OpenEnv's error shape on a socket that stays open, and a slow step
holds up nobody else. A real uvicorn server in this process and a raw WebSocket, as in test_openenv.py."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading

import httpx2 as httpx
import pytest

from aworld_gym.base.http_guard import server_token
from aworld_gym.trainers.openenv_protocol import ClientTasks
from tests.helpers import ANSWER, CALL, demo_env_kwargs
from tests.trainers.test_openenv import in_process, talk

READ_PASSWD = {"prompt": "Summarise the attachment.", "files": ["/etc/passwd"]}


def codes(replies: list[dict]) -> list[str]:
    return [r["data"].get("code") if r["type"] == "error" else r["type"] for r in replies]


# ----- clients cannot widen what the env reads ------------------------------------------------------------------


def test_a_client_task_is_refused_unless_allowed_and_then_its_files_stay_inside_the_root(tmp_path):
    root = tmp_path / "client-files"
    root.mkdir()
    (root / "notes.txt").write_text("hello")
    (root / "escape").symlink_to("/etc/passwd")
    (tmp_path / "outside.txt").write_text("secret")
    own = {"prompt": "What is in notes.txt?", "files": ["notes.txt"]}
    with in_process() as (address, server):
        r = asyncio.run(talk(address, [
            {"type": "reset", "data": {"task": READ_PASSWD}},
            {"type": "reset", "data": {"options": {"task": own}}},  # the same through reset's options
            {"type": "reset", "data": {"task_id": "add-2"}},  # the server's own tasks are served as ever
        ]))  # fmt: skip
        assert codes(r) == ["VALIDATION_ERROR", "VALIDATION_ERROR", "observation"], r
        assert "--allow-client-tasks" in r[0]["data"]["message"]
    allowed = ClientTasks(allowed=True, files_root=root)
    bad = ["/etc/passwd", "../outside.txt", "escape", "missing.txt", "sub/../../outside.txt", str(root / "notes.txt")]
    with in_process(client_tasks=allowed) as (address, server):
        frames = [{"type": "reset", "data": {"task": {**own, "files": [f]}}} for f in bad]
        r = asyncio.run(talk(address, [*frames, {"type": "reset", "data": {"task": own}}]))
    assert codes(r) == ["VALIDATION_ERROR"] * len(bad) + ["observation"], r
    ok = r[-1]["data"]["observation"]
    assert ok["text"] == own["prompt"] and ok["task_id"] == "0"
    with in_process(client_tasks=ClientTasks(allowed=True)) as (address, server):  # no root: no files at all
        (r,) = asyncio.run(talk(address, [{"type": "reset", "data": {"task": own}}]))
    assert r["data"]["code"] == "VALIDATION_ERROR" and "--client-files-root" in r["data"]["message"]


# ----- a web page cannot drive it -------------------------------------------------------------------------------


def _handshake(address: str, host: str) -> str:
    """The status line a raw WebSocket handshake with this Host header gets."""
    name, port = address.split(":")
    with socket.create_connection((name, int(port)), timeout=10) as sock:
        sock.sendall(f"GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())  # fmt: skip
        return sock.recv(4096).decode(errors="replace").splitlines()[0]


def test_a_browser_origin_and_a_foreign_host_are_refused_on_every_route():
    import websockets

    evil = {"Origin": "http://evil.example"}
    with in_process(allowed_origins=["http://trusted.example:3000"]) as (address, server):
        base = f"http://{address}"
        with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
            asyncio.run(talk(address, [{"type": "state"}], evil))
        assert refused.value.response.status_code == 403
        for method, path in [("GET", "/health"), ("GET", "/schema"), ("POST", "/reset")]:
            assert httpx.request(method, base + path, headers=evil, json={}).status_code == 403, path
            rebound = httpx.request(method, base + path, headers={"Host": f"attacker.example:{address.split(':')[1]}"},
                                    json={})  # fmt: skip
            assert rebound.status_code == 403, path
        assert " 403 " in _handshake(address, "attacker.example")
        assert " 101 " in _handshake(address, "localhost")
        # Trainers send no Origin; an allowed origin and loopback hosts pass.
        (state,) = asyncio.run(talk(address, [{"type": "state"}]))
        (ok,) = asyncio.run(talk(address, [{"type": "state"}], {"Origin": "http://trusted.example:3000"}))
        assert state["type"] == ok["type"] == "state"
        assert httpx.get(base + "/schema", headers={"Host": "localhost"}).status_code == 200
    assert server.pool.made == 0  # nothing refused made an env


def test_a_token_is_generated_for_any_bind_that_is_not_loopback_and_on_request_for_loopback():
    token, generated = server_token("0.0.0.0", None)
    assert generated and len(token) >= 32 and token != server_token("0.0.0.0", None)[0]
    assert server_token("127.0.0.1", None) == (None, False)
    assert server_token("::1", None, generate=True)[1] is True
    assert server_token("10.1.2.3", "mine") == ("mine", False)


# ----- every limit on every route -------------------------------------------------------------------------------


def test_stateless_reset_counts_against_max_sessions():
    import websockets

    async def hold_a_session_then_post(address: str) -> tuple[int, dict, int]:
        async with websockets.connect(f"ws://{address}/ws") as ws:
            await ws.send(json.dumps({"type": "reset", "data": {"task_id": "add-2"}}))
            await asyncio.wait_for(ws.recv(), 30)
            async with httpx.AsyncClient() as http:
                busy = await http.post(f"http://{address}/reset", json={"task_id": "add-2"}, timeout=30)
        async with httpx.AsyncClient() as http:
            after = await http.post(f"http://{address}/reset", json={"task_id": "add-2"}, timeout=30)
        return busy.status_code, busy.json(), after.status_code

    with in_process(max_sessions=1) as (address, server):
        busy, body, after = asyncio.run(hold_a_session_then_post(address))
        assert (busy, body["code"], after) == (503, "CAPACITY_REACHED", 200), body
        assert server.pool.made == 1  # never more envs than sessions


def test_bodies_frames_actions_and_ids_are_bounded_and_never_echoed_whole():
    import websockets

    with in_process(max_message_bytes=64 * 1024, max_action_chars=4096) as (address, server):
        base = f"http://{address}"
        big = {"task_id": "x" * 200_000}
        assert httpx.post(base + "/reset", json=big, timeout=30).status_code == 413
        chunked = httpx.post(base + "/reset", content=iter([b'{"task_id": "', b"x" * 50_000] * 3 + [b'"}']))
        assert chunked.status_code == 413
        long_id = httpx.post(base + "/reset", json={"task_id": "y" * 5_000}, timeout=30)
        assert long_id.status_code == 422 and len(long_id.content) < 600 and "yyyy" in long_id.text
        r = asyncio.run(talk(address, [
            {"type": "reset", "data": {"task_id": "add-2"}},
            {"type": "step", "data": {"text": "<answer>" + "9" * 10_000 + "</answer>"}},  # over the action limit
            {"type": "reset", "data": {"task_id": "z" * 20_000}},
            {"type": "reset", "data": {"episode_id": "e" * 20_000}},
            {"type": "t" * 20_000},
            {"type": "step", "data": {"text": CALL}},  # the episode goes on
        ]))  # fmt: skip
        assert codes(r) == ["observation", "VALIDATION_ERROR", "VALIDATION_ERROR", "VALIDATION_ERROR",
                            "UNKNOWN_TYPE", "observation"], r  # fmt: skip
        assert "4096" in r[1]["data"]["message"]
        assert all(len(json.dumps(x)) < 600 for x in r[1:5]), [len(json.dumps(x)) for x in r]

        async def oversized_frame() -> int | None:
            async with websockets.connect(f"ws://{address}/ws", max_size=None) as ws:
                await ws.send(json.dumps({"type": "step", "data": {"text": "a" * 100_000}}))
                with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
                    await asyncio.wait_for(ws.recv(), 10)
                return closed.value.rcvd.code if closed.value.rcvd else None

        assert asyncio.run(oversized_frame()) == 1009  # the message is too big: closed before it is held
        assert httpx.get(base + "/health").json()["sessions"] == 0


def test_malformed_input_gets_the_error_shape_and_the_socket_stays_open():
    frames = [
        b"\xff\xfe\x00",  # binary, not UTF-8
        json.dumps({"type": "state"}).encode(),  # binary UTF-8 JSON is read
        "[" * 100_000,  # deeper than the parser's recursion
        "7",
        "null",
        {"type": "reset", "data": [1, 2]},
        {"type": "reset", "data": {"seed": "0"}},
        {"type": "reset", "data": {"options": "ab"}},
        {"type": "reset", "data": {"options": {"max_turns": 1}}},
        {"type": "reset", "data": {"episode_id": {"a": 1}}},
        {"type": "reset", "data": {"task_index": 10**30}},
        {"type": "reset", "data": {"task_id": ["add-2"]}},
        {"type": "reset", "data": {"task_id": "add-2"}},
        {"type": "step", "data": {"text": 5, "extra": "q" * 5000}},
        {"type": "step", "data": {"text": ANSWER}},
    ]
    with in_process() as (address, server):
        r = asyncio.run(talk(address, frames))
        base = f"http://{address}"
        deep = httpx.post(base + "/reset", content=b"[" * 100_000)
        binary = httpx.post(base + "/reset", content=b"\xff\xfe")
        surrogate = httpx.post(base + "/reset", content=b'{"task_id": "\\ud800"}', timeout=30)
    assert codes(r) == ["INVALID_JSON", "state", "INVALID_JSON", "UNKNOWN_TYPE", "UNKNOWN_TYPE",
                        *["VALIDATION_ERROR"] * 7, "observation", "VALIDATION_ERROR", "observation"], r  # fmt: skip
    assert all(set(x["data"]) >= {"message", "code"} for x in r if x["type"] == "error")
    assert "qqqq" not in json.dumps(r[13]) and r[-1]["data"]["done"] is True
    assert (deep.status_code, deep.json()["code"]) == (422, "INVALID_JSON")
    assert (binary.status_code, binary.json()["code"]) == (422, "INVALID_JSON")
    assert surrogate.status_code in (200, 422) and json.loads(surrogate.content)  # valid JSON, not a 500


# ----- a slow step holds up nobody else -------------------------------------------------------------------------


def test_health_and_other_sockets_answer_while_a_step_runs():
    started, finished = threading.Event(), threading.Event()

    def slow(ctx) -> float:  # a reward hook that holds its loop for seconds (as a quadratic parse did)
        started.set()
        threading.Event().wait(4)  # blocks the thread: no await
        finished.set()
        return 0.0

    kwargs = {**demo_env_kwargs(4), "reward_hooks": [slow]}
    with in_process(kwargs) as (address, server):
        stepper = threading.Thread(target=lambda: asyncio.run(talk(address, [
            {"type": "reset", "data": {"task_id": "add-2"}}, {"type": "step", "data": {"text": ANSWER}}])))  # fmt: skip
        stepper.start()
        assert started.wait(30)
        health = httpx.get(f"http://{address}/health", timeout=3).json()
        (other,) = asyncio.run(talk(address, ["not json"]))
        during = not finished.is_set()
        stepper.join(30)
    assert health["sessions"] >= 1 and other["data"]["code"] == "INVALID_JSON"
    assert during, "/health and another socket waited for the slow step"


@pytest.mark.skipif(not os.path.exists("/etc/passwd"), reason="needs /etc/passwd")
def test_http_reset_refuses_a_client_task_too():
    with in_process() as (address, server):
        r = httpx.post(f"http://{address}/reset", json={"task": READ_PASSWD}, timeout=30)
    assert r.status_code == 422 and r.json()["code"] == "VALIDATION_ERROR" and "root:" not in r.text


# ----- a step has a time limit; a bad request costs no env; the record file has one writer ----------------------


def test_a_step_past_its_time_limit_ends_void_and_the_session_goes_on(tmp_path):
    """An async reward hook that never returns: the step ends at ``step_timeout_s`` as env_error (void, recorded),
    and the next reset on the same socket gets a fresh env (the stuck one is dropped). It waited forever before."""

    async def stuck(ctx) -> float:
        await asyncio.sleep(3600)
        return 0.0

    out = tmp_path / "served.jsonl"
    kwargs = {**demo_env_kwargs(4), "reward_hooks": [stuck]}
    with in_process(kwargs, step_timeout_s=1.5, out=out) as (address, server):
        replies = asyncio.run(talk(address, [
            {"type": "reset", "data": {"task_id": "add-2"}}, {"type": "step", "data": {"text": ANSWER}},
            {"type": "reset", "data": {"task_id": "add-2"}}]))  # fmt: skip
        made = server.pool.made
    ended = replies[1]["data"]
    assert codes(replies) == ["observation"] * 3
    assert ended["done"] and ended["observation"]["status"] == "void"
    assert "past its limit of 1.5 s" in ended["observation"]["error"]
    assert made == 2  # the stuck env was dropped, the second episode runs on a new one
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["termination"] for r in records] == ["env_error", "policy_error"]  # the second: left at disconnect


def test_an_unknown_task_id_costs_no_env():
    """A reset naming no task is a void episode, and the env goes back to the pool (it was closed and rebuilt, so a
    client could make the server restart its tool servers at will)."""
    with in_process() as (address, server):
        replies = asyncio.run(talk(address, [{"type": "reset", "data": {"task_id": "no-such-task"}},
                                             {"type": "reset", "data": {"task_id": "add-2"}}]))  # fmt: skip
        made = server.pool.made
    assert replies[0]["data"]["observation"]["status"] == "void" and "no task with id" in replies[0]["data"][
        "observation"]["error"]  # fmt: skip
    assert replies[1]["data"]["observation"]["task_id"] == "add-2" and made == 1


def test_the_record_file_has_one_writer_and_keeps_every_episode(tmp_path):
    """A second server on the same --out is refused (two appended to it at once); the same task run twice is
    recorded twice (the file is a log of served episodes, not keyed by task)."""
    from aworld_gym.rollout.sinks.sink_files import OutputBusy
    from aworld_gym.trainers.openenv import EnvServer

    out = tmp_path / "served.jsonl"
    with in_process(out=out) as (address, server):
        with pytest.raises(OutputBusy, match=r"served\.jsonl"):
            EnvServer("AWorld/MCP-v0", demo_env_kwargs(4), out=out)
        asyncio.run(talk(address, [{"type": "reset", "data": {"task_id": "add-2"}},
                                   {"type": "step", "data": {"text": ANSWER}},
                                   {"type": "reset", "data": {"task_id": "add-2"}},
                                   {"type": "step", "data": {"text": ANSWER}}]))  # fmt: skip
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["task_id"] for r in records] == ["add-2", "add-2"] and all(r["status"] == "ok" for r in records)
