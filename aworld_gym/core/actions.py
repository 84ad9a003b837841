"""Action parsers: raw model text -> tool calls and/or a final answer.

The canonical format is Qwen3/Hermes text::

    <think>...</think>                      (optional, ignored)
    <tool_call>
    {"name": "run_python", "arguments": {"code": "print(1)"}}
    </tool_call>                            (zero or more)
    <answer>42</answer>                     (the final answer, ends the episode)

GAIA-style ``FINAL ANSWER: ...`` lines are accepted as answers too. Parsers never raise on model text:
problems are reported in :attr:`ParsedAction.errors` so the env can tell the model what was wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from aworld_gym.base.calls import ToolCall  # it lives below core and mcp; importing it from here keeps working
from aworld_gym.base.errors import ConfigError

__all__ = [
    "Action",
    "ActionParser",
    "HermesParser",
    "ParsedAction",
    "ParserFactory",
    "Sample",
    "ToolCall",
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


def parse_action(parser: ActionParser, action: Any) -> ParsedAction:
    """Parse a string or an :class:`Action` (its own tool calls win over those in its text)."""
    if not isinstance(action, Action):
        return parser.parse(action)
    parsed = parser.parse(action.text)
    if action.tool_calls is not None:
        if parsed.answer is None:
            parsed.tool_calls = list(action.tool_calls)
        elif action.tool_calls and not parsed.errors:
            parsed.errors.append("a turn holds either tool calls or a final answer, not both; the answer was taken")
    return parsed


def action_text(action: Any) -> str:
    """The text of a string or an :class:`Action`."""
    return action.text if isinstance(action, Action) else str(action)


@runtime_checkable
class ActionParser(Protocol):
    """Turns raw model text into a :class:`ParsedAction`; must never raise on any ``str``."""

    def parse(self, text: str) -> ParsedAction: ...


_THINK_RE = re.compile(r"<think>(.*?)(?:</think>|\Z)", re.DOTALL)
_TOOL_OPEN, _TOOL_CLOSE = "<tool_call>", "</tool_call>"
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_FINAL_ANSWER_RE = re.compile(r"^[ \t*#>]*FINAL ANSWER\s*:\s*(.*?)\s*$", re.MULTILINE | re.IGNORECASE)
_CODE_FENCE_RE = re.compile(r"\A```[a-zA-Z0-9_+-]*\n(.*?)\n?```\Z", re.DOTALL)


def strip_think(text: str) -> tuple[str, str | None]:
    """Remove ``<think>`` blocks (an unterminated one runs to the end); return (rest, thought)."""
    if "think>" not in text:
        return text, None  # the common case, without the regex passes
    thoughts = [m.group(1).strip() for m in _THINK_RE.finditer(text)]
    rest = _THINK_RE.sub("", text)
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
        max_calls: calls beyond this number in one turn are dropped with an error.
        allow_final_answer_line: accept GAIA's ``FINAL ANSWER: ...`` line as an answer.
    """

    def __init__(self, max_calls: int = 16, allow_final_answer_line: bool = True) -> None:
        self.max_calls = max_calls
        self.allow_final_answer_line = allow_final_answer_line

    def parse(self, text: str) -> ParsedAction:
        if not isinstance(text, str):
            return ParsedAction(text=repr(text), errors=[f"the action must be a string, got {type(text).__name__}"])
        body, thought = strip_think(text)
        action = ParsedAction(text=text, thought=thought)
        body = self._parse_tool_calls(body, action)
        action.content = body.strip()
        answers = _ANSWER_RE.findall(body) if "<answer>" in body else []
        if answers:
            action.answer = answers[0].strip()
        elif "<answer>" in body:
            action.errors.append("an <answer> tag was opened but never closed with </answer>")
        elif self.allow_final_answer_line and "final answer" in body.lower():
            finals = _FINAL_ANSWER_RE.findall(body)
            if finals:
                action.answer = finals[-1].strip().strip("*").strip()
        if action.answer is not None and action.tool_calls:
            # An answer ends the episode; calls made in the same turn would never be seen.
            action.errors.append("a turn holds either tool calls or a final answer, not both; the answer was taken")
            action.tool_calls = []
        return action

    def _parse_tool_calls(self, body: str, action: ParsedAction) -> str:
        """Extract every ``<tool_call>`` block; return the text outside them."""
        rest: list[str] = []
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
            nested = body.find(_TOOL_OPEN, inner_start)
            if end < 0:
                action.errors.append(f"tool call #{n + 1}: <tool_call> was opened but never closed with </tool_call>")
                break
            if 0 <= nested < end:
                action.errors.append(f"tool call #{n + 1}: <tool_call> tags cannot be nested")
                pos = end + len(_TOOL_CLOSE)
                n += 1
                continue
            n += 1
            payload = body[inner_start:end]
            pos = end + len(_TOOL_CLOSE)
            if len(action.tool_calls) >= self.max_calls:
                action.errors.append(
                    f"tool call #{n}: more than {self.max_calls} calls in one turn; extra calls dropped"
                )
                continue
            call, error = _decode_call(payload, index=n)
            if error:
                action.errors.append(error)
            elif call is not None:
                action.tool_calls.append(call)
        if "</tool_call>" in "".join(rest):
            action.errors.append("a </tool_call> tag appeared without a matching <tool_call>")
        return "".join(rest)


def _decode_call(payload: str, index: int) -> tuple[ToolCall | None, str | None]:
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
            return None, f'tool call #{index} ({name}): "arguments" is a string that is not a JSON object'
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return None, f'tool call #{index} ({name}): "arguments" must be a JSON object, got {type(args).__name__}'
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
