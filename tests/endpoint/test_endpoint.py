"""The token-recording OpenAI-compatible endpoint (issue 50, step 1), driven by the real ``openai`` SDK: every call
recorded token-exactly (the tiny Qwen3 sampling in-process; its logprobs equal a fresh forward pass), Hermes tool
calls as OpenAI ``tool_calls`` (streamed and not), 64 concurrent episodes kept apart, and every bad request or late
call answered in OpenAI's error shape while the endpoint goes on serving."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest
import requests

from aworld_gym.endpoint import Generated, HFBackend, TokenEndpoint
from aworld_gym.fixtures.tiny_qwen3 import build_tiny_qwen3

TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two numbers.",
                                           "parameters": {"type": "object", "properties": {
                                               "a": {"type": "number"}, "b": {"type": "number"}}}}}]  # fmt: skip
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny") / "qwen3")


class Scripted:
    """A backend that 'samples' the given texts in turn (the end-of-turn token after each), logprob -0.5 each: it
    isolates the endpoint's parsing and serving; the real sampler (HFBackend) is tested below."""

    weights_version = 7
    context = None

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts, self.prompts = tokenizer, list(texts), []

    def generate(self, prompt_ids, sampling):
        self.prompts.append(prompt_ids)
        text = self.texts.pop(0) if len(self.texts) > 1 else self.texts[0]
        if text == "RAISE":
            raise RuntimeError("the GPU fell over")
        ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
        return Generated(ids, [-0.5] * len(ids), "stop")


def scripted(tiny, texts, **kw):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    return TokenEndpoint(Scripted(tok, texts), **kw)


def test_a_call_is_recorded_token_exactly_and_its_logprobs_are_the_models(tiny):
    import torch

    backend = HFBackend(tiny)
    messages = [{"role": "system", "content": "You add."}, {"role": "user", "content": "What is 1 + 2?"}]
    with TokenEndpoint(backend, max_tokens=24) as endpoint:
        episode, url = endpoint.open_episode("ep-1")
        client = openai.OpenAI(base_url=url, api_key="unused")
        reply = client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, temperature=0.7,
                                               logprobs=True)  # fmt: skip
        (record,) = endpoint.close_episode(episode)
    tok = backend.tokenizer
    # the prompt: the model's own chat template over the request's messages and tools
    assert record.prompt_ids == tok.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True,
                                                        tokenize=True, return_dict=False)  # fmt: skip
    # the completion: what was sampled, which is what the agent got (the end-of-turn token left out of the text)
    ids = record.completion_ids
    assert len(ids) == len(record.logprobs) == reply.usage.completion_tokens and 0 < len(ids) <= 24
    shown = ids[:-1] if ids[-1] == tok.eos_token_id else ids
    assert reply.choices[0].message.content == tok.decode(shown, skip_special_tokens=False).strip()
    assert [t.logprob for t in reply.choices[0].logprobs.content] == record.logprobs
    assert record.finish_reason == reply.choices[0].finish_reason and record.weights_version == 0
    # the logprobs: a fresh forward pass over prompt + completion, at the request's temperature
    with torch.no_grad():
        logits = backend.model(torch.tensor([record.prompt_ids + ids])).logits[0, len(record.prompt_ids) - 1 : -1]
    fresh = torch.log_softmax(logits.float() / 0.7, dim=-1).gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1)
    assert fresh.tolist() == pytest.approx(record.logprobs, abs=1e-4)


def test_tool_calls_reasoning_and_stop_strings_through_the_sdk_streamed_and_not(tiny):
    texts = [f"<think>\nadd them\n</think>\n\n{CALL}", f"<think>\nadd them\n</think>\n\n{CALL}",
             '<tool_call>\n{"name": "add", "arguments": {"a": 1,}\n</tool_call>', "The sum is 3. Done, END here",
             "The sum is 3."]  # fmt: skip
    with scripted(tiny, texts) as endpoint:
        episode, url = endpoint.open_episode()
        client = openai.OpenAI(base_url=url, api_key="unused")
        ask = {"model": "m", "messages": [{"role": "user", "content": "What is 1 + 2?"}], "tools": TOOLS}
        plain = client.chat.completions.create(**ask)
        message = plain.choices[0].message
        (call,) = message.tool_calls
        assert (call.function.name, json.loads(call.function.arguments)) == ("add", {"a": 1, "b": 2})
        assert plain.choices[0].finish_reason == "tool_calls" and message.content is None
        assert message.model_extra["reasoning_content"] == "add them"
        streamed = list(client.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True}))
        calls = [c for ch in streamed if ch.choices for c in (ch.choices[0].delta.tool_calls or [])]
        assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("add", {"a": 1, "b": 2})]
        assert streamed[-2].choices[0].finish_reason == "tool_calls" and streamed[-1].usage.prompt_tokens > 0
        broken = client.chat.completions.create(**ask)  # a block that does not decode: the text, whole, no call
        assert broken.choices[0].message.tool_calls is None and "<tool_call>" in broken.choices[0].message.content
        # a stop string: the text before it; the ids up to the token that completes it
        stopped = client.chat.completions.create(**ask, stop=["END"])
        assert (
            stopped.choices[0].message.content == "The sum is 3. Done," and stopped.choices[0].finish_reason == "stop"
        )
        # the answer to the tool's result: the assistant's call and the tool message rendered by the template
        follow = [*ask["messages"], message.model_dump(exclude_none=True),
                  {"role": "tool", "tool_call_id": call.id, "content": "3"}]  # fmt: skip
        assert (
            client.chat.completions.create(**{**ask, "messages": follow}).choices[0].message.content == "The sum is 3."
        )
        records = endpoint.close_episode(episode)
    tok = endpoint.tokenizer
    assert [r.finish_reason for r in records] == ["tool_calls", "tool_calls", "stop", "stop", "stop"]
    assert [r.tool_calls for r in records] == [1, 1, 0, 0, 0] and {r.weights_version for r in records} == {7}
    cut = records[3]
    assert "END" in tok.decode(cut.completion_ids) and tok.eos_token_id not in cut.completion_ids
    assert len(cut.logprobs) == len(cut.completion_ids) < len(tok.encode("The sum is 3. Done, END here")) + 1
    assert "<tool_response>\n3\n</tool_response>" in tok.decode(records[4].prompt_ids)


def test_64_concurrent_episodes_from_paths_and_headers_stay_apart(tiny):
    with scripted(tiny, ["ok"]) as endpoint:

        async def agent(i: int) -> None:
            episode, url = endpoint.open_episode(f"agent-{i}")
            if i % 2:  # half of them name their episode by a header on the shared base URL
                client = openai.AsyncOpenAI(base_url=endpoint.base_url(), api_key="x",
                                            default_headers={"X-AWorld-Episode": episode})  # fmt: skip
            else:
                client = openai.AsyncOpenAI(base_url=url, api_key="x")
            async with client:
                for turn in range(2):
                    await client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": f"agent {i} turn {turn}"}]
                    )

        async def main() -> None:
            await asyncio.gather(*(agent(i) for i in range(64)))

        asyncio.run(main())
        tok = endpoint.tokenizer
        for i in range(64):
            records = endpoint.close_episode(f"agent-{i}")
            prompts = [tok.decode(r.prompt_ids) for r in records]
            assert len(records) == 2 and all(f"agent {i} turn {t}" in p for t, p in enumerate(prompts)), prompts
        assert endpoint.episodes.open_count == 0


def test_bad_requests_and_late_calls_get_openais_error_shape_and_the_endpoint_goes_on(tiny, tmp_path):
    out = tmp_path / "calls.jsonl"
    with scripted(tiny, ["RAISE", "fine"], max_body_bytes=4096, out=out) as endpoint:
        url = endpoint.base_url() + "/chat/completions"
        ok = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

        def post(body, status, param=None, headers=None, raw=None):
            r = requests.post(url, data=raw if raw is not None else json.dumps(body),
                           headers={"Content-Type": "application/json", **(headers or {})})  # fmt: skip
            assert r.status_code == status, r.text
            error = r.json()["error"]
            assert set(error) == {"message", "type", "param", "code"} and error["message"] and error["param"] == param
            return error

        assert post(ok, 500)["type"] == "server_error"  # the backend raised: one 500, the server goes on
        post(None, 400, raw=b"{not json")
        post({"model": "m"}, 400, "messages")
        post({**ok, "messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0]")
        image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
        assert (
            "only text"
            in post({**ok, "messages": [{"role": "user", "content": [image]}]}, 400, "messages[0]")["message"]
        )
        post({**ok, "n": 2}, 400, "n")
        post({**ok, "tool_choice": "required", "tools": TOOLS}, 400, "tool_choice")
        post({**ok, "tools": [{"type": "function", "function": {}}]}, 400, "tools")
        post({**ok, "max_tokens": 0}, 400, "max_tokens")
        post(None, 400, "temperature", raw=b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}')
        post({**ok, "messages": [{"role": "user", "content": "x" * 5000}]}, 413)
        post(ok, 403, headers={"Origin": "https://evil.example"})
        post(ok, 403, headers={"Host": "evil.example"})
        r = requests.post(url, data=json.dumps(ok), headers={"Content-Type": "text/plain"})
        assert r.status_code == 415
        assert requests.post(endpoint.url + "/e/nobody/v1/chat/completions", json=ok).status_code == 404
        episode, episode_url = endpoint.open_episode()
        client = openai.OpenAI(base_url=episode_url, api_key="x", max_retries=0)
        assert client.chat.completions.create(**ok).choices[0].message.content == "fine"
        assert len(endpoint.close_episode(episode)) == 1
        with pytest.raises(openai.APIStatusError) as late:  # the agent goes on after its episode: refused
            client.chat.completions.create(**ok)
        assert late.value.status_code == 410 and endpoint.refused == 1
        assert requests.post(url, json=ok).json()["choices"][0]["message"]["content"] == "fine"  # still serving
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["episode"] for r in written] == [episode, None]  # the refused call is recorded nowhere
    with scripted(tiny, ["fine"], token="s3cret") as guarded:
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=guarded.base_url(), api_key="wrong", max_retries=0).chat.completions.create(**ok)
        good = openai.OpenAI(base_url=guarded.base_url(), api_key="s3cret").chat.completions.create(**ok)
        assert good.choices[0].message.content == "fine"


def test_serve_model_from_the_command_line_records_an_episode_opened_over_http(tiny, tmp_path):
    """``aworld-gym serve-model``: a driver in another process opens an episode over HTTP, the agent calls its base
    URL with the SDK, and closing the episode hands back its records, also appended to ``--out``."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from aworld_gym.mcp.transports.shared import free_port
    from tests.helpers import ROOT, wait_until

    port, out = free_port(), tmp_path / "calls.jsonl"
    cli = Path(sys.executable).parent / "aworld-gym"
    proc = subprocess.Popen([str(cli), "serve-model", str(tiny), "--port", str(port), "--max-tokens", "8",
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    try:
        root = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return requests.get(root + "/v1/models", timeout=2).json()["data"][0]["id"] == "qwen3"
            except requests.RequestException:
                return False

        assert wait_until(lambda: up() or proc.poll() is not None, 120) and proc.poll() is None, proc.stdout.read()
        opened = requests.post(root + "/episodes", json={"id": "run-1"}).json()
        assert opened == {"id": "run-1", "base_url": f"{root}/e/run-1/v1"}
        assert requests.post(root + "/episodes", json={"id": "run-1"}).status_code == 409  # ids are not reused
        client = openai.OpenAI(base_url=opened["base_url"], api_key="x")
        reply = client.chat.completions.create(model="qwen3", messages=[{"role": "user", "content": "hi"}])
        closed = requests.delete(root + "/episodes/run-1").json()
        (call,) = closed["calls"]
        assert call["episode"] == "run-1" and len(call["completion_ids"]) == reply.usage.completion_tokens <= 8
        assert requests.delete(root + "/episodes/run-1").status_code == 404
        assert [json.loads(line)["completion_ids"] for line in out.read_text().splitlines()] == [call["completion_ids"]]
    finally:
        proc.terminate()
        proc.wait(10)


def _record(prompt, completion):
    from aworld_gym.endpoint import CallRecord

    return CallRecord("e", list(prompt), list(completion), [-0.1 * (i + 1) for i in range(len(completion))], "stop", "")


def test_calls_that_extend_each_other_merge_into_one_sequence_and_others_stay_apart():
    from aworld_gym.endpoint.merge import merge_calls

    first = _record([1, 2, 3], [10, 11, 99])
    second = _record([1, 2, 3, 10, 11, 99, 50, 51], [12, 99])  # the reply sent back whole, then a tool result
    third = _record([1, 2, 3, 10, 11, 99, 50, 51, 12, 99, 60], [13])
    merged = merge_calls([first, second, third])
    assert merged.merged
    (sample,) = merged.samples
    assert sample.prompt_ids == [1, 2, 3]
    assert sample.completion_ids == [10, 11, 99, 50, 51, 12, 99, 60, 13]
    assert sample.mask == [1, 1, 1, 0, 0, 1, 1, 0, 1]
    assert sample.logprobs == pytest.approx([-0.1, -0.2, -0.3, 0, 0, -0.1, -0.2, 0, -0.1])
    assert (sample.model_turns, sample.env_turns) == (3, 2)
    # an agent that rewrote its history (the reply sent back without its end-of-turn id): a new sample
    rewritten = _record([1, 2, 3, 10, 11, 50, 51], [12])
    apart = merge_calls([first, rewritten, _record([1, 2, 3, 10, 11, 50, 51, 12, 60], [13])])
    assert not apart.merged and [s.prompt_ids for s in apart.samples] == [[1, 2, 3], [1, 2, 3, 10, 11, 50, 51]]
    assert apart.samples[1].completion_ids == [12, 60, 13] and apart.samples[1].mask == [1, 0, 1]
    assert merge_calls([]).samples == []


def test_a_call_that_sends_the_conversation_back_unchanged_continues_the_sampled_ids(tiny):
    from aworld_gym.rollout.tokens import ChatTokens

    with scripted(tiny, ["ok then"]) as endpoint:
        episode, url = endpoint.open_episode()
        client = openai.OpenAI(base_url=url, api_key="x")
        hi = [{"role": "user", "content": "hi"}]
        client.chat.completions.create(model="m", messages=hi)
        back = [*hi, {"role": "assistant", "content": "ok then"}, {"role": "user", "content": "more"}]
        client.chat.completions.create(model="m", messages=back)
        rewritten = [*hi, {"role": "assistant", "content": "OK THEN"}, {"role": "user", "content": "more"}]
        client.chat.completions.create(model="m", messages=rewritten)
        first, second, third = endpoint.close_episode(episode)
    chat = ChatTokens(endpoint.tokenizer)
    assert not first.continued and second.continued and not third.continued
    # the prompt: the first call's prompt, its sampled ids (end-of-turn token included), the new turn as the
    # template continues after that token; the rewritten history is rendered whole
    assert second.prompt_ids == first.prompt_ids + first.completion_ids + chat.env_turn_ids(back[2:])
    assert third.prompt_ids == chat.prompt_ids(rewritten)
