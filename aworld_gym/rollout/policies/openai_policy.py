"""OpenAIPolicy: any OpenAI-compatible chat endpoint (vLLM, SGLang, OpenAI) as a policy.

Configuration comes from arguments or the variables AWorld users already set: ``LLM_BASE_URL``,
``LLM_API_KEY``, ``LLM_MODEL_NAME``. Requests are async with a concurrency limit; transient failures
(connection errors, timeouts, 429, 5xx) are retried with exponential backoff and jitter, nothing else is; a refused
connection to an endpoint that never answered (nothing listens at the URL) is said as such at once, not retried;
one that answered before is restarting, and is retried.
With ``tool_mode="native"`` the endpoint's tool calls (``--enable-auto-tool-choice --tool-call-parser hermes``
on vLLM) are rendered back into the canonical ``<tool_call>`` text, so the env always sees one format.
Sampled token ids and logprobs are kept when the server returns them (``logprobs=True``).

The request goes out through the SDK's documented ``client.post`` with the body as JSON and comes back as a plain
dict (the SDK's typed request transform and response models cost more CPU than the rest of an episode), over
aiohttp when it is installed (the SDK's own aiohttp transport; else httpx). The SDK's errors and retry rules stay.
Measured in ``benchmarks/peers.py``: see docs/benchmarks.md. The client's connections (and the idle ones kept alive)
are sized from ``max_concurrency``, or set by ``max_connections``: the SDK's own default allows 1,000 whatever the
run asks for, and a run that asks for more than the client allows says so once (a ``CapacityWarning``).

``timeout_s`` bounds each attempt as a whole (connect, headers and the whole body), not each read: an endpoint that
trickles its reply a byte at a time is cut at ``timeout_s``. The sync face runs the same async request on the
process's background loop, so both faces have that one deadline. A reply's text is made encodable (a lone surrogate
becomes U+FFFD) before the env, the history sent back next turn, or a sink sees it.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import threading
import weakref
from collections.abc import Callable
from typing import Any

from aworld_gym.base.calls import ToolCall
from aworld_gym.base.capacity import warn_capacity
from aworld_gym.base.errors import ConfigError, PolicyError
from aworld_gym.core.actions import Action, Sample
from aworld_gym.core.prompts import render_system_prompt

_SURROGATE = re.compile("[\ud800-\udfff]")  # in a str decoded from JSON, any surrogate is a lone one


class ReplyTimeout(TimeoutError):
    """An attempt got no complete reply within the policy's ``timeout_s`` (retried as a transient failure)."""


class ContextOverflow(PolicyError):
    """The model server refused the request because the conversation no longer fits the model's context (see
    :func:`context_overflow`): the model's own fault (its history grew too long), so the driver ends the episode with
    ``context_limit`` (status ``failed``, trained on), never ``policy_error`` (void, masked as infrastructure's)."""


# The one place an overflow is recognised by its text, for the servers that say it in nothing else (HTTP 400 in both):
# vLLM before its errors carried ``param`` ("This model's maximum context length is N tokens. However, ...",
# "'max_tokens' ... is too large: M. This model's maximum context length is N tokens and your request has ...") and
# ``transformers serve`` ({"detail": "The prompt has P tokens, but the model takes at most N, prompt and answer
# (`--max-model-len`)."}).
_OVERFLOW_TEXT = re.compile(r"maximum context length is \d+|but the model takes at most \d+, prompt and answer")


class OpenAIPolicy:
    """A policy backed by an OpenAI-compatible ``/v1/chat/completions`` endpoint.

    Args:
        model: model name (default ``$LLM_MODEL_NAME``).
        base_url: endpoint, e.g. ``http://127.0.0.1:8000/v1`` (default ``$LLM_BASE_URL``).
        api_key: key (default ``$LLM_API_KEY``, else ``"EMPTY"`` for local servers).
        tool_mode: ``"text"`` (tools listed in the system prompt, the model writes ``<tool_call>`` text) or
            ``"native"`` (tools sent as OpenAI ``tools``; returned calls rendered into ``<tool_call>`` text).
        temperature: the sampling temperature.
        top_p: nucleus sampling (default: the server's).
        max_tokens: the most tokens per completion.
        extra_body: extra request fields (vLLM: ``{"top_k": 80}``, ``{"return_tokens_as_token_ids": True}``).
        logprobs: ask for the sampled tokens' logprobs and keep them (the action's ``sample``).
        max_concurrency: requests in flight at once (per event loop).
        max_connections: the HTTP client's connections, and idle ones kept alive (per event loop; ``None``: as
            many as ``max_concurrency``, so every request in flight has its own). Fewer caps the requests in flight
            at this many (said once, as a ``CapacityWarning``); each costs one open file while open.
        retries: retries of a transient failure (so ``retries + 1`` attempts).
        backoff_s: first backoff; doubles per retry, with full jitter.
        timeout_s: the most seconds one attempt may take as a whole: connect, headers and the whole body (an
            endpoint trickling its reply is cut too); each retry gets its own ``timeout_s``.
    """

    name = "openai"

    def __init__(
        self,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        tool_mode: str = "text",
        temperature: float = 1.0,
        top_p: float | None = None,
        max_tokens: int = 4096,
        extra_body: dict[str, Any] | None = None,
        logprobs: bool = False,
        max_concurrency: int = 64,
        max_connections: int | None = None,
        retries: int = 4,
        backoff_s: float = 1.0,
        timeout_s: float = 600.0,
        latency_s: float = 0.0,
    ) -> None:
        self.model = model or os.environ.get("LLM_MODEL_NAME")
        self.base_url = base_url or os.environ.get("LLM_BASE_URL")
        self.api_key = api_key or os.environ.get("LLM_API_KEY") or "EMPTY"
        if not self.model or not self.base_url:
            raise ConfigError(
                "the openai policy needs a model and an endpoint: --model/--base-url, or set LLM_MODEL_NAME and "
                "LLM_BASE_URL (and LLM_API_KEY if the server wants one)"
            )
        if tool_mode not in ("text", "native"):
            raise ConfigError("tool_mode must be 'text' or 'native'")
        self.tool_mode, self.temperature, self.top_p, self.max_tokens = tool_mode, temperature, top_p, max_tokens
        self.extra_body, self.logprobs = dict(extra_body or {}), logprobs
        self.max_concurrency, self.retries, self.backoff_s, self.timeout_s = (
            max_concurrency,
            retries,
            backoff_s,
            timeout_s,
        )
        if max_concurrency < 1 or (max_connections is not None and max_connections < 1):
            raise ConfigError("max_concurrency and max_connections must be at least 1")
        self.max_connections = max_connections
        self.latency_s = latency_s
        self.attempts = 0  # requests sent, retries included (for tests and summaries)
        self.reached = False  # whether the endpoint ever answered: a refused connection then is a restart, retried
        self._async: weakref.WeakKeyDictionary[Any, tuple[Any, asyncio.Semaphore, tuple[Any, ...]]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:  # picklable for Ray: clients are made where they are used
        state = dict(self.__dict__)
        state.update(_async=None, _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._async = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    # ----- request building --------------------------------------------------------------------------------
    def request(self, env: Any) -> dict[str, Any]:
        """The chat-completions request for the env's current history."""
        messages = [dict(m) for m in env.messages]
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature,
                                "max_tokens": self.max_tokens}  # fmt: skip
        if self.tool_mode == "native":
            messages[0] = {"role": "system", "content": render_system_prompt([], env.preamble)}
            body["tools"] = env.tools
        if self.top_p is not None:
            body["top_p"] = self.top_p
        if self.logprobs:
            body["logprobs"] = True
        if self.extra_body:  # what the SDK does with its extra_body: the fields go into the request's JSON
            body.update(self.extra_body)
        return body

    def render(self, response: Any, env: Any) -> Action:
        """The action of a completion: its canonical text (reasoning as ``<think>``, native calls as ``<tool_call>``),
        the native calls as parsed :class:`ToolCall` objects (not parsed again by the env), and the sample."""
        choices = response.get("choices") if isinstance(response, dict) else None
        if not choices or not isinstance(choices[0], dict) or not isinstance(choices[0].get("message"), dict):
            raise PolicyError(f"the endpoint returned no choices: {str(response)[:200]}")
        choice = choices[0]
        message = choice["message"]
        text = _encodable(message.get("content") or "")
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if reasoning:
            text = f"<think>\n{_encodable(reasoning)}\n</think>\n{text}"
        # Native calls go to the env as parsed calls; one with arguments that are not a JSON object leaves the
        # whole turn to the env's parser (which reports it).
        native = message.get("tool_calls") or []
        calls: list[ToolCall] | None = [] if native else None
        for i, call in enumerate(native):
            function = (call.get("function") if isinstance(call, dict) else None) or {}
            name, raw = _encodable(function.get("name") or ""), function.get("arguments") or "{}"
            try:
                args: Any = json.loads(raw) if isinstance(raw, str) else raw
            except json.JSONDecodeError:
                args = raw  # left for the env's parser to report: no structured calls for this turn
            text += f"\n<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"
            if calls is not None:
                calls = [*calls, ToolCall(name, args, call.get("id") or f"call_{i + 1}")] if isinstance(
                    args, dict) else None  # fmt: skip
        return Action(text, tool_calls=calls, sample=_sample(choice, response))

    # ----- async face ------------------------------------------------------------------------------------
    async def aact(self, env: Any, observation: str, info: dict[str, Any]) -> Action:
        return await self._apost(self.request(env), env)

    async def _apost(self, body: dict[str, Any], env: Any, aiohttp: bool = True) -> Action:
        client, sem = self._async_client(aiohttp)
        async with sem:
            try:
                response = await self._aretry(lambda: client.post("/chat/completions", body=body, cast_to=object))
            except PolicyError as exc:
                if not isinstance(exc.__cause__, UnicodeEncodeError):
                    raise
                # a lone surrogate in the history (a native call's arguments, a tool's text): not encodable as UTF-8,
                # so sent with U+FFFD in its place; found by the SDK's own encoding, so the common case costs nothing
                clean = _encodable_tree(body)
                response = await self._aretry(lambda: client.post("/chat/completions", body=clean, cast_to=object))
        return self._render(response, env)

    def _render(self, response: Any, env: Any) -> Action:
        try:
            return self.render(response, env)
        except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:  # a reply not shaped as one
            raise PolicyError(f"the endpoint's reply is malformed: {type(exc).__name__}: {exc}") from exc

    async def aclose(self) -> None:
        """Let go of this event loop's HTTP client; the last policy holding it closes it and its connections (engines
        call it when their run ends)."""
        entry = self._async.pop(asyncio.get_running_loop(), None)
        if entry is not None and _CLIENTS.release(entry[2], self):
            await entry[0].close()

    def connections(self) -> int:
        """The HTTP client's connections (and idle ones kept alive): ``max_connections``, else ``max_concurrency``."""
        return self.max_connections if self.max_connections is not None else self.max_concurrency

    def _async_client(self, aiohttp: bool = True) -> tuple[Any, asyncio.Semaphore]:
        """This loop's client (over aiohttp when ``aiohttp`` and it is installed, else httpx) and its semaphore."""
        loop = asyncio.get_running_loop()  # keyed by the loop object: ids are reused after a loop closes
        for old in [other for other in list(self._async) if other.is_closed()]:
            self._async.pop(old, None)  # a client refers to its loop: the entry would keep both for ever
        if loop not in self._async:
            from openai import AsyncOpenAI

            connections = self.connections()
            if connections < self.max_concurrency:
                warn_capacity(f"OpenAIPolicy(max_concurrency={self.max_concurrency}) asks for more requests in flight "
                              f"than its HTTP client's max_connections={connections} allows: at most {connections} "
                              f"are in flight (raise max_connections, or leave it None to follow max_concurrency)")  # fmt: skip
            key = (loop, self.base_url, self.api_key, self.timeout_s, connections, aiohttp)

            def make() -> Any:
                return AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, timeout=self.timeout_s, max_retries=0,
                                   http_client=_http_client(self.timeout_s, connections, aiohttp))  # fmt: skip

            self._async[loop] = (_CLIENTS.take(key, self, make), asyncio.Semaphore(self.max_concurrency), key)
        client, sem, _ = self._async[loop]
        return client, sem

    async def _aretry(self, send: Callable[[], Any]) -> Any:
        for attempt in range(self.retries + 1):
            self.attempts += 1
            try:
                reply = await self._attempt(send)
            except Exception as exc:
                if context_overflow(exc):
                    raise ContextOverflow(f"the model's context is full: {_endpoint_error(exc)}") from exc
                if refused(exc) and (not self.reached or attempt == self.retries):
                    # Never reached: nothing listens there, said at once (not retried into a timeout). Reached
                    # before: a restarting server, retried like any transient failure, and said so at the end.
                    raise PolicyError(f"the model endpoint refused the connection: nothing listens at "
                                      f"{self.base_url} (start the server, or fix --base-url / $LLM_BASE_URL)") from exc  # fmt: skip
                if not refused(exc) and (not _transient(exc) or attempt == self.retries):
                    raise PolicyError(f"the model endpoint failed: {_endpoint_error(exc)}") from exc
                await asyncio.sleep(self._backoff(attempt, exc))
                continue
            self.reached = True
            return reply
        raise AssertionError("unreachable")

    async def _attempt(self, send: Callable[[], Any]) -> Any:
        """One attempt under one deadline for all of it (the SDK's own timeout is per read: a trickle never ends)."""
        deadline = asyncio.timeout(self.timeout_s)
        try:
            async with deadline:
                return await send()
        except TimeoutError:
            if deadline.expired():
                raise ReplyTimeout(
                    f"no complete reply within timeout_s={self.timeout_s:g} s (connect, headers and body)"
                ) from None
            raise

    # ----- sync face -------------------------------------------------------------------------------------
    def act(self, env: Any, observation: str, info: dict[str, Any]) -> Action:
        """The sync face: the async request on the process's background loop, under the same whole-request deadline
        (a blocking HTTP client can only bound each read)."""
        from aworld_gym.mcp.loop import get_loop

        body = self.request(env)
        loop = get_loop().loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise RuntimeError("OpenAIPolicy.act was called on the background loop it waits on; await aact() there")
        # over httpx: the background loop's client is never closed, and an unclosed aiohttp session warns at exit
        future = asyncio.run_coroutine_threadsafe(self._apost(body, env, aiohttp=False), loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # an interrupted caller (Ctrl-C) leaves no request running
            raise

    def _backoff(self, attempt: int, exc: BaseException) -> float:
        retry_after = _retry_after(exc)
        if retry_after is not None:
            return min(retry_after, 60.0)
        return random.uniform(0, self.backoff_s * (2**attempt))


class _SharedClients:
    """The async HTTP clients of this process, one per event loop and configuration (endpoint, key, timeout,
    connections, transport), shared by the policies that ask for the same: a client costs about 30 ms and 0.85 MB
    (its TLS context), and a Ray actor or a worker process makes one policy per slot, thousands of them. A client
    closes when the last policy holding it lets go (:meth:`release`); one whose loop closed is dropped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[tuple[Any, ...], tuple[Any, weakref.WeakSet[Any]]] = {}

    def take(self, key: tuple[Any, ...], policy: Any, make: Callable[[], Any]) -> Any:
        with self._lock:
            for old in [k for k in self._clients if k[0].is_closed()]:
                del self._clients[old]  # a client refers to its loop: the entry would keep both for ever
            entry = self._clients.get(key)
            if entry is None:
                entry = self._clients[key] = (make(), weakref.WeakSet())
            entry[1].add(policy)
            return entry[0]

    def release(self, key: tuple[Any, ...], policy: Any) -> bool:
        """``policy`` lets go of the client of ``key``; True when it was the last holder (the caller closes it)."""
        with self._lock:
            entry = self._clients.get(key)
            if entry is None:
                return False
            entry[1].discard(policy)
            if entry[1]:
                return False
            del self._clients[key]
            return True


_CLIENTS = _SharedClients()


def _http_client(timeout_s: float, connections: int, aiohttp: bool = True) -> Any:
    """The SDK's HTTP client with ``connections`` connections, all kept alive when idle (the SDK's default limits
    allow 1,000 and keep 100): over the SDK's aiohttp transport (about half the CPU per request of its httpx one)
    when ``aiohttp`` and it is installed, else over httpx. aiohttp's connector takes ``max_connections`` as its
    ``limit`` (no limit per host) and keeps every idle connection for ``keepalive_expiry``."""
    import httpx2
    from openai import DefaultAsyncHttpxClient

    limits = httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)
    if aiohttp:
        try:
            from openai import DefaultAioHttpClient

            return DefaultAioHttpClient(timeout=timeout_s, limits=limits)  # RuntimeError without openai[aiohttp]
        except (ImportError, RuntimeError):
            pass
    return DefaultAsyncHttpxClient(timeout=timeout_s, limits=limits)


def _transient(exc: BaseException) -> bool:
    """Connection errors, timeouts (the SDK's, aiohttp's and :class:`ReplyTimeout`), 429 and 5xx are worth retrying;
    other errors are not."""
    import openai

    if isinstance(exc, openai.APIConnectionError | openai.APITimeoutError | openai.RateLimitError | TimeoutError):
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code >= 500 or exc.status_code == 429
    # the SDK's aiohttp transport passes aiohttp's own errors through (a bad status line, a broken response): a
    # connection problem, as httpx's are; matched by name, so aiohttp is never imported here
    return any(c.__name__ == "ClientError" and c.__module__.startswith("aiohttp") for c in type(exc).__mro__)


def refused(exc: BaseException) -> bool:
    """Whether the connection was refused (a ``ConnectionRefusedError`` anywhere in the chain of causes: the SDK's
    aiohttp transport reports one as a connect *timeout*, httpx as a connect error)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, ConnectionRefusedError):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def context_overflow(exc: BaseException) -> bool:
    """Whether the endpoint answered HTTP 400 because the request does not fit the model's context: by the error's
    structured fields where the server gives them (OpenAI: ``code: "context_length_exceeded"``; vLLM: ``param:
    "input_tokens"``), else by the text of the two servers that give nothing else (:data:`_OVERFLOW_TEXT`)."""
    import openai

    if not isinstance(exc, openai.BadRequestError):
        return False
    if exc.code == "context_length_exceeded" or exc.param == "input_tokens":
        return True
    body = exc.body
    if isinstance(
        body, dict
    ):  # the SDK keeps {"error": {...}}'s inner object; other bodies (vLLM's old, FastAPI's) whole
        body = body.get("message") or body.get("detail") or ""
    return bool(_OVERFLOW_TEXT.search(str(body or "")))


def _endpoint_error(exc: BaseException) -> str:
    """The error's type and message, and for an HTTP error status the endpoint's own reason: the SDK's message is
    only "Error code: 400" when the body is not OpenAI's ``{"error": ...}`` (``transformers serve`` answers
    ``{"detail": ...}``, e.g. for a tool call it could not parse), and that reason is what says what to change."""
    text = f"{type(exc).__name__}: {exc}"
    body = getattr(exc, "body", None) if getattr(exc, "status_code", None) is not None else None
    if isinstance(body, dict):  # the SDK keeps {"error": {...}}'s inner object; other bodies whole
        inner = body.get("error")
        inner = inner.get("message") if isinstance(inner, dict) else inner
        body = body.get("detail") or body.get("message") or inner or body
    reason = " ".join(str(body).split())[:500] if body else ""
    if not reason or reason in text or " - " in str(exc) or reason.startswith("<"):
        return text  # none; already in the SDK's message (it appends " - <body>" for some bodies); an HTML page
    return f"{text} ({reason})"


def _encodable(text: Any) -> Any:
    """``text`` with each lone surrogate replaced by U+FFFD (such text cannot be encoded as UTF-8: the next request,
    a sink or a terminal would fail on it); anything but a ``str`` unchanged (the caller reports it)."""
    return _SURROGATE.sub("\ufffd", text) if isinstance(text, str) else text


def _encodable_tree(value: Any) -> Any:
    """A copy of a JSON-like request body with every string made :func:`_encodable` (keys included)."""
    if isinstance(value, str):
        return _encodable(value)
    if isinstance(value, dict):
        return {_encodable(k): _encodable_tree(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encodable_tree(v) for v in value]
    return value


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _sample(choice: Any, response: Any) -> Sample | None:
    """The sampled tokens and logprobs of a choice, when the server returned them (ids when vLLM spells them)."""
    lp = choice.get("logprobs")
    content = lp.get("content") if isinstance(lp, dict) else None
    if not content:
        return None
    ids = [_token_id(t["token"]) for t in content]
    return Sample(
        token_ids=ids if all(i is not None for i in ids) else None,  # type: ignore[arg-type]
        logprobs=[t["logprob"] for t in content],
        tokens=[t["token"] for t in content],
        model_version=response.get("model"),
        finish_reason=choice.get("finish_reason"),
    )


def _token_id(token: str) -> int | None:
    """vLLM's ``return_tokens_as_token_ids`` spells tokens as ``token_id:<n>``."""
    if token.startswith("token_id:"):
        try:
            return int(token.split(":", 1)[1])
        except ValueError:
            return None
    return None
