"""ToolHub against real servers: in-process, stdio (a child process) and streamable HTTP on 127.0.0.1."""

import sys
import time
from dataclasses import replace

import pytest

from aworld_gym.base.calls import ToolCall
from aworld_gym.base.errors import ServerError
from aworld_gym.mcp.demo_server import build_server
from aworld_gym.mcp.hub import ToolHub
from aworld_gym.mcp.options import ToolOptions
from tests.helpers import EVERYTHING_JS, child_pids, http_config, stdio_config, wait_until


@pytest.fixture(params=["inprocess", "stdio", "http", "sse"])
def hub(request, http_url, sse_url):
    config = {
        "inprocess": lambda: {"mcpServers": {"demo": build_server()}},
        "stdio": stdio_config,
        "http": lambda: http_config(http_url),
        "sse": lambda: {"mcpServers": {"demo": {"type": "sse", "url": sse_url, "headers": {"X-Test": "1"}}}},
    }[request.param]()
    h = ToolHub(config, options=ToolOptions(timeout=3))
    h.start()
    yield h
    h.close()


def test_lists_openai_schemas_and_calls(hub):
    names = hub.tool_names
    assert {"add", "echo", "noop", "counter"} <= set(names)
    add = next(t for t in hub.tool_schemas() if t["function"]["name"] == "add")
    assert add["type"] == "function"
    assert add["function"]["parameters"]["required"] == ["a", "b"]
    assert "Add two numbers" in add["function"]["description"]
    r = hub.call([ToolCall("add", {"a": 2, "b": 3}), ToolCall("echo", {"text": "héllo \x00 中"})])
    assert [x.text for x in r] == ["5.0", "héllo  中"]  # unicode kept; the NUL removed (the result sanitiser)
    assert all(x.error is None and x.server == "demo" for x in r)


def test_concurrent_calls_run_in_parallel(hub):
    """Four 1 s sleeps one after another take at least 4 s of wall time however fast the machine; at once, 1 s and
    the calls' overhead. The bound, 3.5 s, leaves 2.5 s for the overhead (a few ms on a quiet machine), so it holds
    at 4x load, and serial calls can never pass it (the servers' other processes cannot hold these calls' sleeps
    shorter). The calls meet (tests/helpers.py meeting_server) only in-process; this covers every transport."""
    t0 = time.perf_counter()
    r = hub.call([ToolCall("sleep", {"seconds": 1.0}, id=str(i)) for i in range(4)])
    elapsed = time.perf_counter() - t0
    assert [x.text for x in r] == ["slept 1.0"] * 4
    assert elapsed < 3.5, f"4 x 1 s calls took {elapsed:.2f} s: at least 4 s run one at a time, so not all concurrent"


def test_error_paths_are_results_not_exceptions(hub):
    r = hub.call(
        [
            ToolCall("nope", {}),
            ToolCall("add", {"a": 1}),
            ToolCall("add", {"a": "x", "b": 1}),
            ToolCall("echo", {"txt": "typo"}),
            ToolCall("echo", {"text": "y" * 300_000}),
            ToolCall("fail", {"message": "boom"}),
            ToolCall("big_output", {"chars": 50_000}),
        ]
    )
    kinds = [x.error for x in r]
    assert kinds == ["unknown_tool", "bad_arguments", "bad_arguments", "bad_arguments", "too_large", "tool_error", None]
    assert "Available tools:" in r[0].text and "'b' is a required property" in r[1].text
    assert "unknown argument(s) 'txt'; expected: text" in r[3].text
    assert "boom" in r[5].text
    assert r[6].truncated and "output truncated: showing the first 20000 of 50000" in r[6].text


def test_hung_tool_times_out_and_hub_still_works(hub):
    t0 = time.perf_counter()
    r = hub.call([ToolCall("sleep", {"seconds": 30})])[0]
    assert r.error == "timeout" and "did not answer within 3 s" in r.text
    assert time.perf_counter() - t0 < 20  # ended at its 3 s timeout, not when the 30 s tool returned (any load)
    assert hub.call([ToolCall("noop", {})])[0].text == "ok"


def test_per_episode_state_via_meta(hub):
    hub.begin_episode()
    assert [hub.call([ToolCall("counter", {})])[0].text for _ in range(3)] == ["1", "2", "3"]
    hub.begin_episode()
    assert hub.call([ToolCall("counter", {})])[0].text == "1"


def test_allow_deny_and_clashing_names():
    h = ToolHub(
        servers={"a": build_server(), "b": build_server()},
        options=ToolOptions(allow=["*add", "*echo", "a__noop"], deny=["b__echo"]),
    )
    with h:
        assert sorted(h.tool_names) == ["a__add", "a__echo", "a__noop", "b__add"]
        assert h.call([ToolCall("b__echo", {"text": "x"})])[0].error == "unknown_tool"
        assert h.call([ToolCall("a__add", {"a": 1, "b": 1})])[0].text == "2.0"
    solo = ToolHub(servers={"a": build_server()}, options=ToolOptions(deny=["crash", "sleep"]))
    with solo:
        assert "add" in solo.tool_names and "crash" not in solo.tool_names


def test_dead_stdio_server_is_restarted():
    h = ToolHub(stdio_config(), options=ToolOptions(timeout=5)).start()
    try:
        first = int(h.call([ToolCall("pid", {})])[0].text)
        r = h.call([ToolCall("crash", {})])[0]
        assert r.error == "server_died"
        second = int(h.call([ToolCall("pid", {})])[0].text)
        assert second != first and h.restarts == 1
    finally:
        h.close()


def test_close_twice_and_no_child_left():
    before = child_pids()
    h = ToolHub(
        {"mcpServers": {"one": stdio_config()["mcpServers"]["demo"], "two": stdio_config()["mcpServers"]["demo"]}}
    )
    h.start()
    assert len(child_pids() - before) >= 2
    h.close()
    h.close()
    assert wait_until(lambda: not (child_pids() - before)), child_pids() - before


def test_unstartable_server_is_a_clear_error():
    bad = {
        "mcpServers": {
            "broken": {
                "command": sys.executable,
                "args": ["-c", "import sys; sys.stderr.write('no luck'); sys.exit(2)"],
            }
        }
    }
    with pytest.raises(ServerError, match=r"'broken'.*no luck"):
        ToolHub(bad).start()
    with pytest.raises(ServerError, match="broken2"):
        ToolHub({"mcpServers": {"broken2": {"command": "/no/such/binary"}}}).start()


def test_async_face_from_another_loop():
    import asyncio

    async def main():
        h = ToolHub(servers={"d": build_server()})
        await h.astart()
        results = await asyncio.gather(*(h.acall([ToolCall("add", {"a": i, "b": 1})]) for i in range(5)))
        await h.aclose()
        return [r[0].text for r in results]

    assert asyncio.run(main()) == ["1.0", "2.0", "3.0", "4.0", "5.0"]


@pytest.mark.skipif(not EVERYTHING_JS.exists(), reason="npm install has not been run")
def test_third_party_server_as_an_env():
    """server-everything behind AWorld/MCP-v0: check_env and a scored episode."""
    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env

    import aworld_gym  # noqa: F401

    config = {"mcpServers": {"everything": {"command": "node", "args": [str(EVERYTHING_JS), "stdio"]}}}
    env = gym.make("AWorld/MCP-v0", mcp_config=config, tasks=[{"id": "s", "prompt": "2+3?", "answer": "5"}],
                   allow_tools=["echo", "get-sum"])  # fmt: skip
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=0)
    assert sorted(t["function"]["name"] for t in info["tools"]) == ["echo", "get-sum"]
    obs, *_ = env.step('<tool_call>{"name": "get-sum", "arguments": {"a": 2, "b": 3}}</tool_call>')
    assert "The sum of 2 and 3 is 5." in obs
    assert env.step("<answer>5</answer>")[1] == 1.0
    env.close()


@pytest.mark.skipif(not EVERYTHING_JS.exists(), reason="npm install has not been run")
def test_third_party_server_everything():
    """The official @modelcontextprotocol/server-everything (pinned in package.json) over stdio."""
    h = ToolHub({"mcpServers": {"everything": {"command": "node", "args": [str(EVERYTHING_JS), "stdio"]}}})
    with h:
        assert {"echo", "get-sum"} <= set(h.tool_names)
        r = h.call(
            [
                ToolCall("echo", {"message": "héllo"}),
                ToolCall("get-sum", {"a": 2, "b": 3}),
                ToolCall("get-sum", {"a": "2"}),
            ]
        )
        assert r[0].text == "Echo: héllo" and "5" in r[1].text and r[2].error == "bad_arguments"


def test_shared_session_survives_one_failed_call(http_url):
    """Envs on one loop share a session (share_session); one call failing off the transport does not kill it."""
    import asyncio

    spec = {"mcpServers": {"demo": {"type": "streamable-http", "url": http_url, "share_session": True}}}

    async def main():
        a, b = ToolHub(spec), ToolHub(spec)
        await a.astart()
        await b.astart()
        conn = a._conns[0]
        assert conn is b._conns[0] and conn.shared  # one session for both hubs
        real = conn.client.call_tool
        calls = {"n": 0}

        async def flaky(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("a result that did not validate")
            return await real(*args, **kwargs)

        conn.client.call_tool = flaky
        bad = (await a.acall([ToolCall("noop", {})]))[0]
        good = (await b.acall([ToolCall("add", {"a": 1, "b": 2})]))[0]
        generation = conn.generation
        await a.aclose()
        still = (await b.acall([ToolCall("noop", {})]))[0]  # b keeps the session after a lets go
        await b.aclose()
        return bad, good, still, conn.alive, generation, conn.generation

    bad, good, still, alive, gen_before, gen_after = asyncio.run(main())
    assert bad.error == "tool_error" and "did not validate" in bad.text
    assert good.text == "3.0" and still.text == "ok"
    assert gen_before == gen_after == 1  # never restarted
    assert alive is False  # closed by the last hub


def test_guard_hidden_arguments_and_internal_calls():
    """The env-side controls the browser env relies on, on the demo server: a guard that refuses calls, arguments
    removed from the agent's schema, and internal calls to a tool the agent cannot see."""
    import asyncio

    def guard(name, args):
        return "numbers over 100 are refused" if name == "add" and args.get("a", 0) > 100 else None

    h = ToolHub(
        servers={"d": build_server()},
        options=ToolOptions(deny=["pid"], guard=guard, hidden_arguments={"echo": ["text"]}),
    )
    with h:
        refused, ok = h.call([ToolCall("add", {"a": 101, "b": 1}), ToolCall("add", {"a": 1, "b": 1})])
        assert (refused.error, refused.text) == ("refused", "Error: numbers over 100 are refused")
        assert ok.error is None and ok.text == "2.0"
        echo = next(s for s in h.tool_schemas() if s["function"]["name"] == "echo")
        assert "text" not in echo["function"]["parameters"]["properties"]
        assert h.call([ToolCall("echo", {"text": "x"})])[0].error == "bad_arguments"
        assert "pid" not in h.tool_names and h.call([ToolCall("pid", {})])[0].error == "unknown_tool"
        raw = h.run_sync(h.acall_internal("pid"))  # hidden from the agent, callable by the env
        assert not raw.is_error and int(raw.content[0].text) > 0
        assert h.run_sync(h.acall_internal("echo", {"text": "y"})).content[0].text == "y"  # no guard/hiding inside
        with pytest.raises(ServerError, match="no server has a tool"):
            h.run_sync(h.acall_internal("nope"))

    async def internal():
        a = ToolHub(servers={"d": build_server()}, options=ToolOptions(deny=["pid"]))
        try:
            return await a.acall_internal("pid")
        finally:
            await a.aclose()

    assert int(asyncio.run(internal()).content[0].text) > 0


def test_sequential_keyword_runs_a_turn_in_order():
    """``sequential=True`` (a keyword now, still an attribute): a turn's calls run one after another, in order."""
    from aworld_gym.mcp.functions import function_server

    events: list[str] = []

    async def step(name: str) -> str:
        import asyncio

        events.append(f"start {name}")
        await asyncio.sleep(0.01)
        events.append(f"end {name}")
        return name

    calls = [ToolCall("step", {"name": n}) for n in "abc"]
    with ToolHub(servers={"f": function_server([step])}, options=ToolOptions(sequential=True)) as h:
        assert h.options.sequential is True
        assert [r.text for r in h.call(calls)] == ["a", "b", "c"]
        assert events == ["start a", "end a", "start b", "end b", "start c", "end c"]
        events.clear()
        h.options = replace(h.options, sequential=False)  # options may be replaced between steps
        assert [r.text for r in h.call(calls)] == ["a", "b", "c"]
        assert events[:3] == ["start a", "start b", "start c"]  # concurrent
    assert ToolHub(servers={"f": function_server([step])}).options.sequential is False
