"""Hostile endpoints against OpenAIPolicy, over real HTTP on 127.0.0.1: a reply that trickles bytes, a lone surrogate.

An outside attack round found that an endpoint sending one byte every half second was never ended by ``timeout_s``
(the SDK's timeout bounds each read, not the request), and that a lone surrogate in a reply could end the episode.
"""

import functools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import gymnasium as gym
import pytest

from aworld_gym.base.errors import PolicyError
from aworld_gym.core.actions import HermesParser
from aworld_gym.rollout.collect import collect
from aworld_gym.rollout.policies.openai_policy import OpenAIPolicy
from tests.fake_openai import FakeOpenAI
from tests.helpers import demo_env_kwargs

ENV = "AWorld/MCP-v0"
_MESSAGE = {"role": "assistant", "content": "<answer>1.0</answer>"}
_CHOICE = {"index": 0, "message": _MESSAGE, "finish_reason": "stop"}
REPLY = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [_CHOICE]}).encode()


class TrickleServer:
    """Answers every POST one byte per ``gap_s``: after the headers (``body``) or from the status line (``head``)."""

    def __init__(self, mode: str, gap_s: float = 0.5) -> None:
        self.mode, self.gap_s, self.requests = mode, gap_s, 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                server.requests += 1
                head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(REPLY)}\r\n\r\n"
                sent = 0 if server.mode == "head" else len(head)
                if sent:
                    self.wfile.write(head.encode())
                data = head.encode()[sent:] + REPLY
                try:
                    for i in range(len(data)):
                        self.wfile.write(data[i : i + 1])
                        self.wfile.flush()
                        time.sleep(server.gap_s)
                except OSError:  # the client gave up: what the test wants
                    pass
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "TrickleServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module", params=["body", "head"])
def trickle(request):
    with TrickleServer(request.param) as server:
        yield server


class _Env:
    def __init__(self) -> None:
        self.messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "What is 1 + 1?"}]
        self.tools: list = []
        self.preamble = ""


def test_a_trickling_reply_ends_at_timeout_s_in_collect(trickle):
    """The async face, as ``collect`` drives it: the episode ends as a policy error in about timeout_s."""
    policy = functools.partial(OpenAIPolicy, model="m", base_url=trickle.url, timeout_s=2, retries=0)
    t0 = time.perf_counter()
    s = collect(ENV, policy, episodes=1, concurrency=1, env_kwargs=demo_env_kwargs(1), progress=False)
    elapsed = time.perf_counter() - t0
    assert s.recorded == 1 and s.failures == {"policy_error": 1}
    # the env's start is inside this clock too, so the bound is loose (it holds at 4x load) and still far under the
    # reply's own length, which the fixture sets: one byte per 0.5 s, about 2 minutes (what it took before)
    assert elapsed < 30, f"{elapsed:.1f} s"


def test_a_trickling_reply_ends_at_timeout_s_on_the_sync_face_and_each_retry_has_its_own(trickle):
    policy = OpenAIPolicy(model="m", base_url=trickle.url, timeout_s=1, retries=1, backoff_s=0.01)
    before = trickle.requests
    t0 = time.perf_counter()
    with pytest.raises(PolicyError, match="ReplyTimeout: no complete reply within timeout_s=1 s") as caught:
        policy.act(_Env(), "", {})
    elapsed = time.perf_counter() - t0
    # two attempts of 1 s each: at least 2 s at any load; the upper bound holds at 4x load and is far under the
    # trickled reply's minutes (one byte per 0.5 s), what one attempt took before
    assert 1.9 < elapsed < 20, f"{elapsed:.1f} s"
    assert policy.attempts == 2 and trickle.requests - before == 2
    assert isinstance(caught.value.__cause__, TimeoutError)


def test_a_lone_surrogate_in_a_reply_is_replaced_and_the_episode_goes_on():
    """Content, reasoning and a native call's name and arguments holding lone surrogates: the next request is still
    sent (its JSON must be UTF-8) and the episode is scored, with U+FFFD where the surrogates were."""

    class Surrogates(FakeOpenAI):
        def answer(self, body: dict[str, Any]) -> dict[str, Any]:
            tool_msgs = [m for m in body["messages"] if m["role"] == "tool"]
            if len(tool_msgs) == 0:
                return {"role": "assistant", "content": "\ud800 first", "reasoning_content": "\udfff",
                        "tool_calls": [{"id": "c1", "type": "function", "function": {
                            "name": "add", "arguments": '{"a": 1, "b": 1, "note": "\\ud800"}'}}]}  # fmt: skip
            if len(tool_msgs) == 1:
                call = json.dumps({"name": "add", "arguments": {"a": 0, "b": 1}})
                return {"role": "assistant", "content": f"\udc80 <tool_call>{call}</tool_call>"}
            return {"role": "assistant", "content": "<answer>1.0</answer> \ud83d"}

    with Surrogates() as fake:
        policy = OpenAIPolicy(model="m", base_url=fake.url, tool_mode="native", retries=0)
        env = gym.make(ENV, **demo_env_kwargs(1))
        try:
            obs, info = env.reset(seed=0)
            actions, done = [], False
            while not done:
                action = policy.act(env.unwrapped, obs, info)  # the sync face runs the async request
                actions.append(action)
                obs, reward, terminated, truncated, info = env.step(action)
                done = terminated or truncated or len(actions) > 4
        finally:
            env.close()
        assert len(fake.requests) == 3  # before: the second request failed to encode (a policy error)
        texts = [a.text for a in actions]
        assert texts[0].startswith("<think>\n\ufffd\n</think>\n\ufffd first") and texts[1].startswith("\ufffd ")
        assert texts[2].endswith("\ufffd") and (terminated, reward > 0) == (True, True)
        for text in texts:
            text.encode()  # nothing the policy hands on holds a lone surrogate
            assert HermesParser().parse(text) is not None
        sent = [json.dumps(r["body"], ensure_ascii=False) for r in fake.requests]
        assert all("\ufffd" in s for s in sent[1:])  # the native call's arguments were sent with U+FFFD
