"""`aworld-gym serve-env`: AWorld envs over OpenEnv's protocol, driven by OpenEnv's own client (openenv-core 0.3, in
.venv-swift beside ms-swift, whose OpenEnvScheduler uses it; run as a subprocess) and, for the protocol's error
paths, a raw WebSocket."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from types import SimpleNamespace

import httpx2 as httpx
import pytest

from aworld_gym.mcp.transports.shared import free_port
from tests.helpers import ANSWER, CALL, ROOT, demo_env_kwargs, stdio_config, wait_until

OPENENV_PY = Path(os.environ.get("OPENENV_PYTHON") or ROOT / ".venv-swift/bin/python")
CLIENT = ROOT / "tests/openenv_client.py"

pytestmark = pytest.mark.skipif(not OPENENV_PY.exists(), reason="needs .venv-swift (make test builds it)")


def stdio_kwargs(n: int = 4) -> dict:
    return {**demo_env_kwargs(n), "mcp_config": stdio_config()}


@contextlib.contextmanager
def serve_env(env_id: str, kwargs: dict, *extra: str, out: Path | None = None):
    """`aworld-gym serve-env` in its own process group; yields (url, process)."""
    port = free_port()
    argv = [str(ROOT / ".venv/bin/aworld-gym"), "serve-env", env_id, "--port", str(port),
            "--env-kwargs", json.dumps(kwargs), *extra]  # fmt: skip
    if out is not None:
        argv += ["--out", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        ok = wait_until(lambda: _healthy(url) or proc.poll() is not None, 60)
        assert ok and proc.poll() is None, proc.stderr.read().decode() if proc.poll() is not None else "no /health"
        yield url, proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def openenv_client(url: str, episodes: list[dict], concurrent: bool = False, vanish_after: int | None = None):
    plan = {"url": url, "episodes": episodes, "concurrent": concurrent, "vanish_after": vanish_after}
    done = subprocess.run([str(OPENENV_PY), "-I", str(CLIENT)], input=json.dumps(plan), capture_output=True, text=True,
                          timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def server_children(proc: subprocess.Popen) -> list:
    import psutil

    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [p for p in kids if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_openenv_client_runs_mcp_episodes_with_the_drivers_rewards(tmp_path):
    out = tmp_path / "episodes.jsonl"
    with serve_env("AWorld/MCP-v0", stdio_kwargs(), "--max-sessions", "2", out=out) as (url, proc):
        schema = httpx.get(url + "/schema").json()
        assert schema["action"]["required"] == ["text"] and schema["action"]["additionalProperties"] is False
        assert {"text", "messages", "status", "reward_components"} <= set(schema["observation"]["properties"])
        plans = [{"reset": {"task_id": "add-2", "seed": 3}, "actions": [CALL, ANSWER]},
                 {"reset": {"task_id": "add-2"}, "actions": ["<answer>7</answer>"]}]  # fmt: skip
        res = openenv_client(url, plans)["episodes"]
    good, wrong = res
    assert good["error"] is None and wrong["error"] is None
    assert good["reset"]["task_id"] == "add-2" and good["reset"]["done"] is False
    assert good["reset"]["messages"][0]["role"] == "system" and "add" in {
        t["function"]["name"] for t in good["reset"]["tools"]
    }
    assert good["reset"]["text"] == "What is 2 + 1? Use the add tool."
    call, answer = good["steps"]
    assert "3.0" in call["text"] and call["done"] is False and call["messages"][0]["role"] in ("user", "tool")
    assert answer["done"] is True and answer["reward"] == 1.0 and answer["status"] == "ok"
    assert good["state"]["step_count"] == 2 and good["state"]["termination"] == "answer"
    assert wrong["steps"][-1]["reward"] == 0.0 and wrong["steps"][-1]["status"] == "failed"
    recs = records(out)
    assert [(r["task_id"], r["status"], r["reward"], r["num_turns"]) for r in recs] == [
        ("add-2", "ok", 1.0, 2), ("add-2", "failed", 0.0, 1)]  # fmt: skip
    assert recs[0]["seed"] == 3 and recs[0]["turns"][0]["tool_calls"][0]["name"] == "add"


def test_concurrent_sessions_each_get_their_own_env_and_the_cap_holds(tmp_path):
    with serve_env("AWorld/MCP-v0", stdio_kwargs(4), "--max-sessions", "3") as (url, proc):
        plans = [{"reset": {"task_id": f"add-{i}"},
                  "actions": [CALL.replace('"a": 2', f'"a": {i}'), f"<answer>{i + 1}.0</answer>"]} for i in range(3)]  # fmt: skip
        res = openenv_client(url, plans, concurrent=True)["episodes"]
        assert [e["steps"][-1]["reward"] for e in res] == [1.0, 1.0, 1.0], res
        assert [e["steps"][0]["text"].split()[1] for e in res] == ["1.0", "2.0", "3.0"]
        # A fourth session while three are open is refused (and then the next one is served).
        over = [{"reset": {"task_id": "add-0"}, "actions": [CALL]} for _ in range(4)]
        res = openenv_client(url, over, concurrent=True)["episodes"]
        refused = [e for e in res if e["error"]]
        assert len(refused) == 1, res
        assert "CAPACITY_REACHED" in refused[0]["error"] or "ConnectionClosed" in refused[0]["error"]
        assert wait_until(lambda: httpx.get(url + "/health").json()["sessions"] == 0, 10)
        # Envs are pooled: never more demo servers than sessions.
        assert len([p for p in server_children(proc) if "demo_server" in " ".join(p.cmdline())]) <= 3


def test_a_client_that_vanishes_mid_episode_leaks_nothing(tmp_path):
    out = tmp_path / "episodes.jsonl"
    with serve_env("AWorld/MCP-v0", stdio_kwargs(), "--max-sessions", "1", out=out) as (url, proc):
        for _ in range(3):
            res = openenv_client(url, [{"reset": {"task_id": "add-2"}, "actions": [CALL, ANSWER]}], vanish_after=1)
            assert res == {"vanished_after": 1} or "vanished_after" in json.dumps(res)
            # The session is closed by the server (so the one-session cap lets the next client in)...
            assert wait_until(lambda: httpx.get(url + "/health").json()["sessions"] == 0, 15)
        # ... its episode recorded as void (the client's fault, not a reward of 0), its env reused, not leaked.
        assert [r["termination"] for r in records(out)] == ["policy_error"] * 3
        assert {r["status"] for r in records(out)} == {"void"}
        demo = [p for p in server_children(proc) if "demo_server" in " ".join(p.cmdline())]
        assert len(demo) == 1
        done = openenv_client(url, [{"reset": {"task_id": "add-2"}, "actions": [CALL, ANSWER]}])["episodes"][0]
        assert done["steps"][-1]["reward"] == 1.0
    assert wait_until(lambda: not any(p.is_running() for p in demo), 10)  # the server's exit stopped its servers


def code_reference_actions() -> tuple[str, list[str]]:
    """A Code-v0 task and its reference policy's two turns (computed here, where aworld_gym lives)."""
    import gymnasium as gym

    import aworld_gym  # noqa: F401
    from aworld_gym.envs.code.reference import CodeReferencePolicy

    env = gym.make("AWorld/Code-v0")
    try:
        _, info = env.reset(options={"task_index": 0})
        policy, inner = CodeReferencePolicy(), env.unwrapped
        first = policy.decide(inner)
        second = policy.decide(SimpleNamespace(task=inner.task, turn=1))  # its second turn reads the counter only
        return info["task_id"], [first, second]
    finally:
        env.close()


def test_openenv_client_runs_a_code_episode():
    task_id, actions = code_reference_actions()
    with serve_env("AWorld/Code-v0", {}, "--max-sessions", "2") as (url, proc):
        res = openenv_client(url, [{"reset": {"task_id": task_id}, "actions": actions}] * 2, concurrent=True)
    for ep in res["episodes"]:
        assert ep["error"] is None, ep
        run, answer = ep["steps"]
        assert "is defined" in run["text"] and run["done"] is False
        assert answer["done"] is True and answer["reward"] == 1.0 and answer["status"] == "ok"


# ----- the protocol's edges, in-process (a real uvicorn server and a raw WebSocket) ----------------------------------


@contextlib.contextmanager
def in_process(env_kwargs: dict | None = None, **server_kwargs):
    import uvicorn

    from aworld_gym.trainers.openenv import EnvServer

    server = EnvServer("AWorld/MCP-v0", env_kwargs or demo_env_kwargs(4), **server_kwargs)
    port = free_port()
    uv = uvicorn.Server(server.uvicorn_config("127.0.0.1", port, "error"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    assert wait_until(lambda: uv.started, 30)
    try:
        yield f"127.0.0.1:{port}", server
    finally:
        uv.should_exit = True
        thread.join(30)


async def talk(address: str, frames: list, headers: dict | None = None) -> list[dict]:
    import websockets

    replies = []
    async with websockets.connect(f"ws://{address}/ws", additional_headers=headers) as ws:
        for frame in frames:
            await ws.send(frame if isinstance(frame, str | bytes) else json.dumps(frame))
            replies.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
    return replies


def test_bad_messages_get_clear_errors_and_the_session_goes_on():
    frames = [
        "not json",
        {"type": "dance"},
        {"type": "step", "data": {"text": "<answer>1</answer>"}},  # before any reset
        {"type": "reset", "data": {"task_id": "add-2", "colour": "red"}},
        {"type": "reset", "data": {"task_id": "add-2"}},
        {"type": "step", "data": {"txt": "oops"}},
        {"type": "step", "data": {"text": "<tool_call>{not json</tool_call>"}},  # the model's bad output: observed
        {"type": "step", "data": {"text": ANSWER}},
        {"type": "step", "data": {"text": ANSWER}},  # after the end
        {"type": "state"},
    ]
    with in_process() as (address, server):
        r = asyncio.run(talk(address, frames))
    codes = [x["data"].get("code") if x["type"] == "error" else x["type"] for x in r]
    assert codes == ["INVALID_JSON", "UNKNOWN_TYPE", "EXECUTION_ERROR", "VALIDATION_ERROR", "observation",
                     "VALIDATION_ERROR", "observation", "observation", "EXECUTION_ERROR", "state"]  # fmt: skip
    assert "send a reset first" in r[2]["data"]["message"] and "colour" in r[3]["data"]["message"]
    assert "txt" in r[5]["data"]["message"]
    bad_call = r[6]["data"]
    assert bad_call["done"] is False and "format" in bad_call["observation"]["reward_components"]
    assert r[7]["data"]["done"] is True and "send a reset" in r[8]["data"]["message"]
    assert r[9]["data"]["step_count"] == 2 and r[9]["data"]["termination"] == "answer"


def test_a_token_guards_every_route_but_health():
    import websockets

    with in_process(token="s3cret") as (address, server):
        base = f"http://{address}"
        assert httpx.get(base + "/health").status_code == 200
        assert httpx.get(base + "/schema").status_code == 401
        assert httpx.get(base + "/schema", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert httpx.get(base + "/schema", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        with pytest.raises(websockets.exceptions.InvalidStatus):
            asyncio.run(talk(address, [{"type": "state"}]))
        basic = "Basic " + base64.b64encode(b"aworld:s3cret").decode()
        (state,) = asyncio.run(talk(address, [{"type": "state"}], {"Authorization": basic}))
        assert state["type"] == "state"
    # OpenEnv's own client sends the URL's user:password as HTTP Basic.
    with serve_env("AWorld/MCP-v0", stdio_kwargs(), "--token", "s3cret") as (url, proc):
        ok = openenv_client(url.replace("http://", "http://aworld:s3cret@"),
                            [{"reset": {"task_id": "add-2"}, "actions": [CALL, ANSWER]}])["episodes"][0]  # fmt: skip
        denied = openenv_client(url, [{"reset": {"task_id": "add-2"}, "actions": [CALL]}])["episodes"][0]
    assert ok["error"] is None and ok["steps"][-1]["reward"] == 1.0
    assert denied["error"] and "ConnectionError" in denied["error"]


def test_idle_sessions_are_closed():
    with in_process(session_timeout=0.5) as (address, server):
        (err,) = idle(address)
        assert err["data"]["code"] == "SESSION_ERROR" and "idle" in err["data"]["message"]
        assert wait_until(lambda: server.sessions == 0, 5)


async def _idle(address: str) -> list[dict]:
    import websockets

    async with websockets.connect(f"ws://{address}/ws") as ws:
        first = json.loads(await asyncio.wait_for(ws.recv(), 10))
        with pytest.raises(websockets.exceptions.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
        return [first]


def idle(address: str) -> list[dict]:
    return asyncio.run(_idle(address))


def test_serve_env_cli_generates_a_token_for_a_public_host():
    """Not loopback: a token is generated and printed (it used to refuse to start), and every route but /health
    needs it."""
    with serve_env("AWorld/MCP-v0", stdio_kwargs(), "--host", "0.0.0.0") as (url, proc):
        first, line = proc.stderr.readline().decode(), proc.stderr.readline().decode()
        assert first.startswith("serve-env: AWorld/MCP-v0 at http://<this-host>:"), first
        assert line.startswith("serve-env token: "), line
        token = line.split(": ", 1)[1].strip()
        assert len(token) >= 32
        assert httpx.get(url + "/schema").status_code == 401
        assert httpx.get(url + "/schema", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        assert httpx.get(url + "/health").status_code == 200


def test_http_reset_is_stateless_and_step_points_to_the_websocket():
    with in_process() as (address, server):
        base = f"http://{address}"
        r = httpx.post(base + "/reset", json={"task_id": "add-2"}, timeout=30).json()
        assert r["done"] is False and r["observation"]["task_id"] == "add-2"
        assert httpx.post(base + "/reset", json={"seed": -1}).status_code == 422
        step = httpx.post(base + "/step", json={"action": {"text": ANSWER}})
        assert step.status_code == 409 and "/ws" in step.json()["detail"]
        assert server.pool.made == 1 and len(server.pool._free) == 1  # the env went back to the pool
