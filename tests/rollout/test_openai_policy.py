"""OpenAIPolicy against a real HTTP server speaking the OpenAI chat-completions protocol on 127.0.0.1."""

import functools
import json

import pytest

from aworld_gym.base.errors import ConfigError, last_line
from aworld_gym.rollout.collect import collect
from aworld_gym.rollout.policies.openai_policy import OpenAIPolicy
from tests.fake_openai import FakeOpenAI
from tests.helpers import demo_env_kwargs

ENV = "AWorld/MCP-v0"


@pytest.fixture
def fake():
    with FakeOpenAI() as f:
        yield f


@pytest.mark.parametrize("tool_mode", ["text", "native"])
def test_episodes_with_an_openai_endpoint(fake, tmp_path, tool_mode):
    out = tmp_path / "o.jsonl"
    policy = functools.partial(OpenAIPolicy, model="fake-qwen3", base_url=fake.url, api_key="sk-test",
                               tool_mode=tool_mode, logprobs=True)  # fmt: skip
    s = collect(ENV, policy, episodes=4, concurrency=4, env_kwargs=demo_env_kwargs(4), sink=out, progress=False)
    assert (s.recorded, s.successes) == (4, 4)
    first = fake.requests[0]
    assert first["auth"] == "Bearer sk-test" and first["body"]["model"] == "fake-qwen3"
    assert first["body"]["logprobs"] is True  # the logprob path: tested here only (transformers serve has none)
    assert first["body"]["messages"][0]["role"] == "system"
    if tool_mode == "native":
        assert first["body"]["tools"][0]["type"] == "function"
        assert "<tools>" not in first["body"]["messages"][0]["content"]
    else:
        assert "tools" not in first["body"] and "<tools>" in first["body"]["messages"][0]["content"]
    rec = json.loads(out.read_text().splitlines()[0])
    action = rec["turns"][0]["action"]
    assert action.startswith("<think>\nI need the add tool.\n</think>") and '"name": "add"' in action
    assert rec["turns"][0]["tool_calls"][0]["name"] == "add"
    assert rec["turns"][0]["sampled"]["token_ids"] == [100, 101, 102]
    assert rec["turns"][0]["sampled"]["logprobs"] == pytest.approx([0.0, -0.1, -0.2])


def test_transient_errors_are_retried_others_are_not(fake):
    import gymnasium as gym

    from aworld_gym.base.errors import PolicyError
    from aworld_gym.rollout.driver import run_episode

    env = gym.make(ENV, **demo_env_kwargs(2))
    fake.fail_first = [503, 429, 502]
    p = OpenAIPolicy(model="m", base_url=fake.url, backoff_s=0.01)
    rec = run_episode(env, p, env_id=ENV, options={"task_index": 0})
    assert rec["termination"] == "answer" and p.attempts == 5  # 3 failures + 2 turns
    fake.always = 400
    p = OpenAIPolicy(model="m", base_url=fake.url, backoff_s=0.01)
    rec = run_episode(env, p, env_id=ENV, options={"task_index": 0})
    assert rec["termination"] == "policy_error" and p.attempts == 1 and "BadRequestError" in rec["error"]
    assert last_line(rec["error"]).count("status 400") == 1  # the endpoint's reason (the SDK's message has it), once
    fake.always = 500
    p = OpenAIPolicy(model="m", base_url=fake.url, backoff_s=0.01, retries=2)
    with pytest.raises(PolicyError, match="InternalServerError"):
        p.act(env.unwrapped, "", {})
    assert p.attempts == 3
    env.close()


def test_an_error_status_names_the_endpoints_reason_whatever_the_shape_of_its_body():
    """The SDK's message is only "Error code: 400" for a body not shaped {"error": ...} (transformers serve sends
    {"detail": ...}): the policy's error adds the body's reason, once."""
    import httpx
    import openai

    from aworld_gym.rollout.policies.openai_policy import _endpoint_error

    response = httpx.Response(400, request=httpx.Request("POST", "http://127.0.0.1/v1/chat/completions"))

    def error(body):
        return _endpoint_error(openai.BadRequestError("Error code: 400", response=response, body=body))

    assert error({"detail": "json parser could not\nparse region"}) == (
        "BadRequestError: Error code: 400 (json parser could not parse region)")  # fmt: skip
    assert error({"message": "bad model", "type": "invalid_request_error"}).endswith("(bad model)")
    assert error("x" * 900).endswith("x" * 500 + ")") and error(None) == "BadRequestError: Error code: 400"
    assert _endpoint_error(ValueError("no status")) == "ValueError: no status"
    assert error("<html><body>502 Bad Gateway</body></html>") == "BadRequestError: Error code: 400"  # a proxy's page
    older = openai.BadRequestError("Error code: 400 - {'detail': 'x\\ny'}", response=response, body={"detail": "x\ny"})
    assert _endpoint_error(older) == "BadRequestError: Error code: 400 - {'detail': 'x\\ny'}"  # openai 1.x: once


def test_malformed_replies_are_policy_errors_and_extra_body_goes_into_the_request(fake):
    import gymnasium as gym

    from aworld_gym.base.errors import PolicyError

    env = gym.make(ENV, **demo_env_kwargs(2))
    env.reset(options={"task_index": 0})
    p = OpenAIPolicy(model="m", base_url=fake.url, tool_mode="native", extra_body={"top_k": 20}, retries=0)
    try:
        for payload in ({"choices": []}, {"choices": "x"}, {"choices": [{"message": None}]}, ["not", "an", "object"]):
            fake.payloads = [payload]
            with pytest.raises(PolicyError, match="no choices"):
                p.act(env.unwrapped, "", {})
        fake.payloads = [{"choices": [{"message": {"content": "hi"}, "logprobs": {"content": [{"tok": "x"}]}}]}]
        with pytest.raises(PolicyError, match="malformed: KeyError"):
            p.act(env.unwrapped, "", {})
        fake.payloads = [{"choices": [{"message": {"content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}},
            {"id": "c2", "type": "function", "function": {"name": "add", "arguments": "{not json"}}]}}]}]  # fmt: skip
        action = p.act(env.unwrapped, "", {})
        assert action.text.count("<tool_call>") == 2 and action.tool_calls is None  # the env's parser reports it
        assert fake.requests[-1]["body"]["top_k"] == 20 and "extra_body" not in fake.requests[-1]["body"]
    finally:
        env.close()


def test_the_async_client_speaks_over_aiohttp_and_is_closed_when_the_run_ends(fake, caplog):
    import asyncio

    aiohttp = pytest.importorskip("aiohttp")
    from openai import DefaultAioHttpClient

    from aworld_gym.rollout.policies.openai_policy import _transient

    async def client_class() -> type:
        policy = OpenAIPolicy(model="m", base_url=fake.url)
        client, _ = policy._async_client()
        await policy.aclose()
        assert not policy._async
        return type(client._client)

    assert issubclass(asyncio.run(client_class()), DefaultAioHttpClient)
    policy = OpenAIPolicy(model="m", base_url=fake.url)  # one object shared by every slot of two runs
    for _ in range(2):
        s = collect(ENV, policy, episodes=4, concurrency=4, env_kwargs=demo_env_kwargs(4), progress=False)
        assert s.successes == 4 and not policy._async  # the engine closed its loop's client
    assert "Unclosed" not in caplog.text
    # aiohttp's own errors pass through the SDK's aiohttp transport: a broken response is retried like httpx's
    assert _transient(aiohttp.ClientResponseError(None, (), status=400, message="bad status line"))  # type: ignore[arg-type]
    assert _transient(aiohttp.ServerDisconnectedError()) and not _transient(ValueError("x"))


def test_hung_endpoint_times_out(fake):
    fake.hang_s = 3.0
    policy = functools.partial(OpenAIPolicy, model="m", base_url=fake.url, timeout_s=0.5, retries=1, backoff_s=0.01)
    s = collect(ENV, policy, episodes=2, concurrency=2, env_kwargs=demo_env_kwargs(2), progress=False)
    assert s.recorded == 2 and s.failures == {"policy_error": 2}


def test_configuration_from_aworld_variables(monkeypatch):
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("LLM_MODEL_NAME", "qwen3-32b")
    monkeypatch.setenv("LLM_API_KEY", "k")
    p = OpenAIPolicy()
    assert (p.base_url, p.model, p.api_key) == ("http://127.0.0.1:9/v1", "qwen3-32b", "k")
    import pickle

    assert pickle.loads(pickle.dumps(p)).model == "qwen3-32b"  # ships to Ray actors
    monkeypatch.delenv("LLM_MODEL_NAME")
    with pytest.raises(ConfigError, match="LLM_MODEL_NAME"):
        OpenAIPolicy()


# What each server answers (HTTP 400) when the conversation no longer fits the model's context, as each sends it.
OVERFLOWS = {
    "openai": {"error": {"message": "This model's maximum context length is 8192 tokens. However, your messages "
                         "resulted in 9000 tokens.", "type": "invalid_request_error", "param": "messages",
                         "code": "context_length_exceeded"}},
    "vllm": {"error": {"message": "This model's maximum context length is 2048 tokens. However, your request has "
                       "2100 input tokens. Please reduce the length of the input messages.",
                       "type": "BadRequestError", "param": "input_tokens", "code": 400}},
    "vllm-old": {"object": "error", "message": "This model's maximum context length is 2048 tokens. However, you "
                 "requested 2100 tokens in the messages, Please reduce the length of the messages.",
                 "type": "BadRequestError", "param": None, "code": 400},
    "transformers-serve": {"detail": "The prompt has 2100 tokens, but the model takes at most 2048, prompt and answer "
                           "(`--max-model-len`)."},
}  # fmt: skip


@pytest.mark.parametrize("server", [*OVERFLOWS, "other-400"])
def test_a_context_overflow_answered_by_the_server_ends_the_episode_as_the_models_fault(fake, server):
    """The server's 400 for a history that no longer fits ends the episode with ``context_limit`` (failed, trained
    on), after the turns that fitted; any other 400 stays ``policy_error`` (void). It was ``policy_error`` for all."""
    import gymnasium as gym

    from aworld_gym.rollout.driver import run_episode

    body = OVERFLOWS.get(server, {"error": {"message": "tools[0] is not a valid function", "type": "BadRequestError",
                                            "param": "tools", "code": 400}})  # fmt: skip
    env = gym.make(ENV, **demo_env_kwargs(2))
    fake.payloads = [fake.reply({"model": "m", "messages": [{"role": "user", "content": "What is 1 + 1?"}]})]
    fake.errors = [(400, body)]  # the second turn's request overflows
    p = OpenAIPolicy(model="m", base_url=fake.url, backoff_s=0.01)
    try:
        traj = run_episode(env, p, env_id=ENV, options={"task_index": 0})
    finally:
        env.close()
    assert p.attempts == 2 and traj.num_turns == 1  # never retried
    if server == "other-400":
        assert (traj.termination, traj.status) == ("policy_error", "void")
    else:
        assert (traj.termination, traj.status, traj.weight) == ("context_limit", "failed", 1.0)
        assert "ContextOverflow" in traj.error and (
            "maximum context length" in traj.error or "at most 2048" in traj.error
        )


@pytest.mark.parametrize("aiohttp", [True, False])
def test_a_refused_connection_is_said_as_such_at_once(aiohttp):
    """Nothing listens at the URL: one attempt, and the error says so (it was "Request timed out" after retries)."""
    import asyncio
    import socket

    from aworld_gym.base.errors import PolicyError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    p = OpenAIPolicy(model="m", base_url=url, api_key="k", retries=4)
    with pytest.raises(PolicyError) as caught:
        asyncio.run(p._apost({"model": "m", "messages": []}, None, aiohttp=aiohttp))
    assert str(caught.value) == (
        f"the model endpoint refused the connection: nothing listens at {url} (start the server, or fix --base-url "
        "/ $LLM_BASE_URL)"
    )
    assert p.attempts == 1  # not retried


def test_a_refused_connection_after_the_endpoint_answered_is_a_restart_and_is_retried():
    """An endpoint that answered before and now refuses is restarting (tests/rollout/test_real_server.py restarts
    one mid-run): retried with backoff like any transient failure, and only said to be refused when the retries run
    out. Never reached: said at once (the test above)."""
    import asyncio

    from aworld_gym.base.errors import PolicyError

    p = OpenAIPolicy(model="m", base_url="http://127.0.0.1:9/v1", api_key="k", retries=3, backoff_s=0.001)
    replies = iter([ConnectionRefusedError(111, "refused"), ConnectionRefusedError(111, "refused"), {"ok": 1}])

    async def send():
        reply = next(replies)
        if isinstance(reply, Exception):
            raise reply
        return reply

    p.reached = True
    assert asyncio.run(p._aretry(send)) == {"ok": 1} and p.attempts == 3
    p.attempts = 0

    async def down():
        raise ConnectionRefusedError(111, "refused")

    with pytest.raises(PolicyError, match=r"^the model endpoint refused the connection: nothing listens at"):
        asyncio.run(p._aretry(down))
    assert p.attempts == 4  # every retry spent before it is said
