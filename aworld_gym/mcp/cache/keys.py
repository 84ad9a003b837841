"""What a recorded call is looked up by.

A call's key is the SHA-256 of canonical JSON (keys sorted, no spaces, as UTF-8) of:

- the server's identity (its entry's ``cache.id``, else its name in ``mcpServers``);
- the tool's own name on the server;
- the arguments, canonical (so ``{"a": 1, "b": 2}`` and ``{"b": 2, "a": 1}`` are one call);
- the hash of the tool's input schema (a tool whose arguments changed is another tool);
- its state scope's value: nothing for a ``stateless`` server; the task's id for a ``task`` server; for an
  ``episode`` server the task's id, the episode's seed and the chain of this server's earlier calls in the episode (so
  a stateful server's result is only ever served to the same call at the same point of the same episode).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

SCOPES = ("stateless", "task", "episode")


def canonical(value: Any) -> str:
    """``value`` as canonical JSON text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def digest(value: Any) -> str:
    return hashlib.sha256(canonical(value).encode("utf-8", "surrogatepass")).hexdigest()


def schema_hash(schema: Any) -> str:
    """The hash of a tool's input schema."""
    return digest(schema or {})[:16]


@dataclass
class EpisodeScope:
    """What the calls of one episode are keyed by: the task, the episode (task and seed; ``None`` when the episode
    has no seed, which no later run can name again) and, per server, the chain of its calls so far."""

    task: str | None = None
    seed: int | None = None
    chains: dict[str, str] = field(default_factory=dict)

    def value(self, scope: str, server: str) -> Any:
        """The scope part of a key; ``None`` for an ``episode`` call of an episode without a seed (not cacheable)."""
        if scope == "stateless":
            return []
        if scope == "task":
            return ["task", self.task]
        if self.seed is None:
            return None
        return ["episode", self.task, self.seed, self.chains.get(server, "")]

    def advance(self, server: str, key: str) -> None:
        """``server``'s chain after the call of ``key``."""
        self.chains[server] = digest([self.chains.get(server, ""), key])[:32]


def call_key(server: str, tool: str, arguments: Any, schema: Any, scope_value: Any) -> str:
    return digest({"server": server, "tool": tool, "arguments": arguments, "schema": schema_hash(schema),
                   "scope": scope_value})  # fmt: skip
