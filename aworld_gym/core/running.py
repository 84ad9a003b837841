"""The running episode as one object: what an episode owns and the steps it goes through.

:class:`Episode` holds the episode's state (the task, the turn counter, the one turn log, the chat head, the
character count, the done flag, the running step's clock, the latest observation's images, the reward ledger) and
does what a step does between the env's tool calls and its return: parse the action, conclude the step (the ending,
the observation, the info), score it and log the turn. It is given its collaborators (the parser, the
:class:`EpisodeRules`, a way to re-list changed tools, the rubric) instead of reaching into the env, so
:class:`~aworld_gym.core.env.MCPEnv` keeps the tools, the hub and the configuration, and makes one ``Episode`` per
reset.

It lives apart from :mod:`aworld_gym.core.episode`, which holds the pure parts of the episode model (the ending's
precedence table, the shapes of a turn's messages) that recorders and trainer faces import without the running
machinery.

A turn's reward has one writer, :func:`set_turn_reward`: the env's own rubric and reward-shaping wrappers reach it
through :meth:`Episode.add_scores`, the rollout driver (what the outermost env returned) directly on the logged turn.
It also adds what it changes to the episode's one reward ledger, tagged with its writer (the trajectory the driver
builds holds the same ledger, so each part of the reward is counted once).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from gymnasium.error import ResetNeeded

from aworld_gym.core.actions import ActionParser, ParsedAction, action_text, parse_action
from aworld_gym.core.episode import IMAGE_CAPTION, StepFacts, TaskState, decide_ending, image_content, turn_messages
from aworld_gym.core.prompts import FORMAT_HINT, render_tool_responses
from aworld_gym.core.rewards import EpisodeContext, Rubric, Scores, StepContext
from aworld_gym.core.task import Task
from aworld_gym.core.token_cut import cut_tokens
from aworld_gym.core.trajectory import RewardLedger, Source, sum_into
from aworld_gym.mcp.results import CACHE_MISS, SERVER_DIED, TIMEOUT, ToolResult, truncate

StepOut = tuple[str, float, bool, bool, dict[str, Any]]
# Re-lists the tools after a server said they changed: (the note for the model, the new schemas), or None.
Relist = Callable[[], tuple[str, list[dict[str, Any]]] | None]
Runner = Callable[[Awaitable[Any]], Any]


@dataclass(frozen=True)
class EpisodeRules:
    """What bounds and ends an episode, fixed at reset.

    Attributes:
        turn_limit: the last turn allowed (``None``: no limit): that turn truncates with ``turn_limit``.
        max_chars: the character budget over all actions and observations (``token_budget``).
        truncate_on_infra_error: a tool timeout or a dead server ends the episode (``tool_timeout`` / ``env_crash``).
        max_observation_chars: an observation is cut to this length.
        tokenizer: what cuts each tool result shown to the model at ``max_tool_output_tokens`` (``None``: no cut).
        max_tool_output_tokens: see ``tokenizer``.
        strict: a parser that raises is re-raised instead of becoming a format error.
    """

    turn_limit: int | None = None
    max_chars: int | None = None
    truncate_on_infra_error: bool = True
    max_observation_chars: int = 1_000_000
    tokenizer: Any = None
    max_tool_output_tokens: int | None = None
    strict: bool = False

    def bound(self, text: str) -> str:
        """``text`` cut to what an observation may hold (with a note)."""
        limit = self.max_observation_chars
        return text if len(text) <= limit else truncate(text, limit - 100)[0]


class Concluded(NamedTuple):
    """A concluded step before its rewards: its context, observation, info and the chat messages it adds."""

    ctx: StepContext
    obs: str
    info: dict[str, Any]
    messages: list[dict[str, Any]]


class Episode:
    """One running episode of an MCP text env.

    Args:
        task: the episode's task.
        prompt: the first observation (already bounded).
        system: the system prompt.
        images: images shown with the first observation.
        parser: turns an action into a :class:`~aworld_gym.core.actions.ParsedAction`.
        rules: the episode's limits and policies.
        relist: called after a step's tool calls; re-lists the tools when a server changed them.

    Attributes:
        task, turn, turns: the task, the number of turns taken, the turn log (one dict per turn).
        head: the chat messages before the first turn (system prompt, task).
        chars: characters of the actions and observations so far.
        done: the episode ended (a step raises ``ResetNeeded``).
        images: images of the latest observation.
        ledger: the episode's one reward ledger: every writer's part, tagged by source (the env's rubric, its
            reward-shaping wrappers; the rollout driver's trajectory holds the same object and adds the rest).
        last_context: the latest step's :class:`~aworld_gym.core.rewards.StepContext`.
        step_started: ``perf_counter()`` when the running step started.
    """

    def __init__(
        self,
        task: Task,
        prompt: str,
        system: str,
        images: Sequence[bytes],
        *,
        parser: ActionParser,
        rules: EpisodeRules,
        relist: Relist,
    ) -> None:
        self.task = task
        self.parser = parser
        self.rules = rules
        self.relist = relist
        self.turn = 0
        self.turns: list[dict[str, Any]] = []
        self.images: list[bytes] = list(images)
        self.head: list[dict[str, Any]] = [{"role": "system", "content": system},
                                           {"role": "user", "content": image_content(prompt, self.images)}]  # fmt: skip
        self.chars = len(prompt)
        self.done = False
        self.ledger = RewardLedger()
        self.last_context: StepContext | None = None
        self.step_started = 0.0

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The OpenAI-format message history, derived from the turn log."""
        return [*self.head, *(m for t in self.turns for m in t["messages"])]

    # ----- a step, in the order it runs ------------------------------------------------------------------
    def parse(self, action: Any) -> ParsedAction:
        """Start a turn: count it, start its clock, and parse ``action`` (a parser failure is a format error unless
        the rules are ``strict``). Raises ``ResetNeeded`` when the episode is over."""
        if self.done:
            raise ResetNeeded("call reset() before step(): the episode has not started or is over")
        self.turn += 1
        self.step_started = time.perf_counter()
        try:
            return parse_action(self.parser, action)  # a string, or an Action (its own tool calls win)
        except Exception as exc:
            if self.rules.strict:
                raise
            return ParsedAction(text=action_text(action), errors=[f"the action parser failed: {repr(exc)[:300]}"])

    def conclude(
        self, parsed: ParsedAction, results: list[ToolResult], crash: str | None, score: float | None,
        state: TaskState | None,
    ) -> Concluded:  # fmt: skip
        """Decide the ending and render the observation. Tool results are rendered as the env's ``acheck_task``
        left them (an env shows other text through ``ToolResult.with_text`` copies; a result is never edited), cut
        by tokens under the rules' ``max_tool_output_tokens``."""
        rules = self.rules
        if state is not None and crash is None:
            crash = state.crash
        errors = list(parsed.errors)
        infra = [r.error for r in results if r.error in (TIMEOUT, SERVER_DIED)]
        task_done = bool(state is not None and state.done and results)
        sections = step_images(results, state) if crash is None and results else []
        images = [image for _, shown in sections for image in shown]
        texts = [cut_tokens(r.text, rules.tokenizer, rules.max_tool_output_tokens) for r in results]
        if state is not None and state.note and texts:
            texts[-1] += "\n" + state.note
        changed = self.relist() if texts else None  # a server's tools/list_changed, re-listed after the calls
        if changed is not None:
            texts[-1] += "\n" + changed[0]
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
        obs = rules.bound("\n".join(parts))
        self.chars += len(parsed.text) + len(obs)
        facts = StepFacts(
            answered=answered,
            crash=crash,
            infra_error=(SERVER_DIED if SERVER_DIED in infra else TIMEOUT) if infra and rules.truncate_on_infra_error
            else None,
            cache_miss=any(r.error == CACHE_MISS for r in results),
            task_done=task_done,
            over_budget=rules.max_chars is not None and self.chars >= rules.max_chars,
            at_turn_limit=rules.turn_limit is not None and self.turn >= rules.turn_limit,
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
        self.images = images
        if images:
            info["images"] = images
        if ending.truncated:
            info["truncation_reason"] = ending.reason
        if parsed.errors:  # the turn's text failed to parse (parse health, on faces that see only infos)
            info["parse_errors"] = list(parsed.errors)
        if changed is not None:
            info["tools"] = changed[1]
        if state is not None:
            info["task_state"] = state.info
            info.update(state.step_info)
        return Concluded(ctx, obs, info, messages)

    def finish(self, step: Concluded, rubric: Rubric, run: Runner) -> StepOut:
        """Score the concluded step with ``rubric`` (sync hooks; ``run`` runs async ones), its episode hooks when it
        ends the episode, log the turn, and return the step's 5-tuple."""
        out = self._log(step, rubric.score(rubric.step, step.ctx, run))
        if self.done and rubric.episode:
            out = self.add_scores(out, rubric.score(rubric.episode, self.context(step.ctx), run))
        return out

    async def afinish(self, step: Concluded, rubric: Rubric) -> StepOut:
        """Async :meth:`finish` (async hooks are awaited)."""
        out = self._log(step, await rubric.ascore(rubric.step, step.ctx))
        if self.done and rubric.episode:
            out = self.add_scores(out, await rubric.ascore(rubric.episode, self.context(step.ctx)))
        return out

    # ----- the reward --------------------------------------------------------------------------------------
    def context(self, ctx: StepContext) -> EpisodeContext:
        """The episode as the env's rubric scored it so far: the whole turn log (the last turn included) and the
        env's own reward."""
        own = self.ledger.share(Source.ENV)
        return EpisodeContext(ctx.task, self.turns, ctx, own.total, dict(own.components))

    def outer_context(self, ctx: StepContext) -> EpisodeContext:
        """The episode as the outermost env returned it so far: the whole ledger (wrappers' shaping included)."""
        return EpisodeContext(ctx.task, self.turns, ctx, self.ledger.total, dict(self.ledger.components))

    def add_scores(self, out: StepOut, scores: Scores, *, replace: bool = False, own: bool = True) -> StepOut:
        """Add ``scores`` to the step's reward, its info and the logged turn (``replace``: they replace the
        components so far, and the reward is their sum). ``own``: the env's rubric scored them (:attr:`Source.ENV` in the
        ledger); else a wrapper's shaping (:attr:`Source.SHAPING`)."""
        obs, reward, terminated, truncated, info = out
        components = {} if replace else dict(info.get("reward_components") or {})
        sum_into(components, scores.components)
        total = float(sum(components.values())) if replace else float(reward) + scores.total
        info = {**info, "reward_components": components}
        if scores.metrics:
            info["metrics"] = {**info.get("metrics", {}), **scores.metrics}
        if scores.errors:
            info["reward_errors"] = {**info.get("reward_errors", {}), **scores.errors}
        self.ledger.add_metrics(scores.metrics, scores.errors)
        self.set_turn_reward(total, components, Source.ENV if own else Source.SHAPING)
        return obs, total, terminated, truncated, info

    def set_turn_reward(self, reward: float, components: Mapping[str, float], source: str) -> None:
        """The latest turn's reward is ``reward`` with ``components``, written by ``source`` (see
        :func:`set_turn_reward`)."""
        if self.turns:
            set_turn_reward(self.turns[-1], reward, components, self.ledger, source)

    def _log(self, step: Concluded, scores: Scores) -> StepOut:
        """Append the turn to the log with its step rewards, end the episode if the step did, return the 5-tuple."""
        ctx, obs, info, messages = step
        self.last_context = ctx
        info["step_time_s"] = time.perf_counter() - self.step_started
        components = scores.components
        reward = scores.total if components else 0.0
        self.ledger.add_metrics(scores.metrics, scores.errors)
        info["reward_components"] = components
        if scores.metrics:
            info["metrics"] = scores.metrics
        if scores.errors:
            info["reward_errors"] = scores.errors
        self.turns.append({"turn": self.turn, "action": ctx.action, "tool_calls": info["tool_calls"],
                           "tool_results": info["tool_results"], "observation": obs, "reward": 0.0,
                           "reward_components": {}, "action_error": ctx.action_error, "answer": ctx.answer,
                           "step_time_s": info["step_time_s"], "messages": messages})  # fmt: skip
        self.set_turn_reward(reward, components, Source.ENV)
        self.done = ctx.terminated or ctx.truncated
        return obs, reward, ctx.terminated, ctx.truncated, info

    def render(self) -> str:
        """``render()``'s text: the task prompt before the first step, then the last turn."""
        if not self.turns:
            return f"[task {self.task.id}]\n{self.head[1]['content']}"
        last = self.turns[-1]
        return f"[turn {last['turn']}] action:\n{last['action']}\n--- observation:\n{last['observation']}"


def set_turn_reward(
    turn: MutableMapping[str, Any], reward: float, components: Mapping[str, float], ledger: RewardLedger, source: str
) -> None:
    """The one writer of a logged turn's reward: ``turn`` (an entry of a turn log) gets ``reward`` with
    ``components``, and the episode's ``ledger`` what that changed, as ``source``'s part. The env's rubric,
    reward-shaping wrappers (through :meth:`Episode.add_scores`) and the rollout driver (what the outermost env
    returned, a Gymnasium reward wrapper's transform included) all write here, so each part is counted once."""
    before = turn.get("reward_components") or {}
    ledger.change(before, components, float(reward) - float(turn.get("reward") or 0.0), source=source)
    turn["reward"] = float(reward)
    turn["reward_components"] = dict(components)


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
