"""A minimal OpenAI-compatible chat-completions server on 127.0.0.1 for policy tests (no network)."""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAOS = ("429", "500", "garbage", "drop", "hang")


class FakeOpenAI:
    """Answers calculator tasks: first a tool call (text or native), then the answer from the tool result.

    Fault injection: ``fail_first`` (status codes returned before succeeding), ``errors`` (``(status, body)`` pairs
    answered after ``payloads``, each body as a server really sends it), ``always`` (a status returned every
    time), ``hang_s`` (sleep before answering), ``chaos`` (the share of requests that get a random fault: 429, 500,
    a non-JSON 200, a dropped connection, or a hang of ``chaos_hang_s``; counted by kind in ``injected``; valid
    answers are counted in ``served``).
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.fail_first: list[int] = []
        self.errors: list[tuple[int, Any]] = []
        self.always: int | None = None
        self.payloads: list[Any] = []
        self.hang_s = 0.0
        self.chaos = 0.0
        self.chaos_hang_s = 5.0
        self.injected: Counter[str] = Counter()
        self.served = 0
        self._rng = random.Random(0)
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        message = self.answer(body)
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": "stop"}
        if body.get("logprobs"):
            choice["logprobs"] = {"content": [{"token": f"token_id:{100 + i}", "logprob": -0.1 * i, "bytes": None,
                                               "top_logprobs": []} for i in range(3)]}  # fmt: skip
        return {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"], "choices": [choice],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}  # fmt: skip

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """The assistant message for a request (subclasses play other tasks)."""
        messages = body["messages"]
        tool_msgs = [m for m in messages if m["role"] == "tool"]
        question = next(m["content"] for m in messages if m["role"] == "user")
        a = int(re.search(r"What is (\d+) \+ 1", question).group(1))
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if not tool_msgs:
            if body.get("tools"):
                message["tool_calls"] = [{"id": "c1", "type": "function",
                    "function": {"name": "add", "arguments": json.dumps({"a": a, "b": 1})}}]  # fmt: skip
            else:
                call = json.dumps({"name": "add", "arguments": {"a": a, "b": 1}})
                message["content"] = f"<tool_call>\n{call}\n</tool_call>"
            message["reasoning_content"] = "I need the add tool."
        else:
            message["content"] = f"<answer>{tool_msgs[-1]['content']}</answer>"
        return message

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append({"body": body, "auth": self.headers.get("Authorization")})
                if fake.hang_s:
                    time.sleep(fake.hang_s)
                with fake._lock:
                    fault = fake._rng.choice(CHAOS) if fake._rng.random() < fake.chaos else None
                    if fault:
                        fake.injected[fault] += 1
                if fault == "hang":
                    time.sleep(fake.chaos_hang_s)
                    return
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if fault in ("429", "500"):
                    self._send(int(fault), {"error": {"message": f"status {fault}"}})
                    return
                if fault == "garbage":
                    self._send(200, None, b"<html>not json")
                    return
                if fake.payloads:
                    self._send(200, fake.payloads.pop(0))
                    return
                if fake.errors:
                    self._send(*fake.errors.pop(0))
                    return
                status = fake.fail_first.pop(0) if fake.fail_first else (fake.always or 200)
                payload = fake.reply(body) if status == 200 else {"error": {"message": f"status {status}"}}
                if status == 200:
                    with fake._lock:
                        fake.served += 1
                self._send(status, payload)

            def _send(self, status: int, payload: Any, raw: bytes | None = None) -> None:
                data = raw if raw is not None else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
