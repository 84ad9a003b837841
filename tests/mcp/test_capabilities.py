"""Client capabilities through MCPEnv, against a real server whose tools ask the client for things
(``tests/capability_server.py``) over stdio, streamable HTTP and in-process, in both protocol eras: elicitation
(declined by default, and the model sees an error; the form's defaults; a function), sampling (refused by default;
an OpenAI-compatible stand-in; a function), roots from config, and the clientInfo the server sees.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import Any

import pytest

import aworld_gym
from aworld_gym.base.calls import ToolCall
from aworld_gym.base.errors import ConfigError
from aworld_gym.core.env import MCPEnv
from aworld_gym.mcp.capabilities import parse_capabilities
from aworld_gym.mcp.hub import ToolHub
from aworld_gym.mcp.options import ToolOptions
from aworld_gym.mcp.transports.pool import POOL
from tests.capability_server import build
from tests.fake_openai import FakeOpenAI
from tests.helpers import EVERYTHING_JS, ROOT, http_server

TASKS = [{"id": "t", "prompt": "Use the tools.", "answer": "done"}]


def call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def stdio(legacy: bool = False, **extra: Any) -> dict[str, Any]:
    args = ["-m", "tests.capability_server", *(["--legacy"] if legacy else [])]
    return {"command": sys.executable, "args": args, "cwd": str(ROOT), **extra}


@pytest.fixture(scope="module")
def http_url():
    with http_server(["-m", "tests.capability_server", "--transport", "streamable-http"]) as url:
        yield url


@pytest.fixture(scope="module")
def legacy_http_url():
    with http_server(["-m", "tests.capability_server", "--transport", "streamable-http", "--legacy"]) as url:
        yield url


ENTRIES = {  # transport (and era) -> how to make the server entry from the module's URLs
    "stdio": lambda request: stdio(),
    "stdio-legacy": lambda request: stdio(legacy=True),
    "http": lambda request: {"type": "streamable-http", "url": request.getfixturevalue("http_url")},
    "http-legacy": lambda request: {"type": "streamable-http", "url": request.getfixturevalue("legacy_http_url")},
    "inprocess": lambda request: build,
}


@pytest.fixture(params=list(ENTRIES))
def entry(request):
    return ENTRIES[request.param](request)


def make_env(entry: Any, **kwargs: Any) -> MCPEnv:
    env = MCPEnv({"mcpServers": {"cap": entry}}, TASKS, **kwargs)
    env.reset(seed=0)
    return env


def step(env: MCPEnv, action: str) -> tuple[str, dict[str, Any]]:
    obs, _, _, _, info = env.step(action)
    return obs, info


# ----- elicitation --------------------------------------------------------------------------------------------
def test_a_declined_elicitation_is_an_error_the_model_sees(entry):
    with make_env(entry) as env:
        obs, info = step(env, call("book_table", city="Paris"))
    result = info["tool_results"][0]
    assert result["error"] == "tool_error"
    assert result["text"].startswith('Error: the tool asked for input ("Who is booking, and for how many guests?"')
    assert "fields: name, guests" in result["text"] and "declines such requests" in result["text"]
    assert "The tool replied: no booking in Paris" in result["text"]  # the server's own "success" is kept, after
    assert result["text"] in obs and "book_table: the tool asked for input" in info["action_error"]
    [record] = result["client_requests"]
    assert record == {"request": "elicitation", "mode": "form", "message": "Who is booking, and for how many guests?",
                      "fields": ["name", "guests"], "answer": "decline", "by": "decline", "refused": True,
                      "reason": "this environment declines such requests"}  # fmt: skip


def test_accept_defaults_answers_with_the_schema_defaults(entry):
    with make_env(entry, elicitation="accept_defaults") as env:
        _, info = step(env, call("book_table", city="Oslo"))
        _, shut = step(env, call("open_door"))
    result = info["tool_results"][0]
    assert (result["text"], result["error"]) == ("booked in Oslo for Ada, 2 guests", None)
    assert (
        result["client_requests"][0]["answer"] == "accept" and result["client_requests"][0]["by"] == "accept_defaults"
    )
    door = shut["tool_results"][0]  # a required field without a default: declined, and said so
    assert door["error"] == "tool_error" and "answers only with the form's defaults, and code has none" in door["text"]


def test_an_elicitation_function_answers_or_declines(entry):
    seen: list[tuple[str, dict]] = []

    def answer(message: str, schema: dict) -> dict | None:
        seen.append((message, schema))
        return {"name": "Bob", "guests": 5} if "booking" in message else None

    with make_env(entry, elicitation=answer) as env:
        _, booked = step(env, call("book_table", city="Rome"))
        _, shut = step(env, call("open_door"))
    assert booked["tool_results"][0]["text"] == "booked in Rome for Bob, 5 guests"
    assert seen[0][1]["properties"]["guests"]["default"] == 2  # the function gets the requested schema
    assert shut["tool_results"][0]["error"] == "tool_error"
    assert shut["tool_results"][0]["client_requests"][0]["by"] == "callable"


def test_an_async_elicitation_function_with_a_bad_answer_declines():
    async def answer(message: str, schema: dict) -> dict:
        return {"name": "Bob"} if "booking" in message else {"wrong": 1}  # open_door's code is missing

    with make_env(build, elicitation=answer) as env:
        _, booked = step(env, call("book_table", city="Rome"))
        _, shut = step(env, call("open_door"))
    assert booked["tool_results"][0]["text"] == "booked in Rome for Bob, 2 guests"
    assert "the environment's answer failed (ValueError)" in shut["tool_results"][0]["text"]


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_swallowed_refusal_of_a_2025_server_is_still_an_error(transport, request):
    url = request.getfixturevalue("legacy_http_url") if transport == "http" else None
    entry = stdio(legacy=True) if url is None else {"type": "streamable-http", "url": url}
    with make_env(entry) as env:
        _, plain = step(env, call("ask_plain"))
        _, page = step(env, call("open_page"))
    result = plain["tool_results"][0]  # the server said "the user chose decline" as a success
    assert result["error"] == "tool_error" and "The tool replied: the user chose decline" in result["text"]
    url_result = page["tool_results"][0]
    assert url_result["error"] == "tool_error" and "asked the user to open a web page" in url_result["text"]
    assert url_result["client_requests"][0]["answer"] == "cancel"
    assert "s3cret" not in json.dumps(page)  # the page's URL (it may carry a state or a token) is not recorded


@pytest.mark.parametrize("server", ["http_url", "legacy_http_url"])
def test_concurrent_calls_get_the_refusal_of_the_one_that_asked_over_http(server, request):
    # 2026: the input request is in the call's result; 2025: the server sends it on the call's own response stream
    with make_env({"type": "streamable-http", "url": request.getfixturevalue(server)}) as env:
        _, info = step(env, call("book_table", city="Paris") + call("wait", seconds=0.5))
    book, wait = info["tool_results"]
    assert book["error"] == "tool_error" and "client_requests" in book
    assert (wait["error"], wait["text"], "client_requests" in wait) == (None, "waited 0.5", False)


def test_concurrent_calls_on_stdio_of_a_2025_server_both_get_a_hedged_refusal():
    # stdio carries no link from a server's request to the call it serves: with two calls running, both hear of it
    with make_env(stdio(legacy=True)) as env:
        _, info = step(env, call("ask_plain", seconds=0.3) + call("wait", seconds=2.0))
    for result in info["tool_results"]:
        assert result["error"] == "tool_error" and "it may belong to another of them" in result["text"]
        assert result["client_requests"][0]["attribution"] == "one of 2 calls to server 'cap' running then"


# ----- sampling -----------------------------------------------------------------------------------------------
class Summarizer(FakeOpenAI):
    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"role": "assistant", "content": "SHORT"}


def test_sampling_is_refused_by_default(entry):
    with make_env(entry) as env:
        _, info = step(env, call("summarize", text="a long story"))
    result = info["tool_results"][0]
    assert result["error"] == "tool_error"
    assert "the tool asked to use a language model (sampling), which this environment does not allow" in result["text"]
    assert result["client_requests"][0]["answer"] == "refused"
    assert "MCPEnv(sampling=...)" in result["client_requests"][0]["reason"]


def test_sampling_goes_to_an_openai_compatible_endpoint(entry):
    with (
        Summarizer() as fake,
        make_env(entry, sampling={"base_url": fake.url, "model": "m1", "api_key": "sk-x"}) as env,
    ):
        _, info = step(env, call("summarize", text="a long story"))
        assert str(env.hub.capabilities).count("sk-x") == 0  # the key is in no repr
    result = info["tool_results"][0]
    assert (result["text"], result["error"]) == ("summary: SHORT (model m1)", None)
    [sent] = fake.requests
    assert sent["auth"] == "Bearer sk-x" and sent["body"]["model"] == "m1" and sent["body"]["max_tokens"] == 64
    assert sent["body"]["messages"] == [{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Summarize: a long story"}]  # fmt: skip
    assert result["client_requests"] == [{"request": "sampling", "answer": "answered", "by": "endpoint",
                                          "model": "m1", "refused": False}]  # fmt: skip
    assert "sk-x" not in json.dumps(info)


def test_sampling_by_a_function_and_a_failing_endpoint():
    got: list[Any] = []

    def policy(messages: list[dict], options: dict) -> str:
        got.append((messages, options))
        return "from the policy"

    with make_env(build, sampling=policy) as env:
        _, info = step(env, call("summarize", text="x"))
    assert info["tool_results"][0]["text"].startswith("summary: from the policy")
    assert got[0][1] == {"max_tokens": 64}
    with Summarizer() as fake:
        fake.always = 500
        with make_env(build, sampling={"base_url": fake.url, "model": "m"}) as env:
            _, info = step(env, call("summarize", text="x"))
    result = info["tool_results"][0]
    assert result["error"] == "tool_error" and "HTTP 500" in result["text"]
    assert result["client_requests"][0]["answer"] == "failed"


# ----- roots, clientInfo --------------------------------------------------------------------------------------
def test_roots_come_from_config(entry, tmp_path):
    with make_env(entry, roots=[tmp_path, "file:///srv/data"]) as env:
        _, info = step(env, call("my_roots"))
    assert info["tool_results"][0]["text"] == f"{tmp_path.resolve().as_uri()}\nfile:///srv/data"
    assert info["tool_results"][0]["client_requests"][0]["answer"] == "listed"


def test_without_roots_the_capability_is_not_declared():
    with make_env(build) as env:
        _, info = step(env, call("my_roots"))
    assert info["tool_results"][0]["error"] == "tool_error"  # the server refuses: the client has no roots


def test_work_folders_are_the_roots_an_env_names(tmp_path):
    class WithWork(MCPEnv):
        def work_folders(self):
            return [tmp_path]

    with WithWork({"mcpServers": {"cap": build}}, TASKS, roots=["{work}"]) as env:
        env.reset(seed=0)
        _, info = step(env, call("my_roots"))
    assert info["tool_results"][0]["text"] == tmp_path.resolve().as_uri()
    with pytest.raises(ConfigError, match=r"roots has '\{work\}' .* this env has none"):
        MCPEnv({"mcpServers": {"cap": build}}, TASKS, roots=["{work}"])


def test_the_server_sees_aworld_gym_and_its_version(entry):
    with make_env(entry) as env:
        _, info = step(env, call("whoami"))
    assert info["tool_results"][0]["text"] == f"aworld-gym {aworld_gym.__version__}"


def test_the_async_face_marks_refusals_too():
    async def run() -> dict[str, Any]:
        env = MCPEnv({"mcpServers": {"cap": build}}, TASKS)
        try:
            await env.areset(seed=0)
            return (await env.astep(call("book_table", city="Paris")))[4]
        finally:
            await env.aclose()

    assert asyncio.run(run())["tool_results"][0]["error"] == "tool_error"


# ----- configuration ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"elicitation": "accept"}, "elicitation must be 'decline', 'accept_defaults' or a function"),
        ({"sampling": {"base_url": "http://x/v1"}}, "sampling needs 'base_url' and 'model'"),
        ({"sampling": {"base_url": "ftp://x", "model": "m"}}, "base_url must be an http"),
        ({"sampling": "openai"}, "sampling must be None"),
        ({"roots": "/data"}, "roots must be a list"),
        ({"roots": ["https://example.com/x"]}, "MCP roots are file:// only"),
    ],
)
def test_bad_settings_are_clear_errors(kwargs, fragment):
    with pytest.raises(ConfigError, match=re.escape(fragment)) as err:
        MCPEnv({"mcpServers": {"cap": build}}, TASKS, **kwargs)
    assert str(err.value).startswith("MCPEnv: ")  # the message names what was misconfigured


def test_a_server_entry_has_its_own_settings(http_url):
    entry = {"type": "streamable-http", "url": http_url, "elicitation": "accept_defaults", "roots": ["/srv"]}
    with make_env(entry) as env:  # the env's default (decline) is overridden for this server
        _, info = step(env, call("book_table", city="Oslo"))
        _, roots = step(env, call("my_roots"))
    assert info["tool_results"][0]["text"] == "booked in Oslo for Ada, 2 guests"
    assert roots["tool_results"][0]["text"] == "file:///srv"
    with pytest.raises(ConfigError, match=r"mcpServers\['cap'\]: elicitation must be"):
        MCPEnv({"mcpServers": {"cap": {**entry, "elicitation": "yes"}}}, TASKS)


def test_shared_sessions_are_shared_only_by_hubs_that_answer_alike(http_url):
    config = {"mcpServers": {"cap": {"type": "streamable-http", "url": http_url, "share_session": True}}}
    defaults = parse_capabilities("accept_defaults")

    async def run() -> tuple[list[int], list[str]]:
        hubs = [ToolHub(config), ToolHub(config), ToolHub(config, options=ToolOptions(elicitation="accept_defaults"))]
        for hub in hubs:
            await hub.astart()
        try:
            spec = hubs[0].specs[0]
            refs = [sum(r for _, r in POOL.members(spec)), sum(r for _, r in POOL.members(spec, caps=defaults))]
            texts = [(await h.acall([ToolCall("book_table", {"city": "Oslo"})]))[0].text for h in hubs]
            return refs, texts
        finally:
            for hub in hubs:
                await hub.aclose()

    refs, texts = asyncio.run(run())
    assert refs == [2, 1]  # the two default hubs share one session; the third has its own
    assert [t.startswith("Error: the tool asked for input") for t in texts] == [True, True, False]
    assert texts[2] == "booked in Oslo for Ada, 2 guests"


# ----- a third-party server: the official server-everything (TypeScript SDK, 2025-era, stdio) ------------------
@pytest.mark.skipif(not EVERYTHING_JS.exists(), reason="npm install has not been run")
def test_server_everything_asks_and_is_answered(tmp_path):
    entry = {"command": "node", "args": [str(EVERYTHING_JS), "stdio"]}
    with make_env(entry) as env:  # the defaults: its "user declined" answer becomes an error
        names = {t["function"]["name"] for t in env.tools}
        assert {"trigger-elicitation-request", "trigger-sampling-request"} <= names  # shown: the client can be asked
        assert "get-roots-list" not in names  # roots are not declared without roots=
        _, declined = step(env, call("trigger-elicitation-request"))
        _, refused = step(env, call("trigger-sampling-request", prompt="hi", maxTokens=20))
        _, page = step(env, call("trigger-url-elicitation", url="https://example.com/sign-in"))
    assert declined["tool_results"][0]["error"] == "tool_error"
    assert "The tool replied: ❌ User declined" in declined["tool_results"][0]["text"]
    assert "which this environment does not allow" in refused["tool_results"][0]["text"]
    assert page["tool_results"][0]["client_requests"][0]["answer"] == "cancel"
    with Summarizer() as fake, make_env(entry, elicitation="accept_defaults", roots=[tmp_path],
                                        sampling={"base_url": fake.url, "model": "m"}) as env:  # fmt: skip
        _, no_name = step(env, call("trigger-elicitation-request"))
        _, sampled = step(env, call("trigger-sampling-request", prompt="hi", maxTokens=20))
        _, roots = step(env, call("get-roots-list"))
    assert "and name has none" in no_name["tool_results"][0]["text"]  # "name" is required and has no default
    assert sampled["tool_results"][0]["error"] is None and '"text": "SHORT"' in sampled["tool_results"][0]["text"]
    assert fake.requests[0]["body"]["temperature"] == 0.7
    assert tmp_path.resolve().as_uri() in roots["tool_results"][0]["text"]
    with make_env(entry, elicitation=lambda message, schema: {"name": "Ada"}) as env:
        _, given = step(env, call("trigger-elicitation-request"))
    assert (
        given["tool_results"][0]["error"] is None
        and "User provided the requested information" in given["tool_results"][0]["text"]
    )


def test_gaia_lists_its_data_folder_as_work_and_keeps_an_extra_servers_own_settings():
    import gymnasium as gym

    extra = {
        "cap": {**stdio(), "elicitation": "accept_defaults", "sampling": {"base_url": "http://x/v1", "model": "m"}}
    }
    env = gym.make("AWorld/GAIA-v0", python_server="inprocess", roots=["{work}"], mcp_config={"mcpServers": extra})
    try:
        hub, folder = env.unwrapped.hub, env.unwrapped.data_folder.resolve()
        assert hub.capabilities.roots == ((folder.as_uri(), folder.name),)
        assert (hub._caps["cap"].elicitation, hub._caps["cap"].sampling.model) == ("accept_defaults", "m")
        assert hub._caps["files"].elicitation == "decline"  # GAIA's own servers keep the env's settings
        with env.unwrapped as inner:
            inner.reset(seed=0)
            _, info = step(inner, call("my_roots"))
        assert info["tool_results"][0]["text"] == folder.as_uri()
    finally:
        env.close()
