"""An agent's next call continues the ids it was sampled, when it sends its conversation back unchanged.

An agent sends back the whole conversation at each call. Rendered again by the chat template, the model's last reply
is rarely the ids it sampled: a tool call's JSON is re-spaced, a text re-tokenized another way. Trained on, such a
prompt is not what the model saw when it sampled, and the episode's calls do not merge into one sequence. So, within
an episode, when a request's messages are the previous request's, then the reply the endpoint gave (its text and tool
calls, compared after parsing), then only tool results or user turns, and the same tools, its prompt ids are the
previous prompt ids, the sampled completion ids (which end with the end-of-turn token), and the new messages rendered
as the template continues after that token (:meth:`~aworld_gym.rollout.tokens.ChatTokens.env_turn_ids`). Anything
else (a history rewritten, cut or summarised; a reply cut at ``max_tokens`` or at a ``stop`` string) is rendered
whole, as any request is. ``CallRecord.continued`` says which.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import Any

from aworld_gym.endpoint.chat import ChatRequest, _message

logger = logging.getLogger(__name__)


@dataclass
class _Last:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    prompt_ids: list[int]
    completion_ids: list[int]
    reply: dict[str, Any]


def _same_reply(sent: dict[str, Any], given: dict[str, Any]) -> bool:
    """Whether an assistant message sent back is the reply the endpoint gave (text, and calls by name and value)."""

    def calls(m: dict[str, Any]) -> list[tuple[str, Any]]:
        out = []
        for c in m.get("tool_calls") or []:
            args = c["function"].get("arguments")
            try:
                args = json.loads(args) if isinstance(args, str) else args
            except ValueError:
                pass
            out.append((c["function"]["name"], args))
        return out

    return (sent.get("role") == "assistant" and (sent.get("content") or "").strip() == (given.get("content") or "").strip()
            and calls(sent) == calls(given))  # fmt: skip


class Continuations:
    """Per episode, the last call, and the prompt ids of a request that continues it (see the module)."""

    def __init__(self, tokenizer: Any, chat_template_kwargs: dict[str, Any] | None = None) -> None:
        from aworld_gym.rollout.tokens import ChatTokens

        try:
            self.chat: Any = ChatTokens(tokenizer, chat_template_kwargs)
        except ValueError as exc:  # a template that does not end a turn with the eos token: every call rendered
            logger.warning("calls are rendered whole, never continued: %s", exc)
            self.chat = None
        self.eos_id = tokenizer.eos_token_id
        self._last: dict[str, _Last] = {}
        self._lock = threading.Lock()

    def prompt(self, episode: str | None, request: ChatRequest) -> list[int] | None:
        """The prompt ids that continue the episode's last call, or ``None`` (render the request whole)."""
        if episode is None or self.chat is None:
            return None
        with self._lock:
            last = self._last.get(episode)
        if last is None:
            return None
        n = len(last.messages)
        tools = request.tools if request.tools_offered else None
        if len(request.messages) <= n + 1 or request.messages[:n] != last.messages or tools != last.tools:
            return None
        rest = request.messages[n + 1 :]
        if not _same_reply(request.messages[n], last.reply) or any(m["role"] not in ("tool", "user") for m in rest):
            return None
        try:
            after = self.chat.env_turn_ids(rest)
        except ValueError:  # not prefix-preserving, or not text
            return None
        return last.prompt_ids + last.completion_ids + after

    def keep(self, episode: str | None, request: ChatRequest, prompt_ids: list[int], completion_ids: list[int],
             reply: dict[str, Any]) -> None:  # fmt: skip
        """The episode's last call: continuable when it ended with the end-of-turn token."""
        if episode is None:
            return
        with self._lock:
            if completion_ids and completion_ids[-1] == self.eos_id:
                tools = request.tools if request.tools_offered else None
                self._last[episode] = _Last(list(request.messages), tools, list(prompt_ids), list(completion_ids),
                                            _message(reply, 0))  # fmt: skip
            else:
                self._last.pop(episode, None)

    def forget(self, episode: str) -> None:
        with self._lock:
            self._last.pop(episode, None)
