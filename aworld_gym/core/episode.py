"""One episode model: how a step ends (a pure decision over the step's facts) and the env's one turn log.

The ending's precedence, first match wins:

===================  ============  ===========  =====================
fact                 terminated    truncated    truncation_reason
===================  ============  ===========  =====================
answer submitted     yes           no           -
crash (env lost it)  no            yes          ``env_crash``
tool cache miss      no            yes          ``cache_miss`` (replay-strict: always, whatever the rules)
infrastructure error no            yes          ``env_crash`` (server died) / ``tool_timeout``
task done by itself  yes           no           -
over the budget      no            yes          ``token_budget``
at the turn limit    no            yes          ``turn_limit``
===================  ============  ===========  =====================

The turn log (``env.turns``) is kept once, by the env's running :class:`~aworld_gym.core.running.Episode`: each
turn holds the action, the tool calls and results, the observation, the reward and its components, and the chat
messages the turn added. ``env.messages`` (the OpenAI message history) is derived from it; recorders and trainer
adapters read it instead of rebuilding it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aworld_gym.base.images import data_url
from aworld_gym.core.trajectory import Termination

if TYPE_CHECKING:
    from aworld_gym.core.actions import ParsedAction
    from aworld_gym.mcp.results import ToolResult

# What an env step can truncate with (the driver adds context_limit, length, env_error, policy_error).
TRUNCATION_REASONS = (Termination.TURN_LIMIT, Termination.TOKEN_BUDGET, Termination.TOOL_TIMEOUT, Termination.ENV_CRASH,
                      Termination.CACHE_MISS)  # fmt: skip


@dataclass
class TaskState:
    """What an env whose task can end by itself (a web page's done flag) reads after a step's tool calls.

    Attributes:
        done: the task is over: the step terminates with ``score``.
        score: the task's score (its raw reward), given when ``done``.
        crash: the env lost the task's state (e.g. the browser died): the step truncates with ``env_crash``.
        note: text shown after the last tool response (e.g. the page as it is now); the tool result itself is
            not changed.
        info: reported as ``info["task_state"]``.
        images: images of the observation (a PNG screenshot of the page): the step's messages get them as image
            parts of a user message after the tool results (after the tools' own images), ``info["images"]`` holds
            the bytes.
        step_info: keys added to the step's ``info`` (e.g. the page's element boxes).
    """

    done: bool = False
    score: float | None = None
    crash: str | None = None
    note: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    images: list[bytes] = field(default_factory=list)
    step_info: dict[str, Any] = field(default_factory=dict)


IMAGE_CAPTION = "The page as it looks now:"

# A step's images with their captions: [(caption, [image bytes, ...]), ...], in the order the message shows them.
ImageSections = Sequence[tuple[str, Sequence[bytes]]]


def image_parts(sections: ImageSections) -> list[dict[str, Any]]:
    """OpenAI content parts: each section's caption as a text part, then its images as ``data:`` URLs (the MIME type
    read from the bytes: PNG, JPEG, GIF or WebP)."""
    parts: list[dict[str, Any]] = []
    for caption, images in sections:
        parts.append({"type": "text", "text": caption})
        parts += [{"type": "image_url", "image_url": {"url": data_url(image)}} for image in images]
    return parts


def image_content(text: str, images: Sequence[bytes]) -> str | list[dict[str, Any]]:
    """A message's ``content``: the text alone, or OpenAI content parts (the text, then each image as a data URL)."""
    return image_parts([(text, images)]) if images else text


def require_text(messages: list[dict[str, Any]], who: str) -> None:
    """Raise a clear error when a message holds image parts that a text-only consumer (``who``) would drop."""
    for m in messages:
        if not isinstance(m.get("content"), str | None):
            raise ValueError(
                f"{who} takes text messages, and this history holds image parts: an env in a screenshot "
                "observation mode (Browser-v0's obs_mode='screenshot': use obs_mode='text') or a tool that "
                "returned an image (MCP envs show tool images by default: pass tool_images=False to keep them "
                "text placeholders); or use a policy that sends images (OpenAIPolicy to a vision model)"
            )


@dataclass(slots=True)
class StepFacts:
    """What happened in one step, as far as the ending is concerned.

    Attributes:
        answered: the action submitted a final answer.
        crash: the env lost the task's state or its tool layer raised (its description).
        infra_error: ``"server_died"`` or ``"timeout"`` when a tool call failed for infrastructure reasons and the
            env ends episodes on those (``truncate_on_infra_error``).
        cache_miss: a tool call found no recorded result in ``replay-strict`` (or the tool cache failed).
        task_done: the task ended by itself (a web page's done flag).
        over_budget: the episode's character budget is spent.
        at_turn_limit: this was the last turn allowed.
    """

    answered: bool = False
    crash: str | None = None
    infra_error: str | None = None
    cache_miss: bool = False
    task_done: bool = False
    over_budget: bool = False
    at_turn_limit: bool = False


@dataclass(frozen=True)
class Ending:
    """How a step ends the episode (``terminated`` and ``truncated`` are never both true)."""

    terminated: bool = False
    truncated: bool = False
    reason: str | None = None

    @property
    def over(self) -> bool:
        return self.terminated or self.truncated


_GOES_ON = Ending()
_TERMINATED = Ending(terminated=True)
_TRUNCATED = {r: Ending(truncated=True, reason=r) for r in TRUNCATION_REASONS}


def decide_ending(facts: StepFacts) -> Ending:
    """The step's ending; see the module's table for the precedence."""
    if facts.answered:
        return _TERMINATED
    if facts.crash is not None:
        return _TRUNCATED[Termination.ENV_CRASH]
    if facts.cache_miss:
        return _TRUNCATED[Termination.CACHE_MISS]
    if facts.infra_error is not None:
        crashed = facts.infra_error == "server_died"
        return _TRUNCATED[Termination.ENV_CRASH if crashed else Termination.TOOL_TIMEOUT]
    if facts.task_done:
        return _TERMINATED
    if facts.over_budget:
        return _TRUNCATED[Termination.TOKEN_BUDGET]
    if facts.at_turn_limit:
        return _TRUNCATED[Termination.TURN_LIMIT]
    return _GOES_ON


def turn_messages(
    parsed: ParsedAction, results: list[ToolResult], tool_texts: list[str], feedback: str | None,
    images: ImageSections = (),
) -> list[dict[str, Any]]:  # fmt: skip
    """The chat messages one turn adds: the assistant's message (with its tool calls), one tool message per result
    (``tool_texts``: what the model is shown of each), the step's images (``images``: the tools' own, then the
    observation's) as one user message (a tool message holds text only in the OpenAI format), and the env's
    feedback as a user message (format errors, a missing tool call), if any."""
    msg: dict[str, Any] = {"role": "assistant", "content": parsed.content if results else parsed.text}
    if results:
        msg["tool_calls"] = [
            {
                "id": r.call.id,
                "type": "function",
                "function": {"name": r.call.name, "arguments": json.dumps(r.call.arguments, ensure_ascii=False)},
            }
            for r in results
        ]
    out = [msg]
    out += [
        {"role": "tool", "tool_call_id": r.call.id, "name": r.call.name, "content": text}
        for r, text in zip(results, tool_texts, strict=True)
    ]
    if images:
        out.append({"role": "user", "content": image_parts(images)})
    if feedback:
        out.append({"role": "user", "content": feedback})
    return out
