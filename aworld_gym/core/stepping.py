"""One step's conclusion: the ending, the observation, the info, the rewards and the turn log entry.

Shared by both faces of :class:`~aworld_gym.core.env.MCPEnv` (``self`` is the env). Tool results are rendered as
the env's ``acheck_task`` left them (an env shows other text through ``ToolResult.with_text`` copies; a result is
never edited), cut by tokens when the env has ``max_tool_output_tokens``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from aworld_gym.core.actions import ParsedAction
from aworld_gym.core.episode import IMAGE_CAPTION, StepFacts, TaskState, decide_ending, turn_messages
from aworld_gym.core.prompts import FORMAT_HINT, describe_tool_change, render_tool_responses
from aworld_gym.core.rewards import EpisodeContext, Scores, StepContext
from aworld_gym.core.token_cut import cut_tokens
from aworld_gym.core.trajectory import sum_into
from aworld_gym.mcp.hub import SERVER_DIED, TIMEOUT, ToolResult

if TYPE_CHECKING:
    from aworld_gym.core.env import MCPEnv


def conclude_step(
    self: MCPEnv, parsed: ParsedAction, results: list[ToolResult], crash: str | None, score: float | None,
    state: TaskState | None,
) -> tuple[StepContext, str, dict[str, Any], list[dict[str, Any]]]:  # fmt: skip
    """Decide the ending and render the observation (the tool results are not changed); returns the step's context,
    observation, info and the chat messages the turn adds (for its turn log entry)."""
    assert self.task is not None
    if state is not None and crash is None:
        crash = state.crash
    errors = list(parsed.errors)
    infra = [r.error for r in results if r.error in (TIMEOUT, SERVER_DIED)]
    task_done = bool(state is not None and state.done and results)
    sections = step_images(results, state) if crash is None and results else []
    images = [image for _, shown in sections for image in shown]
    texts = [cut_tokens(r.text, self.tokenizer, self.max_tool_output_tokens) for r in results]
    if state is not None and state.note and texts:
        texts[-1] += "\n" + state.note
    changed = tool_change(self) if texts else None  # a server's tools/list_changed, re-listed after the calls
    if changed is not None:
        texts[-1] += "\n" + changed
    parts = ["Format error: " + "; ".join(errors) + ". " + FORMAT_HINT] if errors else []
    answered = parsed.answer is not None and crash is None  # a crash with an answer: the scorer failed
    if answered:
        parts.append("Your final answer was recorded.")
    elif crash is not None:
        errors.append(f"the tool infrastructure failed: {crash}")
        parts.append(f"Error: the tool infrastructure failed ({crash}). The episode ends here.")
    elif results:
        parts.append(render_tool_responses(texts))
        errors += [f"{r.call.name}: {r.text.removeprefix('Error: ')}" for r in results if r.is_error]
        if task_done:
            score = state.score if state is not None else None
            parts.append("The task is over.")
    elif not errors:
        errors.append("no tool call and no final answer")
        parts.append("Your message contained no tool call and no final answer. " + FORMAT_HINT)
    obs = self._bound("\n".join(parts))
    self._chars += len(parsed.text) + len(obs)
    limit = self.turn_limit
    facts = StepFacts(
        answered=answered,
        crash=crash,
        infra_error=(SERVER_DIED if SERVER_DIED in infra else TIMEOUT) if infra and self.truncate_on_infra_error
        else None,
        task_done=task_done,
        over_budget=self.max_episode_chars is not None and self._chars >= self.max_episode_chars,
        at_turn_limit=limit is not None and self.turn >= limit,
    )  # fmt: skip
    ending = decide_ending(facts)
    if not ending.terminated:
        score = None
    action_error = "; ".join(errors) or None
    ctx = StepContext(task=self.task, turn=self.turn, action=parsed.text, parsed=parsed, results=results,
                      answer=parsed.answer, score=score, action_error=action_error,
                      terminated=ending.terminated, truncated=ending.truncated,
                      truncation_reason=ending.reason)  # fmt: skip
    feedback = None
    if (parsed.answer is None or parsed.errors) and (not results or parsed.errors):
        feedback = obs if not results else obs.split("\n<tool_response>", 1)[0]
    info: dict[str, Any] = {
        "task_id": self.task.id,
        "turn": self.turn,
        "tool_calls": [c.to_dict() for c in parsed.tool_calls],
        "tool_results": [r.to_dict() for r in results],
        "action_error": action_error,
        "answer": parsed.answer,
        "score": score,
    }
    messages = turn_messages(parsed, results, texts, feedback, sections)
    self.observation_images = images
    if images:
        info["images"] = images
    if ending.truncated:
        info["truncation_reason"] = ending.reason
    if changed is not None:
        info["tools"] = self.tools
    if state is not None:
        info["task_state"] = state.info
        info.update(state.step_info)
    return ctx, obs, info, messages


def tool_change(self: MCPEnv) -> str | None:
    """When the hub's tool table changed since the env last read it (``hub.tools_version``): ``self.tools`` is read
    again (the next episode's system prompt lists the new tools) and the note for the model is returned; ``None``
    when nothing the model reads changed."""
    version = self.hub.tools_version
    if version == self._tools_version:
        return None
    old, self._tools_version = self._tools, version
    self._tools = self._system = None
    return None if old is None else describe_tool_change(old, self.tools, self.tool_format)


def step_images(results: list[ToolResult], state: TaskState | None) -> list[tuple[str, list[bytes]]]:
    """The step's images with their captions: each tool result's own (within the hub's ``tool_images`` limits),
    then the observation's (a screenshot of the page)."""
    sections = [
        (f"The image{'s' if len(r.images) > 1 else ''} returned by {r.call.name} (call {r.call.id}):",
         [image.data for image in r.images])
        for r in results if r.images
    ]  # fmt: skip
    if state is not None and state.images:
        sections.append((IMAGE_CAPTION, list(state.images)))
    return sections


def episode_context(self: MCPEnv, ctx: StepContext) -> EpisodeContext:
    """The finished episode: the whole turn log (the last turn included) and its reward so far."""
    return EpisodeContext(ctx.task, self.turns, ctx, self.episode_reward, dict(self.episode_components))


def finish_step(
    self: MCPEnv, ctx: StepContext, obs: str, info: dict[str, Any], messages: list[dict[str, Any]], steps: Scores
) -> tuple[str, float, bool, bool, dict[str, Any]]:
    """Add the step's rewards, append the turn to the log, and return the step's 5-tuple."""
    self.last_context = ctx
    now = time.perf_counter()
    info["step_time_s"] = now - self._step_started
    components = steps.components
    reward = steps.total if components else 0.0
    if components:
        sum_into(self.episode_components, components)
        self.episode_reward += reward
    info["reward_components"] = components
    if steps.metrics:
        info["metrics"] = steps.metrics
    if steps.errors:
        info["reward_errors"] = steps.errors
    self.turns.append(
        {
            "turn": self.turn,
            "action": ctx.action,
            "tool_calls": info["tool_calls"],
            "tool_results": info["tool_results"],
            "observation": obs,
            "reward": reward,
            "reward_components": dict(components),
            "action_error": ctx.action_error,
            "answer": ctx.answer,
            "step_time_s": info["step_time_s"],
            "messages": messages,
        }
    )
    self._done = ctx.terminated or ctx.truncated
    return obs, reward, ctx.terminated, ctx.truncated, info


def add_scores(
    self: MCPEnv, out: tuple[str, float, bool, bool, dict[str, Any]], scores: Scores
) -> tuple[str, float, bool, bool, dict[str, Any]]:
    """Add ``scores`` (a step's episode hooks') to the step's reward, its info and the turn log."""
    obs, reward, terminated, truncated, info = out
    components = dict(info.get("reward_components") or {})
    sum_into(components, scores.components)
    sum_into(self.episode_components, scores.components)
    reward = float(reward) + scores.total
    self.episode_reward += scores.total
    info["reward_components"] = components
    if scores.metrics:
        info["metrics"] = {**info.get("metrics", {}), **scores.metrics}
    if scores.errors:
        info["reward_errors"] = {**info.get("reward_errors", {}), **scores.errors}
    self.turns[-1]["reward"] = reward
    self.turns[-1]["reward_components"] = dict(components)
    return obs, reward, terminated, truncated, info


def render_turn(self: MCPEnv) -> str:
    """``render()``'s text: the task prompt before the first step, then the last turn."""
    if not self.turns:
        return f"[task {self.task.id if self.task else '-'}]\n{self._head[1]['content'] if self._head else ''}"
    last = self.turns[-1]
    return f"[turn {last['turn']}] action:\n{last['action']}\n--- observation:\n{last['observation']}"
