"""What the endpoint keeps of each call, and the episodes it keeps them apart by.

An episode is opened by whoever runs the agent (:meth:`Episodes.open`, which gives it its base URL path) and closed
when the episode ends (:meth:`Episodes.close`, which hands back its calls in order). A call naming an episode that
was never opened is unknown (404); one naming an episode that has ended is refused (410) and recorded nowhere: an
agent that goes on after its episode cannot add tokens to it, nor to any other.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

UNKNOWN, OPEN, ENDED = "unknown", "open", "ended"


@dataclass
class CallRecord:
    """One chat completion as the backend produced it.

    ``prompt_ids``: the rendered request (the chat template with the request's tools and the generation prompt);
    ``completion_ids``: the ids as sampled (the end-of-turn token included when sampled; cut at a ``stop`` string
    when the request gave one); ``logprobs``: one per completion id; ``text``: the completion as decoded;
    ``finish_reason``: OpenAI's (``stop``, ``length``, ``tool_calls``); ``weights_version``: the backend's;
    ``continued``: the prompt ids continue the episode's previous call (its prompt and sampled ids) rather than a
    new rendering (:mod:`aworld_gym.endpoint.continuation`).
    """

    episode: str | None
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    text: str
    weights_version: int | None = None
    tool_calls: int = 0
    created: float = field(default_factory=time.time)
    latency_s: float = 0.0
    continued: bool = False  # the prompt continues the episode's last call's sampled ids (endpoint.continuation)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Episodes:
    """The episodes an endpoint serves and the calls of each (thread-safe: the server and the driver share it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[str, list[CallRecord]] = {}
        self._ended: set[str] = set()

    def open(self, episode: str) -> None:
        """Start keeping ``episode``'s calls (a name used before, open or ended, is an error: ids are not reused)."""
        if not episode or "/" in episode:
            raise ValueError(f"an episode id is a non-empty string without '/', got {episode!r}")
        with self._lock:
            if episode in self._calls or episode in self._ended:
                raise ValueError(f"episode {episode!r} was opened before")
            self._calls[episode] = []

    def state(self, episode: str) -> str:
        with self._lock:
            return OPEN if episode in self._calls else ENDED if episode in self._ended else UNKNOWN

    def add(self, record: CallRecord) -> bool:
        """Keep ``record`` under its episode; False (kept nowhere) when the episode is no longer open."""
        with self._lock:
            if record.episode is None:
                return True  # a call outside any episode: served, not kept here (``out`` may write it)
            calls = self._calls.get(record.episode)
            if calls is None:
                return False
            calls.append(record)
            return True

    def calls(self, episode: str) -> list[CallRecord]:
        """The calls of an open episode so far."""
        with self._lock:
            return list(self._calls.get(episode, ()))

    def close(self, episode: str) -> list[CallRecord]:
        """End ``episode``: its calls, in order; later calls naming it are refused."""
        with self._lock:
            calls = self._calls.pop(episode, [])
            self._ended.add(episode)
            return calls

    @property
    def open_count(self) -> int:
        with self._lock:
            return len(self._calls)
