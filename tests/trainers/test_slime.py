"""slime's custom generate against a copy of slime's ``Sample`` whose field names are pinned to
``slime/utils/types.py`` at upstream commit :data:`SLIME_COMMIT` (slime is not on the package registries), and a
stand-in SGLang server speaking ``/generate`` over HTTP with SGLang's finish reasons (stop, length, abort)."""

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
    spec_info: Any = field(default_factory=dict)  # slime: a Sample.SpecInfo dataclass (speculative decoding stats)
    prefix_cache_info: Any = field(default_factory=dict)  # slime: a Sample.PrefixCacheInfo dataclass


# slime's Sample at THUDM/slime 624b824a898ab0ec1fcb4d373004c7f3852bf515 (2026-08-21, "[NFC] Add observability
# subfolder (#2298)"): its dataclass fields in order and its Status members, read from slime/utils/types.py.
SLIME_COMMIT = "624b824a898ab0ec1fcb4d373004c7f3852bf515"
SLIME_SAMPLE_FIELDS = (
    "group_index", "index", "rollout_id", "prompt", "tokens", "multimodal_inputs", "multimodal_train_inputs",
    "multimodal_train_input_id", "apply_chat_template_kwargs", "response", "response_length", "label", "reward",
    "loss_mask", "weight_versions", "rollout_log_probs", "rollout_top_p_token_ids", "rollout_top_p_token_offsets",
    "rollout_routed_experts", "remove_sample", "teacher_log_probs", "status", "metadata", "generate_function_path",
    "custom_rm_path", "train_metadata", "session_id", "non_generation_time", "spec_info", "prefix_cache_info",
)  # fmt: skip
SLIME_STATUS = {"PENDING": "pending", "COMPLETED": "completed", "TRUNCATED": "truncated", "ABORTED": "aborted",
                "FAILED": "failed"}  # fmt: skip
# what slime's Sample.update_from_meta_info makes of SGLang's meta_info["finish_reason"]["type"] at that commit
SLIME_FINISH = {"length": "TRUNCATED", "abort": "ABORTED", "stop": "COMPLETED"}


class SGLang:
    """A stand-in SGLang server: ``POST /generate`` with ``input_ids``; replies with scripted ids as
    ``meta_info.output_token_logprobs`` pairs, cut at ``sampling_params.max_new_tokens`` with finish reason ``length``,
    ``abort`` (no tokens) once ``abort`` is set. Task "3 + 1" calls the demo server's crash tool first."""

    def __init__(self, chat: ChatTokens, reply: str | None = None, abort: bool = False) -> None:
        self.chat, self.requests, self.reply, self.abort = chat, [], reply, abort
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                text = outer.chat.decode(body["input_ids"])
                turn = text.count("<|im_start|>assistant") - 1
                reply = outer.reply or ((CRASH if "3 + 1" in text else CALL) if turn == 0 else ANSWER)
                full = [*outer.chat.encode(reply), outer.chat.eos_id]
                ids = [] if outer.abort else full[: body["sampling_params"]["max_new_tokens"]]
                finish = "abort" if outer.abort else "length" if len(ids) < len(full) else "stop"
                out = {"text": outer.chat.decode(ids), "meta_info": {"finish_reason": {"type": finish},
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


def test_the_sample_copy_keeps_slimes_fields_at_the_pinned_commit(tiny):
    """The copy has slime's field names in slime's order and its Status members; the face writes no field slime's
    Sample lacks (every attribute it sets is recorded); SGLang's finish reasons map to the statuses slime gives."""
    import dataclasses

    assert tuple(f.name for f in dataclasses.fields(Sample)) == SLIME_SAMPLE_FIELDS
    assert {m.name: m.value for m in Sample.Status} == SLIME_STATUS

    class Recording(Sample):
        def __setattr__(self, name: str, value: Any) -> None:
            object.__setattr__(self, "written", {*getattr(self, "written", set()), name})
            object.__setattr__(self, name, value)

    chat = ChatTokens(AutoTokenizer.from_pretrained(tiny))
    runs = {"stop": {}, "length": {"reply": "thinking " * 40}, "abort": {"abort": True}}
    for finish, script in runs.items():
        with SGLang(chat, **script) as server:
            sample = Recording(prompt="What is 2 + 1?", metadata={"task_id": "add-2"})
            sample.written = set()
            out = asyncio.run(generate(args_for(server, tiny, demo_env_kwargs(4)), sample, {"max_new_tokens": 8
                                       if finish == "length" else 64}))  # fmt: skip
        assert out.written - {"written"} <= set(SLIME_SAMPLE_FIELDS)
        assert out.status is Sample.Status[SLIME_FINISH[finish]], finish


def test_a_reply_cut_at_max_new_tokens_is_truncated_and_trained(tiny):
    chat = ChatTokens(AutoTokenizer.from_pretrained(tiny))
    with SGLang(chat, reply="thinking " * 40) as server:
        sample = Sample(prompt="What is 2 + 1?", metadata={"task_id": "add-2"})
        out = asyncio.run(generate(args_for(server, tiny, demo_env_kwargs(4)), sample, {"max_new_tokens": 8}))
    assert server.requests[0]["sampling_params"]["max_new_tokens"] == 8 and len(server.requests) == 1
    assert out.status is Sample.Status.TRUNCATED and out.metadata["aworld"]["termination"] == "length"
    assert out.loss_mask == [1] * 8 and out.response_length == 8 and not out.remove_sample


def test_an_aborted_generation_is_aborted_as_slime_reads_it(tiny):
    """SGLang's ``abort``: status ``ABORTED`` (slime returns the group to its buffer under partial rollout), no loss."""
    chat = ChatTokens(AutoTokenizer.from_pretrained(tiny))
    with SGLang(chat, abort=True) as server:
        sample = Sample(prompt="What is 2 + 1?", metadata={"task_id": "add-2"})
        out = asyncio.run(generate(args_for(server, tiny, demo_env_kwargs(4)), sample, {"max_new_tokens": 64}))
    assert out.status is Sample.Status.ABORTED and out.metadata["aworld"]["termination"] == "abort"
    assert set(out.loss_mask) <= {0} and out.metadata["aworld"]["status"] == "void"
