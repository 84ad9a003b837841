"""The Trajectory: one typed record of an episode, read by sinks, the report, group hooks and every trainer face.

Its turns *are* the env's turn log (the same dicts the env appended, no second copy; the episode driver adds what
only it knows: the policy's time, the sampled tokens, the reward the outermost env returned). Around them: the task,
the GRPO group, how the episode ended, one reward ledger (the env's own, shared), timings, errors, the token data of token-exact runs, and a
**status**:

==========  ===============================================================  =====================
status      what ended the episode                                           trainer faces
==========  ===============================================================  =====================
``ok``      an answer that solved the task (score >= 1, or no reference)     trained on
``failed``  the model's own fault: a wrong answer, format errors, the turn   trained on
            limit, the token budget, the context limit, a cut-off reply
``void``    infrastructure: ``env_crash``, ``env_error``, ``policy_error``,  masked (loss weight 0,
            ``tool_timeout`` (a server that did not answer), ``abort`` (the  never a silent reward 0)
            engine aborted the generation)
==========  ===============================================================  =====================

``to_record()`` is the one serialisation (JSONL and Parquet rows, what ``aworld-gym report`` reads);
``Trajectory.from_record()`` reads one back.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypedDict


class Termination:
    """How an episode ended: the one vocabulary (``record["termination"]``, ``info["truncation_reason"]``)."""

    ANSWER = "answer"  # terminated: an answer was submitted, or the task ended by itself
    TURN_LIMIT = "turn_limit"
    TOKEN_BUDGET = "token_budget"  # the episode's token (or character) budget is spent
    CONTEXT_LIMIT = "context_limit"  # the next generation would not fit in the model's context
    LENGTH = "length"  # the model's reply was cut off by its max_tokens (finish_reason "length")
    TOOL_TIMEOUT = "tool_timeout"
    ENV_CRASH = "env_crash"  # the env lost the task's state mid-episode (a server or browser died)
    ENV_ERROR = "env_error"  # the env could not be made or reset, or raised
    POLICY_ERROR = "policy_error"  # the model endpoint failed or hung
    ABORT = "abort"  # the inference engine aborted the generation (a weight update, a drained server)
    CACHE_MISS = "cache_miss"  # replay-strict: a tool call's result was never recorded (the tool cache, mcp/cache)
    AGENT_ERROR = "agent_error"  # an agent program (endpoint.AgentPolicy) raised, or ended without an answer

    TRUNCATIONS = (TURN_LIMIT, TOKEN_BUDGET, CONTEXT_LIMIT, LENGTH, TOOL_TIMEOUT, ENV_CRASH, CACHE_MISS)
    VOID = frozenset({ENV_CRASH, ENV_ERROR, POLICY_ERROR, TOOL_TIMEOUT, ABORT, CACHE_MISS})
    ALL = (ANSWER, *TRUNCATIONS, ENV_ERROR, POLICY_ERROR, ABORT, AGENT_ERROR)


Status = Literal["ok", "failed", "void"]
OK: Status = "ok"
FAILED: Status = "failed"
VOID: Status = "void"
VOID_POLICIES = ("mask", "zero", "retry")


def status_of(termination: str | None, score: float | None, terminated: bool) -> Status:
    """The status of an episode from its ending (see the module's table)."""
    if termination in Termination.VOID:
        return VOID
    if terminated and (score is None or float(score) >= 1.0 - 1e-9):
        return OK
    return FAILED


def sum_into(totals: dict[str, float], components: Mapping[str, float]) -> float:
    """Add ``components`` into ``totals`` (the one place reward components are summed); returns their sum."""
    for k, v in components.items():
        totals[k] = totals.get(k, 0.0) + float(v)
    return float(sum(components.values()))


class Source:
    """Who added to a :class:`RewardLedger` (the keys of ``RewardLedger.sources``)."""

    ENV = "env"  # the env's own rubric, its step and episode hooks: the env's ``episode_reward``
    SHAPING = "shaping"  # reward-shaping wrappers (``aworld_gym.wrappers.RewardShaping``)
    OUTER = "outer"  # what the outermost env returned beyond the layers below (a Gymnasium reward wrapper's
    # transform; all of it for an env that keeps no ledger)
    DRIVER = "driver"  # the episode driver's own components (``context_limit``)
    GROUP = "group"  # group reward hooks, on a complete GRPO group


@dataclass
class Share:
    """One source's part of a ledger: what it added to the total, and its components."""

    total: float = 0.0
    components: dict[str, float] = field(default_factory=dict)


@dataclass
class RewardLedger:
    """An episode's reward, the one place its components are summed: ``total`` is always the sum of what was added.

    There is one per episode: the env's running episode (:class:`aworld_gym.core.running.Episode`) keeps it and the
    trajectory the episode driver builds holds the same object, so each part of the reward is written once, by its
    writer, tagged with its :class:`Source`: the env's rubric and reward-shaping wrappers through the turn's one
    writer (:func:`aworld_gym.core.running.set_turn_reward`), the driver (what the outermost env returned beyond them,
    the context limit), the group hooks.

    Attributes:
        total: the episode's reward (what the outermost env returned, plus group and overflow components).
        components: the weighted components by name.
        metrics: weight-0 components (logged, not counted).
        errors: reward hooks that raised, by name.
        sources: each writer's :class:`Share` (``share(Source.ENV)`` is the env's own reward, wrappers' shaping not
            included). Bookkeeping of who wrote what: not in a record (a ledger read back has none), not compared.
    """

    total: float = 0.0
    components: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    sources: dict[str, Share] = field(default_factory=dict, compare=False)

    def add(self, components: Mapping[str, float], total: float | None = None, *, source: str) -> float:
        """Add ``source``'s components; ``total`` (default: their sum) is what they add to the reward (a Gymnasium
        reward wrapper's transform shows in the total, not in the components). Returns the added total."""
        added = sum_into(self.components, components)
        added = added if total is None else float(total)
        self.total += added
        share = self.sources.setdefault(source, Share())
        share.total += added
        sum_into(share.components, components)
        return added

    def change(self, before: Mapping[str, float], after: Mapping[str, float], total: float, *, source: str) -> None:
        """A turn's components went from ``before`` to ``after`` and its reward changed by ``total``: add the
        difference as ``source``'s. A component ``after`` no longer has (a wrapper that replaces the env's
        components) leaves ``components`` when that brings it to 0."""
        delta = {k: float(v) - float(before.get(k, 0.0)) for k, v in after.items()}
        delta.update({k: -float(v) for k, v in before.items() if k not in after})
        delta = {k: v for k, v in delta.items() if v or k not in before}  # unchanged: not written again
        if delta or total:
            self.add(delta, total, source=source)
        for k in before.keys() - after.keys():
            if abs(self.components.get(k, 1.0)) <= 1e-12:
                del self.components[k]

    def share(self, source: str) -> Share:
        """What ``source`` added (an empty share if nothing)."""
        return self.sources.get(source) or Share()

    def add_metrics(self, metrics: Mapping[str, float] | None, errors: Mapping[str, str] | None = None) -> None:
        sum_into(self.metrics, metrics or {})
        self.errors.update(errors or {})


class Turn(TypedDict, total=False):
    """One turn of the env's log (a dict: reward hooks and policies read it as the env wrote it).

    Keys: ``turn``, ``action`` (the text), ``tool_calls`` (parsed calls), ``tool_results``, ``observation``,
    ``reward`` and ``reward_components`` (as the outermost env returned them), ``action_error``, ``answer``,
    ``messages`` (the chat messages the turn added; not serialised), ``step_time_s``; added by the driver:
    ``policy_s``, ``env_s``, ``sampled`` (prompt ids, completion ids, logprobs, model version, finish reason),
    ``screenshot`` (a file, images are kept as references).
    """

    turn: int
    action: str
    tool_calls: list[dict[str, Any]]
    tool_results: list[dict[str, Any]]
    observation: Any
    reward: float
    reward_components: dict[str, float]
    action_error: str | None
    answer: str | None
    messages: list[dict[str, Any]]
    step_time_s: float
    policy_s: float
    env_s: float
    sampled: dict[str, Any]
    screenshot: str


_NOT_SERIALISED = ("messages", "step_time_s")

# The keys of a record, in order: always there ...
_RECORD_KEYS = ("episode_id", "env_id", "task_id", "seed", "sample", "group", "policy", "started_at", "task_meta",
                "turns", "num_turns", "reward", "reward_components", "metrics", "reward_errors", "score", "answer",
                "terminated", "truncated", "termination", "status", "weight", "error", "timings")  # fmt: skip
# ... there when the named field is set ...
_RECORD_IF_SET = {"prompt": "prompt", "screenshot": "screenshot", "tokens": "tokens",
                  "group_complete": "group_complete", "group_reward_components": "group_complete"}  # fmt: skip
# ... and read from the ledger.
_LEDGER_KEYS = {"reward": "total", "reward_components": "components", "metrics": "metrics", "reward_errors": "errors"}


@dataclass
class TokenData:
    """A token-exact episode: the prompt, then the completion (model ids mask 1, env ids mask 0) and logprobs."""

    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    model_turns: int = 0
    env_turns: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class Trajectory:
    """One episode. See the module's docstring for the status and the serialisation.

    Attributes:
        env_id: the env's name; task_id / task_meta: its task; prompt: the first observation (cut at 8,000
            characters); seed / sample / group: how the episode was planned (``group``: the GRPO group's key).
        policy: the policy's name. turns: the env's turn log. ledger: the reward. score / answer: the task score
            and the submitted answer. terminated / truncated / termination: the ending (see :class:`Termination`).
        error: the traceback of what failed (void episodes). timings: reset_s, policy_s, env_s, total_s.
        tokens: the token data of a token-exact episode. weight: the loss weight a trainer face applies (0: masked).
        group_complete: whether the whole GRPO group was there when its group hooks ran.
        group_reward_components: what the group hooks added.
    """

    env_id: str = ""
    task_id: str | None = None
    task_meta: dict[str, Any] = field(default_factory=dict)
    prompt: str | None = None
    seed: int | None = None
    sample: int = 0
    group: str | None = None
    policy: str | None = None
    episode_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started_at: float = field(default_factory=time.time)
    turns: list[Turn] = field(default_factory=list)
    ledger: RewardLedger = field(default_factory=RewardLedger)
    score: float | None = None
    answer: str | None = None
    terminated: bool = False
    truncated: bool = False
    termination: str | None = None
    error: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    tokens: TokenData | None = None
    weight: float = 1.0
    group_complete: bool | None = None
    group_reward_components: dict[str, float] = field(default_factory=dict)
    screenshot: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    # ----- the ending --------------------------------------------------------------------------------------
    @property
    def status(self) -> Status:
        return status_of(self.termination, self.score, self.terminated)

    @property
    def void(self) -> bool:
        return self.status == VOID

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated or self.termination is not None

    @property
    def reward(self) -> float:
        return self.ledger.total

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    def end(self, termination: str, *, error: str | None = None) -> None:
        """End the episode without an env step (a failure, the context limit, a cut-off reply)."""
        self.termination = termination
        if error is not None:
            self.error = error[-4000:]
        self.truncated = not self.terminated

    # ----- one serialisation -------------------------------------------------------------------------------
    def _in_record(self, key: str) -> bool:
        return key in _RECORD_KEYS or (key in _RECORD_IF_SET and getattr(self, _RECORD_IF_SET[key]) is not None)

    def _record_value(self, key: str) -> Any:
        """The value of one record key that is a field's own (a copy of a dict, as the record holds it)."""
        if key == "turns":
            return [{k: v for k, v in t.items() if k not in _NOT_SERIALISED} for t in self.turns]
        if key == "tokens":
            return self.tokens.to_dict() if self.tokens is not None else None
        value = getattr(self.ledger, _LEDGER_KEYS[key]) if key in _LEDGER_KEYS else getattr(self, key)
        return dict(value) if isinstance(value, dict) else value

    def __getitem__(self, key: str) -> Any:
        """A trajectory reads as its record too (``traj["reward"]``), so code written for records keeps working: the
        same value as ``to_record()[key]``, read from the one field (the record is not built for it)."""
        if self._in_record(key):
            return self._record_value(key)
        if key in self.extra:
            return self.extra[key]
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        """``to_record().get(key, default)``, read from the one field."""
        try:
            return self[key]
        except KeyError:
            return default

    def to_record(self) -> dict[str, Any]:
        """The JSON-able record (JSONL/Parquet rows; the turns without their chat messages)."""
        rec = {k: self._record_value(k) for k in (*_RECORD_KEYS, *_RECORD_IF_SET) if self._in_record(k)}
        for k, v in self.extra.items():  # extra keys never clobber a field's own
            rec.setdefault(k, v)
        return rec

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Trajectory:
        """Read a record back (as written by :meth:`to_record`). Any key is accepted: keys it does not know go to
        ``extra``, as do keys named like the attributes a record never holds as such (``ledger``, ``extra``), so they
        come back from :meth:`to_record` without replacing a field."""
        rec = dict(rec)
        ledger = RewardLedger(
            total=float(rec.pop("reward", 0.0) or 0.0),
            components=dict(rec.pop("reward_components", None) or {}),
            metrics=dict(rec.pop("metrics", None) or {}),
            errors=dict(rec.pop("reward_errors", None) or {}),
        )
        tokens = rec.pop("tokens", None)
        if tokens and not (isinstance(tokens, Mapping) and set(tokens) <= {f.name for f in fields(TokenData)}):
            rec["tokens"], tokens = tokens, None  # not token data: kept as it was, in extra
        for derived in ("num_turns", "status"):
            rec.pop(derived, None)
        known = {f.name for f in fields(cls)} - {"ledger", "extra", "tokens"}
        kwargs = {k: v for k, v in rec.items() if k in known}
        extra = {k: v for k, v in rec.items() if k not in known}
        kwargs["turns"] = list(kwargs.get("turns") or [])
        kwargs["task_meta"] = dict(kwargs.get("task_meta") or {})
        kwargs["timings"] = dict(kwargs.get("timings") or {})
        kwargs["group_reward_components"] = dict(kwargs.get("group_reward_components") or {})
        return cls(ledger=ledger, tokens=TokenData(**tokens) if tokens else None, extra=extra, **kwargs)


def void_counts(trajectories: Any) -> dict[str, float]:
    """``void/rate`` and ``void/<kind>`` counts over trajectories or records (what trainer faces log)."""
    n, kinds = 0, {}
    for t in trajectories:
        n += 1
        rec_status = t.status if isinstance(t, Trajectory) else t.get("status")
        if rec_status == VOID:
            kind = (t.termination if isinstance(t, Trajectory) else t.get("termination")) or "unknown"
            kinds[kind] = kinds.get(kind, 0) + 1
    out: dict[str, float] = {"void/rate": (sum(kinds.values()) / n) if n else 0.0}
    out.update({f"void/{k}": float(v) for k, v in sorted(kinds.items())})
    return out
