"""slime's custom generate against an object with exactly slime's ``Sample`` fields (slime/utils/types.py) and a
stand-in SGLang server speaking ``/generate`` over HTTP (slime itself is not on the package registries)."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("transformers")
from transformers import AutoTokenizer

from aworld_gym.rollout.tokens import ChatTokens
from aworld_gym.trainers.slime import generate, reward
from tests.helpers import ANSWER, CALL, CRASH, demo_env_kwargs, scripted_tokens


@dataclass
class Sample:
    """slime's Sample: the same field names, types and defaults (slime/utils/types.py)."""

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: Any = ""
    tokens: list[int] = field(default_factory=list)
    multimodal_inputs: dict | None = None
    multimodal_train_inputs: dict | None = None
    multimodal_train_input_id: str | None = None
    apply_chat_template_kwargs: dict = field(default_factory=dict)
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: Any = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    rollout_top_p_token_ids: Any = None
    rollout_top_p_token_offsets: Any = None
    rollout_routed_experts: Any = None
    remove_sample: bool = False
    teacher_log_probs: list[float] | None = None
    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)
    generate_function_path: str | None = None
    custom_rm_path: str | None = None
    train_metadata: dict | None = None
    session_id: str | None = None
    non_generation_time: float = 0.0


class SGLang:
    """A stand-in SGLang server: ``POST /generate`` with ``input_ids``; replies with scripted ids as
    ``meta_info.output_token_logprobs`` pairs. Task "3 + 1" calls the demo server's crash tool first."""

    def __init__(self, chat: ChatTokens) -> None:
        self.chat, self.requests = chat, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                text = outer.chat.decode(body["input_ids"])
                turn = text.count("<|im_start|>assistant") - 1
                reply = (CRASH if "3 + 1" in text else CALL) if turn == 0 else ANSWER
                ids = [*outer.chat.encode(reply), outer.chat.eos_id]
                out = {"text": reply, "meta_info": {"finish_reason": {"type": "stop"},
                       "output_token_logprobs": [[-0.5, i, None] for i in ids]}}  # fmt: skip
                data = json.dumps(out).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> SGLang:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def args_for(server: SGLang, tiny, kwargs) -> SimpleNamespace:
    host, port = server.server.server_address
    return SimpleNamespace(sglang_router_ip=host, sglang_router_port=port, hf_checkpoint=str(tiny),
                           rollout_max_response_len=400, aworld_env_id="AWorld/MCP-v0", aworld_env_kwargs=kwargs)  # fmt: skip


def test_a_sample_is_filled_token_exactly_as_the_drivers_token_mode(tiny):
    chat = ChatTokens(AutoTokenizer.from_pretrained(tiny))
    kwargs = demo_env_kwargs(4)
    direct = scripted_tokens(chat, [CALL, ANSWER], "add-2", kwargs)
    with SGLang(chat) as server:
        sample = Sample(prompt="What is 2 + 1?", metadata={"task_id": "add-2"})
        out = asyncio.run(generate(args_for(server, tiny, kwargs), sample, {"temperature": 1.0, "max_new_tokens": 64}))
        assert asyncio.run(reward(None, out)) == out.reward == 1.0
    d = direct.tokens
    assert out is sample and out.status is Sample.Status.COMPLETED and not out.remove_sample
    assert out.tokens == d.prompt_ids + d.completion_ids and out.response_length == len(d.completion_ids)
    assert out.loss_mask == d.mask and len(out.rollout_log_probs) == out.response_length
    assert all(lp == -0.5 for lp, m in zip(out.rollout_log_probs, out.loss_mask, strict=True) if m)
    assert all(lp == 0.0 for lp, m in zip(out.rollout_log_probs, out.loss_mask, strict=True) if not m)
    assert (
        server.requests[0]["return_logprob"] is True and server.requests[0]["sampling_params"]["max_new_tokens"] <= 64
    )
    assert out.metadata["aworld"]["status"] == "ok"


def test_void_samples_are_failed_removed_and_keep_the_groups_baseline(tiny):
    chat = ChatTokens(AutoTokenizer.from_pretrained(tiny))
    kwargs = demo_env_kwargs(4, "stdio")
    with SGLang(chat) as server:
        args = args_for(server, tiny, kwargs)
        samples = [
            Sample(group_index=7, index=i, metadata={"task_id": "add-3" if i % 2 else "add-2"}) for i in range(4)
        ]

        async def group():
            return await asyncio.gather(*(generate(args, s, {"max_new_tokens": 64}) for s in samples))

        outs = asyncio.run(group())
    assert [o.status for o in outs] == [Sample.Status.COMPLETED, Sample.Status.FAILED] * 2
    void = outs[1::2]
    assert all(o.remove_sample and set(o.loss_mask) <= {0} and o.metadata["aworld"]["termination"] == "env_crash"
               for o in void)  # fmt: skip
    assert [o.reward for o in outs] == [1.0] * 4  # the void ones get the live members' mean
    assert all(o.response_length == len(o.loss_mask) == len(o.rollout_log_probs) for o in outs)
