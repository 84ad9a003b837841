"""MCPEnv: any set of MCP tool servers plus a task source as a text-action Gymnasium environment."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
from gymnasium.error import ResetNeeded

from aworld_gym.core.actions import ActionParser, ParsedAction, get_parser
from aworld_gym.core.errors import ConfigError
from aworld_gym.core.prompts import FORMAT_HINT, render_system_prompt, render_tool_responses
from aworld_gym.core.rewards import RewardHook, Scorer, StepContext, apply_hooks, default_hooks, get_scorer
from aworld_gym.core.spaces import UnicodeText
from aworld_gym.core.task import Task, TaskSource, TaskSpec, load_tasks
from aworld_gym.mcp.hub import SERVER_DIED, TIMEOUT, ToolHub, ToolResult, truncate

TRUNCATION_REASONS = ("turn_limit", "token_budget", "tool_timeout", "env_crash")


@dataclass
class TaskState:
    """What an env whose task can end by itself (a web page's done flag) reads after a step's tool calls.

    Attributes:
        done: the task is over: the step terminates with ``score``.
        score: the task's score (its raw reward), given when ``done``.
        crash: the env lost the task's state (e.g. the browser died): the step truncates with ``env_crash``.
        note: text appended to the last tool response (e.g. the page as it is now).
        info: reported as ``info["task_state"]``.
    """

    done: bool = False
    score: float | None = None
    crash: str | None = None
    note: str = ""
    info: dict[str, Any] = field(default_factory=dict)


class MCPEnv(gym.Env[str, str]):
    """A text-action environment over MCP tool servers.

    Args:
        mcp_config: AWorld-style ``{"mcpServers": {...}}`` (dict, JSON text or path).
        tasks: a .jsonl/.json path, a list of dicts or :class:`Task`, or a ``datasets.Dataset``.
        servers: in-process MCP server objects by name.
        scorer: ``"exact"``, ``"contains"``, another registered name, or ``(answer, task) -> float``.
        action_format: a registered parser name (``"hermes"``) or an :class:`ActionParser`.
        system_prompt: the preamble of the system prompt (the tool list is appended).
        allow_tools, deny_tools: glob patterns of tools the agent may / may not use.
        tool_timeout: default per-call timeout in seconds (a server's own ``timeout`` wins).
        max_turns: turn limit inside the env (``gym.make``'s ``max_episode_steps`` applies too).
        max_episode_chars: character budget over all actions and observations (truncates: ``token_budget``).
        max_tool_output_chars: tool output beyond this is cut, with a note.
        max_observation_chars: bound of the observation space.
        reward_hooks: hooks replacing the defaults (task score, format and tool-error penalties).
        truncate_on_infra_error: end the episode (``tool_timeout`` / ``env_crash``) when a tool times out or its
            server dies; otherwise the model sees the error and goes on.
        render_mode: ``"ansi"`` (``render()`` returns the last turn) or ``"human"`` (prints it).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human"], "render_fps": 0}

    def __init__(
        self,
        mcp_config: Mapping[str, Any] | str | Path | None = None,
        tasks: TaskSpec | None = None,
        *,
        servers: Mapping[str, Any] | None = None,
        scorer: str | Scorer | None = "exact",
        action_format: str | ActionParser | None = None,
        system_prompt: str | None = None,
        allow_tools: Iterable[str] | None = None,
        deny_tools: Iterable[str] | None = None,
        tool_timeout: float = 60.0,
        max_turns: int | None = None,
        max_episode_chars: int | None = None,
        max_tool_output_chars: int = 20_000,
        max_argument_chars: int = 200_000,
        max_observation_chars: int = 1_000_000,
        reward_hooks: Sequence[RewardHook] | None = None,
        truncate_on_infra_error: bool = True,
        render_mode: str | None = None,
    ) -> None:
        if tasks is None:
            raise ConfigError("MCPEnv needs tasks=: a .jsonl path, a list of dicts, or a datasets.Dataset")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        if max_turns is not None and max_turns < 1:
            raise ConfigError("max_turns must be at least 1")
        self.tasks: TaskSource = load_tasks(tasks)
        self.scorer = get_scorer(scorer)
        self.parser = get_parser(action_format)
        self.hub = ToolHub(
            mcp_config,
            servers=servers,
            allow=allow_tools,
            deny=deny_tools,
            call_timeout=tool_timeout,
            max_output_chars=max_tool_output_chars,
            max_argument_chars=max_argument_chars,
        )
        self.preamble = system_prompt
        self.max_turns = max_turns
        self.max_episode_chars = max_episode_chars
        self.reward_hooks: list[RewardHook] = list(reward_hooks) if reward_hooks is not None else default_hooks()
        self.truncate_on_infra_error = truncate_on_infra_error
        self.render_mode = render_mode
        self.observation_space = UnicodeText(max_observation_chars)
        self.action_space = UnicodeText(max_observation_chars)
        self.messages: list[dict[str, Any]] = []
        self.turns: list[dict[str, Any]] = []
        self.task: Task | None = None
        self.turn = 0
        self._chars = 0
        self._done = True
        self._closed = False
        self._tools: list[dict[str, Any]] | None = None
        self.last_context: StepContext | None = None

    # ----- Gymnasium API ---------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        task = self._pick_task(options or {})
        self.prepare_episode(task)
        self.hub.begin_episode(files=self.task_files(task))
        if self._overrides("abegin_task"):
            self.hub.run_sync(self.abegin_task(task))
        return self._start_episode(task)

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        parsed, calls_needed = self._before_step(action)
        results: list[ToolResult] = []
        crash: str | None = None
        state: TaskState | None = None
        if calls_needed:
            try:
                results = self.hub.call(parsed.tool_calls)
                if self._overrides("acheck_task"):
                    state = self.hub.run_sync(self._acheck(results))
            except Exception as exc:  # noqa: BLE001 - failures here become data, not crashes
                crash = f"{type(exc).__name__}: {exc}"
        score = self._score_answer(parsed)
        return self._after_step(parsed, results, crash, score, state)

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Async :meth:`reset` for collectors running many envs on one event loop."""
        super().reset(seed=seed)
        task = self._pick_task(options or {})
        await asyncio.to_thread(self.prepare_episode, task)
        await self.hub.abegin_episode(files=self.task_files(task))
        await self.abegin_task(task)
        return self._start_episode(task)

    async def astep(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        """Async :meth:`step` (scoring, which may run tests, happens in a worker thread)."""
        parsed, calls_needed = self._before_step(action)
        results: list[ToolResult] = []
        crash: str | None = None
        state: TaskState | None = None
        if calls_needed:
            try:
                results = await self.hub.acall(parsed.tool_calls)
                state = await self._acheck(results)
            except Exception as exc:  # noqa: BLE001 - failures here become data, not crashes
                crash = f"{type(exc).__name__}: {exc}"
        score = await asyncio.to_thread(self._score_answer, parsed) if parsed.answer is not None else None
        return self._after_step(parsed, results, crash, score, state)

    async def aclose(self) -> None:
        """Async :meth:`close`."""
        if self._closed:
            return
        self._closed = True
        await self.hub.aclose()
        self.release()

    def render(self) -> str | None:
        if self.render_mode is None:
            return None
        text = self._render_text()
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        """Close every MCP session and server process. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            self.hub.close()
        finally:
            self.release()
        super().close()

    # ----- hooks for concrete environments ---------------------------------------------------------------
    def prepare_episode(self, task: Task) -> None:
        """Called before each episode's servers are told about it (e.g. restart a shared server that died)."""

    def release(self) -> None:
        """Called once when the env closes, after its sessions are closed (release shared resources)."""

    async def abegin_task(self, task: Task) -> None:
        """Called at reset after the servers know about the new episode (e.g. open the task's web page).

        Runs on the hub's event loop; use ``await self.hub.acall_internal(...)`` for the env's own tool calls.
        """

    async def acheck_task(self, task: Task, results: list[ToolResult]) -> TaskState | None:
        """Called after each step's tool calls: an env whose task ends by itself returns its :class:`TaskState`."""
        return None

    def task_files(self, task: Task) -> Sequence[str]:
        """Attachment paths handed to the tool servers (in each call's ``_meta``)."""
        return task.files

    def render_prompt(self, task: Task) -> str:
        """The first observation: the task prompt (concrete envs add attachments, instructions...)."""
        return task.prompt

    def score(self, answer: str, task: Task) -> float | None:
        """The task score of a submitted answer; ``None`` when no reference answer is known."""
        if task.answer is None:
            return None
        return float(self.scorer(answer, task))

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The agent's tools as OpenAI schemas (connects to the servers on first use)."""
        if self._tools is None:
            self.hub.start()
            self._tools = self.hub.tool_schemas()
        return self._tools

    @property
    def system_prompt(self) -> str:
        return render_system_prompt(self.tools, self.preamble)

    # ----- internals -------------------------------------------------------------------------------------
    def _overrides(self, hook: str) -> bool:
        """Whether a subclass implements ``hook`` (the sync face then runs it on the hub's loop)."""
        return getattr(type(self), hook) is not getattr(MCPEnv, hook)

    async def _acheck(self, results: list[ToolResult]) -> TaskState | None:
        assert self.task is not None
        return await self.acheck_task(self.task, results)

    def _pick_task(self, options: Mapping[str, Any]) -> Task:
        if self._closed:
            raise ResetNeeded("this environment is closed; create a new one")
        if "task" in options:
            t = options["task"]
            return t if isinstance(t, Task) else Task.from_dict(t)
        if "task_id" in options:
            return self.tasks.get(str(options["task_id"]))
        if "task_index" in options:
            i = int(options["task_index"])
            if not 0 <= i < len(self.tasks):
                raise ConfigError(f"task_index {i} is out of range: there are {len(self.tasks)} tasks")
            return self.tasks[i]
        return self.tasks[int(self.np_random.integers(len(self.tasks)))]

    def _start_episode(self, task: Task) -> tuple[str, dict[str, Any]]:
        self.task = task
        self.turn = 0
        self._done = False
        obs = self._bound(self.render_prompt(task))
        self._chars = len(obs)
        system = self.system_prompt
        self.messages = [{"role": "system", "content": system}, {"role": "user", "content": obs}]
        self.turns = []
        info = {
            "task_id": task.id,
            "tools": self.tools,
            "system_prompt": system,
            "files": list(self.task_files(task)),
            "turn": 0,
        }
        return obs, info

    def _before_step(self, action: Any) -> tuple[ParsedAction, bool]:
        if self.task is None or self._done:
            raise ResetNeeded("call reset() before step(): the episode has not started or is over")
        self.turn += 1
        self._step_started = time.perf_counter()
        try:
            parsed = self.parser.parse(action)
        except Exception as exc:  # noqa: BLE001 - failures here become data, not crashes
            parsed = ParsedAction(text=str(action), errors=[f"the action parser failed: {type(exc).__name__}: {exc}"])
        return parsed, bool(parsed.tool_calls) and parsed.answer is None

    def _score_answer(self, parsed: ParsedAction) -> float | None:
        if parsed.answer is None:
            return None
        assert self.task is not None
        return self.score(parsed.answer, self.task)

    def _after_step(
        self,
        parsed: ParsedAction,
        results: list[ToolResult],
        crash: str | None,
        score: float | None,
        state: TaskState | None = None,
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        task = self.task
        assert task is not None
        if state is not None and crash is None:
            crash = state.crash
            if state.note and results:
                results[-1].text += "\n" + state.note
        errors = list(parsed.errors)
        terminated = truncated = False
        reason: str | None = None
        parts: list[str] = []
        if errors:
            parts.append("Format error: " + "; ".join(errors) + ". " + FORMAT_HINT)
        if parsed.answer is not None:
            terminated = True
            parts.append("Your final answer was recorded.")
        elif crash is not None:
            truncated, reason = True, "env_crash"
            errors.append(f"the tool infrastructure failed: {crash}")
            parts.append(f"Error: the tool infrastructure failed ({crash}). The episode ends here.")
        elif results:
            parts.append(render_tool_responses([r.text for r in results]))
            errors += [f"{r.call.name}: {r.text.removeprefix('Error: ')}" for r in results if r.is_error]
            infra = [r.error for r in results if r.error in (TIMEOUT, SERVER_DIED)]
            if infra and self.truncate_on_infra_error:
                truncated = True
                reason = "env_crash" if SERVER_DIED in infra else "tool_timeout"
            if state is not None and state.done:  # the task ended itself: its outcome wins over a slow tool
                terminated, truncated, reason, score = True, False, None, state.score
                parts.append("The task is over.")
        elif not errors:
            errors.append("no tool call and no final answer")
            parts.append("Your message contained no tool call and no final answer. " + FORMAT_HINT)
        obs = self._bound("\n".join(parts))
        self._chars += len(parsed.text) + len(obs)
        if not (terminated or truncated):
            limit = self._turn_limit()
            if self.max_episode_chars is not None and self._chars >= self.max_episode_chars:
                truncated, reason = True, "token_budget"
            elif limit is not None and self.turn >= limit:
                truncated, reason = True, "turn_limit"
        action_error = "; ".join(errors) or None
        ctx = StepContext(
            task=task,
            turn=self.turn,
            action=parsed.text,
            parsed=parsed,
            results=results,
            answer=parsed.answer,
            score=score,
            action_error=action_error,
            terminated=terminated,
            truncated=truncated,
            truncation_reason=reason,
        )
        self.last_context = ctx
        components = apply_hooks(self.reward_hooks, ctx)
        reward = float(sum(components.values()))
        self._record(parsed, results, obs)
        info: dict[str, Any] = {
            "task_id": task.id,
            "turn": self.turn,
            "tool_calls": [c.to_dict() for c in parsed.tool_calls],
            "tool_results": [r.to_dict() for r in results],
            "action_error": action_error,
            "answer": parsed.answer,
            "score": score,
            "reward_components": components,
            "step_time_s": time.perf_counter() - self._step_started,
        }
        if truncated:
            info["truncation_reason"] = reason
        if state is not None:
            info["task_state"] = state.info
        self.turns.append(
            {
                "turn": self.turn,
                "action": parsed.text,
                "tool_calls": info["tool_calls"],
                "tool_results": info["tool_results"],
                "observation": obs,
                "reward": reward,
                "reward_components": components,
                "action_error": action_error,
                "step_time_s": info["step_time_s"],
            }
        )
        self._done = terminated or truncated
        return obs, reward, terminated, truncated, info

    def _record(self, parsed: ParsedAction, results: list[ToolResult], obs: str) -> None:
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
        self.messages.append(msg)
        for r in results:
            self.messages.append({"role": "tool", "tool_call_id": r.call.id, "name": r.call.name, "content": r.text})
        if parsed.answer is not None and not parsed.errors:
            return  # the episode is over: nothing more is said to the model
        if not results or parsed.errors:
            feedback = obs if not results else obs.split("\n<tool_response>", 1)[0]
            self.messages.append({"role": "user", "content": feedback})

    def _turn_limit(self) -> int | None:
        """``max_turns``, else the id's registered ``max_episode_steps`` (the env labels those truncations itself;
        a shorter ``max_episode_steps`` given to ``gym.make`` truncates through Gymnasium's ``TimeLimit``)."""
        if self.max_turns is not None:
            return self.max_turns
        spec = getattr(self, "spec", None)
        if spec is None:
            return None
        try:
            return gym.spec(spec.id).max_episode_steps
        except gym.error.Error:
            return spec.max_episode_steps

    def _bound(self, text: str) -> str:
        limit = self.observation_space.max_length
        if len(text) <= limit:
            return text
        return truncate(text, limit - 100)[0]

    def _render_text(self) -> str:
        if not self.turns:
            return (
                f"[task {self.task.id if self.task else '-'}]\n{self.messages[1]['content'] if self.messages else ''}"
            )
        last = self.turns[-1]
        return f"[turn {last['turn']}] action:\n{last['action']}\n--- observation:\n{last['observation']}"
