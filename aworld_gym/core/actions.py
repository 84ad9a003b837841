"""Action parsers: raw model text -> tool calls and/or a final answer.

The canonical format is Qwen3/Hermes text::

    <think>...</think>                      (optional, ignored)
    <tool_call>
    {"name": "run_python", "arguments": {"code": "print(1)"}}
    </tool_call>                            (zero or more)
    <answer>42</answer>                     (the final answer, ends the episode)

GAIA-style ``FINAL ANSWER: ...`` lines are accepted as answers too. Parsers never raise on model text:
problems are reported in :attr:`ParsedAction.errors` so the env can tell the model what was wrong.

Model text is hostile input (a server parses it on its event loop): every scan here is linear in the text (plain
``str.find`` from a forward-moving position, and regexes without overlapping quantifiers that backtrack over the
same characters), a reply's tool calls and each call's arguments are counted against a limit, and the errors are
few and short (a name is cut, never the reply echoed back).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from aworld_gym.base.calls import ToolCall
from aworld_gym.base.errors import ConfigError

__all__ = [
    "Action",
    "ActionParser",
    "HermesParser",
    "ParsedAction",
    "ParserFactory",
    "Sample",
    "action_text",
    "get_parser",
    "parse_action",
    "register_parser",
    "strip_code_fence",
    "strip_think",
]


@dataclass
class ParsedAction:
    """What a parser found in one model turn."""

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    answer: str | None = None
    thought: str | None = None
    content: str = ""
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the turn holds something actionable and no format error."""
        return not self.errors and (bool(self.tool_calls) or self.answer is not None)


@dataclass
class Sample:
    """What the model sampled for one action, kept in the trajectory for training.

    Attributes:
        token_ids: the sampled token ids (exactly as sampled: train on these, not on a re-tokenisation).
        logprobs: their log-probabilities under the sampling policy.
        prompt_ids: the token ids the model was conditioned on, when the policy knows them.
        tokens: the sampled tokens as strings (what an OpenAI-compatible server returns without ids).
        model_version: the version of the weights that sampled them (for staleness bounds in async RL).
        finish_reason: why sampling stopped (``"stop"``, ``"length"``...).
    """

    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    prompt_ids: list[int] | None = None
    tokens: list[str] | None = None
    model_version: int | str | None = None
    finish_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class Action:
    """A policy's action: the text, optionally the tool calls the endpoint already parsed, and the sample.

    ``env.step`` / ``env.astep`` take an ``Action`` or a plain string. With ``tool_calls`` given (native tool calls
    of an OpenAI-compatible endpoint), the env runs exactly those instead of parsing the calls out of ``text``
    again; ``text`` is still parsed for the answer and thoughts, and is what the trajectory records.
    """

    text: str
    tool_calls: list[ToolCall] | None = None
    sample: Sample | None = None

    def __str__(self) -> str:
        return self.text


MAX_CALLS = 16
"""The most tool calls run in one turn (the first ones; the rest are reported, not run)."""
MAX_ARGUMENTS = 64
"""The most arguments (top-level keys) one tool call may have; a call with more is reported, not run."""
MAX_ERRORS = 5
"""The most format errors reported for one turn; more are counted in one closing line."""
_NAME_CHARS = 60  # a tool name shown in an error is cut to this many characters


def parse_action(parser: ActionParser, action: Any) -> ParsedAction:
    """Parse a string or an :class:`Action` (its own tool calls win over those in its text).

    An action's own calls are held to the parser's ``max_calls`` and ``max_arguments`` (:data:`MAX_CALLS` and
    :data:`MAX_ARGUMENTS` for a parser without them), as calls in the text are.
    """
    max_calls = getattr(parser, "max_calls", MAX_CALLS)
    max_arguments = getattr(parser, "max_arguments", MAX_ARGUMENTS)
    if not isinstance(action, Action):
        parsed = parser.parse(action)
        # a parser of the user's own is held to the same limits (ours already applied them: nothing changes)
        parsed.tool_calls, errors = limit_calls(list(parsed.tool_calls), max_calls, max_arguments)
        parsed.errors = bound_errors(parsed.errors + [e for e in errors if e not in parsed.errors])
        return parsed
    parsed = parser.parse(action.text)
    if action.tool_calls is not None:
        if parsed.answer is None:
            calls, errors = limit_calls(list(action.tool_calls), max_calls, max_arguments)
            parsed.tool_calls = calls
            # the same calls rendered into the text (as OpenAIPolicy does) were reported already, in the same words
            parsed.errors += [e for e in errors if e not in parsed.errors]
        elif action.tool_calls and not parsed.errors:
            parsed.errors.append("a turn holds either tool calls or a final answer, not both; the answer was taken")
    parsed.errors = bound_errors(parsed.errors)
    return parsed


def limit_calls(calls: list[ToolCall], max_calls: int, max_arguments: int) -> tuple[list[ToolCall], list[str]]:
    """The calls of one turn that run, and the errors for the rest.

    The first ``max_calls`` calls run (as verl's ``max_parallel_calls`` does) and one error names the limit; a call
    with more than ``max_arguments`` arguments does not run.
    """
    errors: list[str] = []
    if len(calls) > max_calls:
        errors.append(too_many_calls(len(calls), max_calls))
        calls = calls[:max_calls]
    kept = []
    for i, call in enumerate(calls, 1):
        if isinstance(call.arguments, dict) and len(call.arguments) > max_arguments:
            errors.append(too_many_arguments(i, call.name, len(call.arguments), max_arguments))
        else:
            kept.append(call)
    return kept, errors


def too_many_calls(count: int, max_calls: int) -> str:
    """The error for a turn with more tool calls than are run."""
    return (
        f"{count} tool calls in one reply; at most {max_calls} are run per turn (the first {max_calls} ran, "
        f"the other {count - max_calls} did not)"
    )


def too_many_arguments(index: int, name: str, count: int, max_arguments: int) -> str:
    """The error for a tool call with more arguments than a call may have (it does not run)."""
    return (
        f"tool call #{index} ({shown_name(name)}): {count} arguments; at most {max_arguments} are accepted per call, "
        "so it did not run"
    )


def shown_name(name: str) -> str:
    """A tool name as an error shows it: quoted, cut to a few dozen characters."""
    return repr(name) if len(name) <= _NAME_CHARS else repr(name[:_NAME_CHARS]) + f"... ({len(name)} characters)"


def bound_errors(errors: list[str]) -> list[str]:
    """At most :data:`MAX_ERRORS` errors, and a line counting the rest (a reply never makes a long error)."""
    if len(errors) <= MAX_ERRORS:
        return errors
    return [*errors[:MAX_ERRORS], f"and {len(errors) - MAX_ERRORS} more errors of the same kinds"]


def action_text(action: Any) -> str:
    """The text of a string or an :class:`Action`."""
    return action.text if isinstance(action, Action) else str(action)


@runtime_checkable
class ActionParser(Protocol):
    """Turns raw model text into a :class:`ParsedAction`; must never raise on any ``str``."""

    def parse(self, text: str) -> ParsedAction: ...


_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_TOOL_OPEN, _TOOL_CLOSE = "<tool_call>", "</tool_call>"
_ANSWER_OPEN, _ANSWER_CLOSE = "<answer>", "</answer>"
# A line opening with FINAL ANSWER: ``^`` holds only at line starts and the prefix class cannot cross a line, so each
# line is tried once. The colon and the value are read by hand (a regex ``\s*(.*?)\s*$`` is quadratic in spaces).
_FINAL_HEAD_RE = re.compile(r"^[ \t*#>]*FINAL ANSWER", re.MULTILINE | re.IGNORECASE)
_SPACES_RE = re.compile(r"\s*")
_CODE_FENCE_RE = re.compile(r"\A```[a-zA-Z0-9_+-]*\n(.*?)\n?```\Z", re.DOTALL)


def strip_think(text: str) -> tuple[str, str | None]:
    """Remove ``<think>`` blocks (an unterminated one runs to the end); return (rest, thought)."""
    if "think>" not in text:
        return text, None  # the common case
    thoughts: list[str] = []
    kept: list[str] = []
    pos = 0
    while (start := text.find(_THINK_OPEN, pos)) >= 0:
        kept.append(text[pos:start])
        inner = start + len(_THINK_OPEN)
        end = text.find(_THINK_CLOSE, inner)
        if end < 0:
            end = len(text)
        thoughts.append(text[inner:end].strip())
        pos = min(end + len(_THINK_CLOSE), len(text))
    kept.append(text[pos:])
    rest = "".join(kept)
    # A stray closing tag (Qwen3 chat templates may pre-open <think>) drops everything before it.
    if "</think>" in rest:
        before, _, rest = rest.rpartition("</think>")
        thoughts.insert(0, before.strip())
    return rest, ("\n".join(t for t in thoughts if t) or None)


def strip_code_fence(text: str) -> str:
    """Return the body of a single fenced code block, or the text unchanged."""
    m = _CODE_FENCE_RE.match(text.strip())
    return m.group(1) if m else text


class HermesParser:
    """Qwen3/Hermes ``<tool_call>`` JSON blocks, ``<answer>`` tags and ``FINAL ANSWER:`` lines.

    Args:
        max_calls: the most tool calls run in one turn: the first ``max_calls`` run, and one error tells the model
            how many it sent and that the rest did not run.
        max_arguments: the most arguments one call may have; a call with more does not run (an error says so).
        allow_final_answer_line: accept GAIA's ``FINAL ANSWER: ...`` line as an answer.
    """

    def __init__(
        self, max_calls: int = MAX_CALLS, allow_final_answer_line: bool = True, max_arguments: int = MAX_ARGUMENTS
    ) -> None:
        self.max_calls = max_calls
        self.max_arguments = max_arguments
        self.allow_final_answer_line = allow_final_answer_line

    def parse(self, text: str) -> ParsedAction:
        if not isinstance(text, str):
            return ParsedAction(
                text=repr(text)[:2000], errors=[f"the action must be a string, got {type(text).__name__}"]
            )
        body, thought = strip_think(text)
        action = ParsedAction(text=text, thought=thought)
        body = self._parse_tool_calls(body, action)
        action.content = body.strip()
        start = body.find(_ANSWER_OPEN)
        end = body.find(_ANSWER_CLOSE, start + len(_ANSWER_OPEN)) if start >= 0 else -1
        if end >= 0:
            action.answer = body[start + len(_ANSWER_OPEN) : end].strip()
        elif start >= 0:
            action.errors.append("an <answer> tag was opened but never closed with </answer>")
        elif self.allow_final_answer_line and "final answer" in body.lower():
            finals = _final_answers(body)
            if finals:
                action.answer = finals[-1].strip().strip("*").strip()
        if action.answer is not None and action.tool_calls:
            # An answer ends the episode; calls made in the same turn would never be seen.
            action.errors.append("a turn holds either tool calls or a final answer, not both; the answer was taken")
            action.tool_calls = []
        action.errors = bound_errors(action.errors)
        return action

    def _parse_tool_calls(self, body: str, action: ParsedAction) -> str:
        """Extract every ``<tool_call>`` block; return the text outside them."""
        rest, calls, errors = read_tool_calls(body, self.max_calls, self.max_arguments)
        action.tool_calls.extend(calls)
        action.errors.extend(errors)
        return rest


def read_tool_calls(body: str, max_calls: int = MAX_CALLS, max_arguments: int = MAX_ARGUMENTS
                    ) -> tuple[str, list[ToolCall], list[str]]:  # fmt: skip
    """The Qwen3/Hermes ``<tool_call>`` JSON blocks of ``body``: the text outside them, the calls that decoded (the
    first ``max_calls``), and an error per block that did not (and one for calls past ``max_calls``)."""
    rest: list[str] = []
    calls: list[ToolCall] = []
    errors: list[str] = []
    pos = 0
    n = 0
    while True:
        start = body.find(_TOOL_OPEN, pos)
        if start < 0:
            rest.append(body[pos:])
            break
        rest.append(body[pos:start])
        inner_start = start + len(_TOOL_OPEN)
        end = body.find(_TOOL_CLOSE, inner_start)
        if end < 0:
            errors.append(f"tool call #{n + 1}: <tool_call> was opened but never closed with </tool_call>")
            break
        n += 1
        pos = end + len(_TOOL_CLOSE)
        if n > max_calls:
            continue  # counted, not read: one error below names the limit
        if body.find(_TOOL_OPEN, inner_start, end) >= 0:  # searched up to ``end`` only: each character once
            errors.append(f"tool call #{n}: <tool_call> tags cannot be nested")
            continue
        call, error = _decode_call(body[inner_start:end], index=n, max_arguments=max_arguments)
        if error:
            errors.append(error)
        elif call is not None:
            calls.append(call)
    if n > max_calls:
        errors.append(too_many_calls(n, max_calls))
    if any(_TOOL_CLOSE in part for part in rest):
        errors.append("a </tool_call> tag appeared without a matching <tool_call>")
    return "".join(rest), calls, errors


def _final_answers(body: str) -> list[str]:
    """The values of ``FINAL ANSWER: ...`` lines (the colon and the value may follow on later lines), in order."""
    finals: list[str] = []
    pos = 0
    while (head := _FINAL_HEAD_RE.search(body, pos)) is not None:
        colon = _SPACES_RE.match(body, head.end()).end()  # type: ignore[union-attr]  # \s* always matches
        pos = head.end()
        if colon >= len(body) or body[colon] != ":":
            continue
        value = _SPACES_RE.match(body, colon + 1).end()  # type: ignore[union-attr]
        line_end = body.find("\n", value)
        pos = len(body) if line_end < 0 else line_end
        finals.append(body[value:pos].rstrip())
    return finals


def _decode_call(payload: str, index: int, max_arguments: int) -> tuple[ToolCall | None, str | None]:
    payload = strip_code_fence(payload.strip())
    if not payload:
        return None, f"tool call #{index}: the <tool_call> block is empty"
    try:
        obj = json.loads(payload)
    except json.JSONDecodeError as exc:
        return None, f"tool call #{index}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    except RecursionError:
        return None, f"tool call #{index}: the JSON is nested too deeply to read; send flatter arguments"
    if not isinstance(obj, dict):
        return None, f'tool call #{index}: expected a JSON object {{"name": ..., "arguments": {{...}}}}'
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None, f'tool call #{index}: missing "name" (a non-empty string)'
    args: Any = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        # Some models double-encode the arguments object.
        try:
            args = json.loads(args) if args.strip() else {}
        except (json.JSONDecodeError, RecursionError):
            return None, f'tool call #{index} ({shown_name(name)}): "arguments" is a string that is not a JSON object'
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return None, (
            f'tool call #{index} ({shown_name(name)}): "arguments" must be a JSON object, got {type(args).__name__}'
        )
    if len(args) > max_arguments:
        return None, too_many_arguments(index, name, len(args), max_arguments)
    call_id = obj.get("id") if isinstance(obj.get("id"), str) else f"call_{index}"
    return ToolCall(name=name.strip(), arguments=args, id=call_id), None


ParserFactory = Callable[[], ActionParser]
_PARSERS: dict[str, ParserFactory] = {"hermes": HermesParser, "qwen3": HermesParser}


def register_parser(name: str, factory: ParserFactory) -> None:
    """Make ``action_format=name`` available to every env."""
    _PARSERS[name] = factory


def get_parser(spec: str | ActionParser | None) -> ActionParser:
    """Resolve ``action_format=`` (a registered name or a parser object)."""
    if spec is None:
        return HermesParser()
    if isinstance(spec, str):
        try:
            return _PARSERS[spec]()
        except KeyError:
            raise ConfigError(f"unknown action_format {spec!r}; known: {sorted(_PARSERS)}") from None
    if isinstance(spec, ActionParser):
        return spec
    raise ConfigError("action_format must be a registered name or an object with a parse(text) method")
