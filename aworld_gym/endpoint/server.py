"""The endpoint's HTTP face: OpenAI's chat completions, streamed or not, every call recorded (see the package).

Routes: ``GET /v1/models``; ``POST /v1/chat/completions`` (the episode from the ``X-AWorld-Episode`` header, else
none: served, and written to ``out`` only); ``POST /e/<episode>/v1/chat/completions`` (an episode's own base URL,
``/e/<episode>/v1``, for agents that cannot set a header); for a driver in another process, ``POST /episodes``
(opens one: ``{"id", "base_url"}``; the body may name it: ``{"id": ...}``) and ``DELETE /episodes/<id>`` (ends it:
``{"id", "calls": [...]}``, its call records in order). Every route passes :class:`~aworld_gym.base.http_guard.Guard`
(a browser's ``Origin`` and a foreign ``Host`` refused, the token when one is set) and a body limit; every error has
OpenAI's shape (``{"error": {"message", "type", "param", "code"}}``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aworld_gym.base.http_guard import Guard, Refused, read_body
from aworld_gym.endpoint.backends import Backend, Generated, Sampling
from aworld_gym.endpoint.calls import ENDED, OPEN, UNKNOWN, CallRecord, Episodes
from aworld_gym.endpoint.chat import ChatRequest, RequestError, parse_request, prompt_ids
from aworld_gym.endpoint.completion import parse_completion
from aworld_gym.endpoint.continuation import Continuations
from aworld_gym.endpoint.threaded import ThreadedServer

logger = logging.getLogger(__name__)

EPISODE_HEADER = "x-aworld-episode"


class TokenEndpoint:
    """A token-recording OpenAI-compatible endpoint over ``backend``.

    Args:
        backend: token in, token out (:class:`~aworld_gym.endpoint.backends.HFBackend`, or any
            :class:`~aworld_gym.endpoint.backends.Backend`).
        tokenizer: the model's tokenizer (its chat template renders the requests); default the backend's.
        model_name: the name ``/v1/models`` lists (any requested name is served).
        max_tokens: a request's completion limit when it gives none (and at most what the context leaves).
        temperature: when the request gives none.
        chat_template_kwargs: passed to the chat template (e.g. ``{"enable_thinking": False}``).
        token: required as ``Authorization: Bearer <token>`` when set.
        out: a JSONL file every call's record is appended to.
        max_body_bytes: the largest request body accepted (413 past it).
    """

    def __init__(self, backend: Backend, tokenizer: Any = None, *, model_name: str = "aworld", max_tokens: int = 512,
                 temperature: float = 1.0, chat_template_kwargs: dict[str, Any] | None = None,
                 token: str | None = None, out: str | Path | None = None, max_body_bytes: int = 8 << 20,
                 allowed_hosts: tuple[str, ...] = (), allowed_origins: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.backend = backend
        self.tokenizer = tokenizer if tokenizer is not None else getattr(backend, "tokenizer", None)
        if self.tokenizer is None:
            raise ValueError("TokenEndpoint needs the model's tokenizer (its chat template renders the requests)")
        self.model_name, self.max_tokens, self.temperature = model_name, max_tokens, temperature
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.guard = Guard(token, None, allowed_origins, allowed_hosts)
        self.max_body_bytes = max_body_bytes
        self.episodes = Episodes()
        self.continuations = Continuations(self.tokenizer, self.chat_template_kwargs)
        self.refused = 0  # calls for an episode that had ended: answered 410, kept nowhere
        self.eos_id = self.tokenizer.eos_token_id
        self._out = Path(out) if out else None
        self._out_lock = threading.Lock()
        self.url: str | None = None
        self._threaded = ThreadedServer("aworld-gym-endpoint")

    # ----- episodes --------------------------------------------------------------------------------------
    def open_episode(self, episode: str | None = None) -> tuple[str, str]:
        """Open an episode (a new id when none is given); returns ``(id, its base URL)``."""
        episode = episode or secrets.token_hex(8)
        self.episodes.open(episode)
        return episode, self.base_url(episode)

    def close_episode(self, episode: str) -> list[CallRecord]:
        """End an episode: its calls, in order (later calls naming it are refused)."""
        self.continuations.forget(episode)
        return self.episodes.close(episode)

    def base_url(self, episode: str | None = None) -> str:
        if self.url is None:
            raise RuntimeError("the endpoint is not serving: call start() first")
        return f"{self.url}/e/{episode}/v1" if episode else f"{self.url}/v1"

    # ----- one call --------------------------------------------------------------------------------------
    async def complete(self, body: Any, episode: str | None) -> tuple[ChatRequest, CallRecord, dict[str, Any]]:
        """Serve one request: ``(request, record, response body)``. Raises :class:`RequestError`."""
        if episode is not None:
            state = self.episodes.state(episode)
            if state == UNKNOWN:
                raise RequestError(f"no episode {episode!r} is open on this endpoint", None, 404, "not_found_error")
            if state == ENDED:
                self.refused += 1
                raise RequestError(f"episode {episode!r} has ended: its calls are closed", None, 410, "episode_ended")
        request = parse_request(body)
        continued = self.continuations.prompt(episode, request)
        ids = continued if continued is not None else prompt_ids(self.tokenizer, request, self.chat_template_kwargs)
        room = self._room(len(ids))
        want = request.max_tokens or self.max_tokens
        sampling = Sampling(max_tokens=min(want, room),
                            temperature=self.temperature if request.temperature is None else request.temperature,
                            top_p=request.top_p)  # fmt: skip
        start = time.perf_counter()
        try:
            generated = await asyncio.to_thread(self.backend.generate, ids, sampling)
        except Exception as exc:
            logger.exception("generation failed")
            raise RequestError(f"generation failed: {type(exc).__name__}: {exc}", None, 500, "server_error") from None
        completion, text, cut = self._cut(generated, request.stop)
        parsed = parse_completion(text, request.tools_offered)
        finish = "tool_calls" if parsed.tool_calls else ("stop" if cut else generated.finish_reason)
        record = CallRecord(episode, ids, completion.ids, completion.logprobs, finish, text,
                            getattr(self.backend, "weights_version", None), len(parsed.tool_calls),
                            latency_s=time.perf_counter() - start, continued=continued is not None)  # fmt: skip
        if episode is not None and not self.episodes.add(record):  # it ended while this call ran
            self.refused += 1
            raise RequestError(f"episode {episode!r} ended while this call ran", None, 410, "episode_ended")
        self._write(record)
        self.continuations.keep(episode, request, ids, completion.ids if not cut else [], parsed.message())
        response = {
            "id": f"chatcmpl-{secrets.token_hex(12)}", "object": "chat.completion", "created": int(time.time()),
            "model": request.model or self.model_name,
            "choices": [{"index": 0, "message": parsed.message(), "finish_reason": finish,
                         "logprobs": self._logprobs(completion) if request.logprobs else None}],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": len(completion.ids),
                      "total_tokens": len(ids) + len(completion.ids)},
        }  # fmt: skip
        return request, record, response

    def _room(self, prompt: int) -> int:
        context = getattr(self.backend, "context", None)
        if context is None:
            return self.max_tokens
        if prompt >= context:
            raise RequestError(f"the prompt is {prompt} tokens; the model's context is {context}", "messages", 400,
                               "invalid_request_error", "context_length_exceeded")  # fmt: skip
        return context - prompt

    def _cut(self, generated: Generated, stops: list[str]) -> tuple[Generated, str, bool]:
        """The completion's text (its end-of-turn token left out); at the first ``stop`` string, the ids and
        logprobs are cut after the token that completes it and the text before it (OpenAI leaves the string out)."""
        ids = generated.ids[:-1] if generated.ids and generated.ids[-1] == self.eos_id else generated.ids
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        hits = [(text.find(s), s) for s in stops if s in text]
        if not hits:
            return generated, text, False
        at, stop = min(hits)
        lo, hi = 1, len(ids)  # the fewest ids whose text holds the stop string whole
        while lo < hi:
            mid = (lo + hi) // 2
            if len(self.tokenizer.decode(ids[:mid], skip_special_tokens=False)) >= at + len(stop):
                hi = mid
            else:
                lo = mid + 1
        return Generated(ids[:lo], generated.logprobs[:lo], "stop"), text[:at], True

    def _logprobs(self, completion: Generated) -> dict[str, Any]:
        content = []
        for i, lp in zip(completion.ids, completion.logprobs, strict=True):
            token = self.tokenizer.decode([i], skip_special_tokens=False)
            content.append({"token": token, "logprob": lp, "bytes": list(token.encode("utf-8", "replace")),
                            "top_logprobs": []})  # fmt: skip
        return {"content": content}

    def _write(self, record: CallRecord) -> None:
        if self._out is None:
            return
        try:
            with self._out_lock, open(self._out, "a", encoding="utf-8") as f:
                f.write(json.dumps(record.to_dict(), ensure_ascii=False) + "\n")
        except OSError as exc:
            logger.error("a call record could not be written to %s: %s", self._out, exc)

    # ----- HTTP ------------------------------------------------------------------------------------------
    def app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse, StreamingResponse
        from starlette.routing import Route

        def guarded(handler: Any) -> Any:
            """The route behind the guard; a refusal or a bad request in OpenAI's error shape."""

            async def route(request: Request) -> Any:
                try:
                    self.guard.check(request.headers)
                    return await handler(request)
                except Refused as exc:
                    kind = "authentication_error" if exc.status == 401 else "permission_error"
                    exc = RequestError(str(exc), None, exc.status, kind)
                    return JSONResponse(exc.body(), status_code=exc.status)
                except RequestError as exc:
                    return JSONResponse(exc.body(), status_code=exc.status)

            return route

        async def json_body(request: Request, empty: Any = ...) -> Any:
            raw = await read_body(request, self.max_body_bytes)
            if empty is not ... and not raw.strip():
                return empty
            try:
                return json.loads(raw)
            except (ValueError, RecursionError):
                raise RequestError("the request body is not valid JSON") from None

        async def chat(request: Request) -> Any:
            if "json" not in request.headers.get("content-type", ""):
                raise RequestError("the request body must be JSON (Content-Type: application/json)", None, 415)
            body = await json_body(request)
            episode = request.path_params.get("episode") or request.headers.get(EPISODE_HEADER) or None
            chat_request, _, response = await self.complete(body, episode)
            if not chat_request.stream:
                return JSONResponse(response)
            return StreamingResponse(_chunks(response, chat_request.include_usage), media_type="text/event-stream")

        async def open_episode(request: Request) -> Any:
            body = await json_body(request, empty={})
            given = body.get("id") if isinstance(body, dict) else ...
            if given is not None and not isinstance(given, str):
                raise RequestError("the body must be empty or {'id': a string}", "id")
            try:
                episode, url = self.open_episode(given)
            except ValueError as exc:
                raise RequestError(str(exc), "id", 409, "conflict") from None
            return JSONResponse({"id": episode, "base_url": url})

        async def close_episode(request: Request) -> Any:
            episode = request.path_params["episode"]
            if self.episodes.state(episode) != OPEN:
                raise RequestError(f"no episode {episode!r} is open", None, 404, "not_found_error")
            calls = [c.to_dict() for c in self.close_episode(episode)]
            return JSONResponse({"id": episode, "calls": calls})

        async def models(request: Request) -> Any:
            return JSONResponse({"object": "list", "data": [{"id": self.model_name, "object": "model",
                                                             "owned_by": "aworld-gym"}]})  # fmt: skip

        return Starlette(routes=[
            Route("/v1/models", guarded(models), methods=["GET"]),
            Route("/v1/chat/completions", guarded(chat), methods=["POST"]),
            Route("/e/{episode}/v1/chat/completions", guarded(chat), methods=["POST"]),
            Route("/episodes", guarded(open_episode), methods=["POST"]),
            Route("/episodes/{episode}", guarded(close_episode), methods=["DELETE"]),
        ])  # fmt: skip

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve in a thread of this process (uvicorn); returns the root URL (``base_url()`` adds ``/v1``)."""
        self.url = self._threaded.start(self.app(), host, port)
        return self.url

    def serve(self, host: str = "127.0.0.1", port: int = 8000) -> None:
        """Serve in the foreground until interrupted (``aworld-gym serve-model``)."""
        import uvicorn

        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}"
        uvicorn.run(self.app(), host=host, port=port, log_level="warning", lifespan="off", timeout_keep_alive=30)

    def stop(self) -> None:
        self._threaded.stop()

    def __enter__(self) -> TokenEndpoint:
        if self.url is None:
            self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


async def _chunks(response: dict[str, Any], include_usage: bool) -> AsyncIterator[str]:
    """The response as OpenAI's stream: the role, the reasoning, the text, each tool call, the finish reason."""
    base = {"id": response["id"], "object": "chat.completion.chunk", "created": response["created"],
            "model": response["model"]}  # fmt: skip
    choice = response["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        body = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, **extra}]}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    if message.get("reasoning_content"):
        yield chunk({"reasoning_content": message["reasoning_content"]})
    if message.get("content"):
        yield chunk({"content": message["content"]}, logprobs=choice["logprobs"])
    for i, call in enumerate(message.get("tool_calls") or []):
        yield chunk({"tool_calls": [{"index": i, **call}]})
    yield chunk({}, choice["finish_reason"])
    if include_usage:
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': response['usage']})}\n\n"
    yield "data: [DONE]\n\n"
