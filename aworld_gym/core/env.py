"""MCPEnv: any set of MCP tool servers plus a task source as a text-action Gymnasium environment.

The seam for new environments is public: tools (``mcp_config``, in-process ``servers``, or plain Python functions
through ``tools=``), a task source, the task hooks below, and reward hooks. In the order they run:

reset: :meth:`prepare_episode`, the servers learn of the episode, :meth:`abegin_task`, :meth:`render_prompt`,
:meth:`reset_info`; step: parse, tool calls, :meth:`acheck_task`, :meth:`score`, the ending
(:func:`~aworld_gym.core.episode.decide_ending`), step reward hooks, episode hooks on the last step. Both faces
(``reset``/``step``/``close`` and ``areset``/``astep``/``aclose``) run the same code.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
from gymnasium.error import ResetNeeded

from aworld_gym.base.errors import ConfigError
from aworld_gym.core.actions import ParsedAction, get_parser
from aworld_gym.core.episode import TRUNCATION_REASONS, TaskState
from aworld_gym.core.prompts import describe_tool_change, render_system_prompt
from aworld_gym.core.resources import Holdings, HoldsResources
from aworld_gym.core.rewards import Rubric, StepContext, default_hooks
from aworld_gym.core.running import Episode, EpisodeRules
from aworld_gym.core.scoring import contains_match, exact_match, get_scorer, require_answers
from aworld_gym.core.settings import FLAT, GROUPS, Limits, Rendering, Rewards, Settings, unknown_keyword
from aworld_gym.core.spaces import UnicodeText
from aworld_gym.core.task import Task, TaskSource, TaskSpec, load_tasks, pick_task, task_meta
from aworld_gym.core.token_cut import load_tokenizer
from aworld_gym.core.trajectory import RewardLedger, Source
from aworld_gym.mcp.cache import cache_settings
from aworld_gym.mcp.hub import ToolHub
from aworld_gym.mcp.options import ToolOptions
from aworld_gym.mcp.results import ToolResult

__all__ = ["TRUNCATION_REASONS", "MCPEnv", "TaskState"]


class MCPEnv(HoldsResources, gym.Env[str, str]):
    """A text-action environment over MCP tool servers.

    Settings come in four typed groups (:mod:`aworld_gym.core.settings`), or as the flat keywords ``gym.make``
    passes (``max_turns=3``, ``tool_timeout=5``...), mapped onto the groups in one table (``settings.FLAT``);
    setting one field both ways is a :class:`ConfigError`, as is an unknown keyword.

    Args:
        mcp_config: AWorld-style ``{"mcpServers": {...}}`` (dict, JSON text or path); a value may be a
            :class:`~aworld_gym.core.resources.LocalServer` (a shared local server the env holds).
        tasks: a .jsonl/.json path, a list of dicts or :class:`Task`, or a ``datasets.Dataset``.
        servers: in-process MCP server objects (or zero-argument factories) by name.
        tools: plain typed Python functions, served as the in-process MCP server ``tools``.
        limits: turn and size limits, infrastructure failures: :class:`~aworld_gym.core.settings.Limits`.
        tool_options: what tool calls may do and how they run: :class:`~aworld_gym.mcp.options.ToolOptions`.
        rewards: the scorer, reward hooks, ``strict``: :class:`~aworld_gym.core.settings.Rewards`.
        rendering: the parser, system prompt and tool list format: :class:`~aworld_gym.core.settings.Rendering`.
        settings: all four groups at once (:class:`~aworld_gym.core.settings.Settings`, what a subclass env passes
            after adding its own defaults); then no group or flat keyword may be given too.
        render_mode: ``"ansi"`` (``render()`` returns the last turn) or ``"human"`` (prints it).
        **keywords: the flat form of the settings (``max_turns``, ``tool_timeout``, ``allow_tools``, ``scorer``,
            ``system_prompt``...: each documented on its group's field).
    """

    # render_fps: Gymnasium's checker and its PassiveEnvChecker require > 0 for any render mode; a text turn has
    # no frame rate, so 1 (what "human" mode would print per second if a viewer paced it).
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human"], "render_fps": 1}
    # Whether observations carry images (``observation_images``, ``info["images"]``): the rollout runner then keeps
    # the model's images as files. Set by envs with screenshot observations (Browser-v0's obs_mode).
    image_observations: bool = False

    def __init__(
        self,
        mcp_config: Mapping[str, Any] | str | Path | None = None,
        tasks: TaskSpec | None = None,
        *,
        servers: Mapping[str, Any] | None = None,
        tools: Sequence[Callable[..., Any]] | None = None,
        limits: Limits | None = None,
        tool_options: ToolOptions | None = None,
        rewards: Rewards | None = None,
        rendering: Rendering | None = None,
        settings: Settings | None = None,
        render_mode: str | None = None,
        **keywords: Any,
    ) -> None:
        self._holdings: Holdings = getattr(self, "_holdings", None) or Holdings()
        self._closed = False
        where = type(self).__name__
        try:
            groups = {"limits": limits, "tool_options": tool_options, "rewards": rewards, "rendering": rendering}
            keywords.update((name, obj) for name, obj in groups.items() if obj is not None)
            taken = Settings.take(where, keywords)
            if keywords:
                raise unknown_keyword(self._who(), next(iter(keywords)), self._keyword_names())
            if settings is None:
                settings = taken
            elif taken.given or any(obj is not None for obj in groups.values()):
                raise ConfigError(f"{where}: settings= holds every group; give it alone, not with groups or keywords")
            if tasks is None:
                raise ConfigError("MCPEnv needs tasks=: a .jsonl path, a list of dicts, or a datasets.Dataset")
            if render_mode is not None and render_mode not in self.metadata["render_modes"]:
                raise ConfigError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
            self.settings = settings
            self.tokenizer = load_tokenizer(settings.limits.tokenizer)
            self.tasks: TaskSource = load_tasks(tasks)
            self.scorer = get_scorer(settings.rewards.scorer)
            require_answers(self.tasks, self.scorer if type(self).score is MCPEnv.score else None)
            self.parser = get_parser(settings.rendering.action_format)
            servers = dict(servers or {})
            if tools:
                from aworld_gym.mcp.functions import function_server

                if "tools" in servers:
                    raise ConfigError("tools= makes the in-process server 'tools': rename your server of that name")
                servers["tools"] = function_server(list(tools))
            cache = cache_settings(settings.tool_options.cache)
            self.hub = ToolHub(
                self._holdings.resolve(mcp_config, replayed=cache is not None and cache.mode == "replay-strict"),
                servers=servers,
                options=settings.tool_options,
                work_folders=self.work_folders(),
                where=where,
            )
            hooks = settings.rewards.hooks
            self.rubric = Rubric(list(hooks) if hooks is not None else default_hooks(), strict=settings.rewards.strict)
            self.observation_space = UnicodeText(settings.limits.max_observation_chars)
            self.action_space = UnicodeText(settings.limits.max_observation_chars)
        except BaseException:
            self._failed_init()
            raise
        self.render_mode = render_mode
        self.episode: Episode | None = None  # the running (or last) episode: made at each reset
        self._pending_limit: int | None = None  # what the async face (or a TurnLimit) said this reset
        self.turn_limit: int | None = self.max_turns  # the smallest of max_turns and the TimeLimits' (limit_turns)
        self._tools: list[dict[str, Any]] | None = None
        self._tools_version = 0  # the hub's tools_version that ``_tools`` was read at (:meth:`_tool_change`)
        self._system: str | None = None

    # ----- the settings, read-only (change them by making a new env) ---------------------------------------
    limits = property(attrgetter("settings.limits"), doc="Turn and size limits (:class:`Limits`).")
    tool_options = property(attrgetter("settings.tool_options"), doc="The hub's options (:class:`ToolOptions`).")
    rewards = property(attrgetter("settings.rewards"), doc="Scorer, reward hooks, strict (:class:`Rewards`).")
    rendering = property(attrgetter("settings.rendering"), doc="Parser, system prompt, tool list (:class:`Rendering`).")
    # The fields read most, under the names they had before the groups (``env.max_turns``, ``env.strict``...).
    max_turns = property(attrgetter("settings.limits.max_turns"))
    max_episode_chars = property(attrgetter("settings.limits.max_episode_chars"))
    max_tool_output_tokens = property(attrgetter("settings.limits.max_tool_output_tokens"))
    truncate_on_infra_error = property(attrgetter("settings.limits.truncate_on_infra_error"))
    strict = property(attrgetter("settings.rewards.strict"))
    preamble = property(attrgetter("settings.rendering.system_prompt"))
    tool_format = property(attrgetter("settings.rendering.tool_format"))

    @classmethod
    def _who(cls) -> str:
        """This class as an error names it: with the ids registered for it (``AWorld/Code-v0 (CodeEnv)``; several:
        ``MCPEnv (registered as AWorld/MCP-v0, Lab/Mine-v0)``), found through Gymnasium's public registry, so that an
        error raised inside ``gym.make`` names the id it was made as (Gymnasium tells the env its id only after
        ``__init__``)."""
        target = f"{cls.__module__}:{cls.__qualname__}"
        ids = [s.id for s in gym.registry.values() if s.entry_point in (target, cls)]
        if len(ids) == 1:
            return f"{ids[0]} ({cls.__name__})"
        return f"{cls.__name__} (registered as {', '.join(ids)})" if ids else cls.__name__

    @classmethod
    def _keyword_names(cls) -> list[str]:
        """Every keyword this class takes (its own, MCPEnv's, the settings'), for an unknown one's suggestion."""
        names = [*FLAT, *GROUPS]
        for klass in {cls, MCPEnv}:
            names += [p.name for p in inspect.signature(klass.__init__).parameters.values()
                      if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"]  # fmt: skip
        return names

    # ----- Gymnasium API ---------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        task = self._begin_reset(seed, options)
        self._check_resources()
        self.prepare_episode(task)
        self.hub.begin_episode(files=self.task_files(task), task=task.id, seed=seed)
        if self._overrides("abegin_task"):
            self.hub.run_sync(self.abegin_task(task))
        return self._start(task)

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Async :meth:`reset` for collectors running many envs on one event loop."""
        task = self._begin_reset(seed, options)
        if self._holdings.items:
            await asyncio.to_thread(self._check_resources)  # a restart may take seconds: not on the loop
        if self._overrides("prepare_episode"):
            await asyncio.to_thread(self.prepare_episode, task)
        await self.hub.abegin_episode(files=self.task_files(task), task=task.id, seed=seed)
        await self.abegin_task(task)
        return self._start(task)

    def step(self, action: Any) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        episode = self._running()
        parsed = episode.parse(action)
        results: list[ToolResult] = []
        crash: str | None = None
        state: TaskState | None = None
        if parsed.tool_calls and parsed.answer is None:
            try:
                results = self.hub.call(parsed.tool_calls)
                if self._overrides("acheck_task"):
                    state = self.hub.run_sync(self._acheck(results))
            except Exception as exc:  # noqa: BLE001 - failures here become data, not crashes
                crash = self._crash(exc)
        try:
            score = self._score_answer(parsed)
        except Exception as exc:  # noqa: BLE001 - the env's scorer failed: its crash, not the model's answer
            score, crash = None, self._crash(exc)
        return episode.finish(episode.conclude(parsed, results, crash, score, state), self.rubric, self.hub.run_sync)

    async def astep(self, action: Any) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        """Async :meth:`step` (scoring, which may run tests, happens in a worker thread)."""
        episode = self._running()
        parsed = episode.parse(action)
        results: list[ToolResult] = []
        crash: str | None = None
        state: TaskState | None = None
        if parsed.tool_calls and parsed.answer is None:
            try:
                results = await self.hub.acall(parsed.tool_calls)
                state = await self._acheck(results)
            except Exception as exc:  # noqa: BLE001 - failures here become data, not crashes
                crash = self._crash(exc)
        try:
            score = None
            if parsed.answer is not None:  # a scorer that may run tests goes to a worker thread; exact match does not
                slow = self._overrides("score") or self.scorer not in (exact_match, contains_match)
                score = await asyncio.to_thread(self._score_answer, parsed) if slow else self._score_answer(parsed)
        except Exception as exc:  # noqa: BLE001 - the env's scorer failed: its crash, not the model's answer
            score, crash = None, self._crash(exc)
        return await episode.afinish(episode.conclude(parsed, results, crash, score, state), self.rubric)

    def close(self) -> None:
        """Close every MCP session and server process. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            self.hub.close()
        finally:
            self._release()
        super().close()

    async def aclose(self) -> None:
        """Async :meth:`close`."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.hub.aclose()
        finally:
            self._release()

    def render(self) -> str | None:
        if self.render_mode is None:
            return None
        text = self.episode.render() if self.episode is not None else "[task -]\n"
        if self.render_mode == "human":
            print(text)
            return None
        return text

    # ----- task hooks for concrete environments ----------------------------------------------------------
    def prepare_episode(self, task: Task) -> None:
        """Called first at reset (sync; in a worker thread on the async face), before the servers hear of it."""

    async def abegin_task(self, task: Task) -> None:
        """Begin the task after the servers know about the new episode (e.g. open the task's web page).

        Runs on the hub's event loop; use ``await self.hub.acall_internal(...)`` for the env's own tool calls.
        """

    def render_prompt(self, task: Task) -> str:
        """The first observation: the task prompt (concrete envs add attachments, instructions...)."""
        return task.prompt

    def prompt_images(self, task: Task) -> list[bytes]:
        """PNG images shown with the first observation (a screenshot of the task page); none by default."""
        return []

    def reset_info(self, task: Task) -> dict[str, Any]:
        """Extra ``info`` of :meth:`reset` (e.g. the task's level, the data set it comes from)."""
        return {}

    async def acheck_task(self, task: Task, results: list[ToolResult]) -> TaskState | None:
        """After each step's tool calls: an env whose task ends by itself returns its :class:`TaskState`. To show the
        model other text, it replaces entries of ``results`` with :meth:`ToolResult.with_text` copies (never edits one)."""
        return None

    def score(self, answer: str, task: Task) -> float | None:
        """The task score of a submitted answer; ``None`` when no reference answer is known."""
        if task.answer is None:
            return None
        return float(self.scorer(answer, task))

    def task_files(self, task: Task) -> Sequence[str]:
        """Attachment paths handed to the tool servers (in each call's ``_meta``)."""
        return task.files

    def work_folders(self) -> Sequence[str | Path]:
        """The folders ``"{work}"`` in ``roots`` stands for (GAIA-v0: its data folder); none by default. Called once,
        in ``__init__``."""
        return ()

    def release(self) -> None:
        """Called once when the env closes, after its sessions are closed (release what the env made itself)."""

    def limit_turns(self, limit: int | None) -> None:
        """Told at reset by `async_face` for each `TimeLimit` it runs (and by a `TurnLimit` a user puts on): the env
        ends the smallest such turn itself (``turn_limit``). Told nothing, it takes its id's registered limit."""
        if limit is not None and limit > 0:
            self._pending_limit = limit if self._pending_limit is None else min(self._pending_limit, limit)

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The agent's tools as OpenAI schemas (connects to the servers on first use)."""
        if self._tools is None:
            self.hub.start()
            self._tools = self.hub.tool_schemas()
        return self._tools

    @property
    def system_prompt(self) -> str:
        if self._system is None:  # the tools and the preamble do not change: rendered once
            self._system = render_system_prompt(self.tools, self.preamble, self.tool_format)
        return self._system

    # ----- the running episode, read-only (hooks, policies and recorders read these) ---------------------------
    @property
    def task(self) -> Task | None:
        """The episode's task (``None`` before the first reset)."""
        return self.episode.task if self.episode is not None else None

    @property
    def turn(self) -> int:
        """The number of turns taken in this episode."""
        return self.episode.turn if self.episode is not None else 0

    @property
    def turns(self) -> list[dict[str, Any]]:
        """The episode's turn log (a new list at every reset; see :mod:`aworld_gym.core.episode`)."""
        return self.episode.turns if self.episode is not None else []

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The OpenAI-format message history, derived from the turn log."""
        return self.episode.messages if self.episode is not None else []

    @property
    def ledger(self) -> RewardLedger | None:
        """The episode's one reward ledger, every writer's part tagged by source (``None`` before the first reset);
        the trajectory the rollout driver builds holds the same object."""
        return self.episode.ledger if self.episode is not None else None

    @property
    def episode_reward(self) -> float:
        """The episode's reward as the env's own reward hooks scored it (wrappers' shaping not included)."""
        return self.episode.ledger.share(Source.ENV).total if self.episode is not None else 0.0

    @property
    def episode_components(self) -> dict[str, float]:
        """The episode's reward components as the env's own reward hooks scored them."""
        return self.episode.ledger.share(Source.ENV).components if self.episode is not None else {}

    @property
    def last_context(self) -> StepContext | None:
        """The latest step's context (what reward hooks saw)."""
        return self.episode.last_context if self.episode is not None else None

    @property
    def observation_images(self) -> list[bytes]:
        """Images (PNG, JPEG...) of the latest observation (screenshot modes, tool images)."""
        return self.episode.images if self.episode is not None else []

    def _start(self, task: Task) -> tuple[str, dict[str, Any]]:
        """Begin the episode on ``task`` (after the servers and the task hooks did): its first observation and info."""
        rules = EpisodeRules(
            turn_limit=self.turn_limit,
            max_chars=self.max_episode_chars,
            truncate_on_infra_error=self.truncate_on_infra_error,
            max_observation_chars=self.observation_space.max_length,
            tokenizer=self.tokenizer,
            max_tool_output_tokens=self.max_tool_output_tokens,
            strict=self.strict,
        )
        obs = rules.bound(self.render_prompt(task))
        self._tool_change()  # tools a server re-listed since the last episode: this episode's system prompt lists them
        system = self.system_prompt
        images = list(self.prompt_images(task))
        self.episode = Episode(task, obs, system, images, parser=self.parser, rules=rules, relist=self._relist)
        info = {"task_id": task.id, "tools": self.tools, "system_prompt": system,
                "files": list(self.task_files(task)), "turn": 0}  # fmt: skip
        if images:
            info["images"] = self.episode.images
        info.update(self.reset_info(task))
        info["task_meta"] = task_meta(task.metadata, info)
        return obs, info

    def _running(self) -> Episode:
        if self.episode is None:
            raise ResetNeeded("call reset() before step(): the episode has not started or is over")
        return self.episode

    def _tool_change(self) -> str | None:
        """When the hub's tool table changed since the env last read it (``hub.tools_version``): ``tools`` is read
        again (the next episode's system prompt lists the new tools) and the note for the model is returned; ``None``
        when nothing the model reads changed."""
        version = self.hub.tools_version
        if version == self._tools_version:
            return None
        old, self._tools_version = self._tools, version
        self._tools = self._system = None
        return None if old is None else describe_tool_change(old, self.tools, self.tool_format)

    def _relist(self) -> tuple[str, list[dict[str, Any]]] | None:
        """After a step's tool calls: the note on changed tools and the new schemas (``None``: nothing changed)."""
        note = self._tool_change()
        return None if note is None else (note, self.tools)

    def _registered_limit(self) -> int | None:
        """The ``max_episode_steps`` registered for this env's id (``gym.spec``, public API), when no wrapper told the
        env a limit at this reset: ``gym.make``'s ``TimeLimit`` truncates at that turn, and the env ends, labels and
        scores it itself, on both faces. ``None`` for an env made without ``gym.make``."""
        if self.spec is None:
            return None
        try:
            return gym.spec(self.spec.id).max_episode_steps
        except gym.error.Error:
            return None

    def _overrides(self, hook: str) -> bool:
        """Whether a subclass implements ``hook`` (the sync face then runs it on the hub's loop)."""
        return getattr(type(self), hook) is not getattr(MCPEnv, hook)

    def _begin_reset(self, seed: int | None, options: dict[str, Any] | None) -> Task:
        super().reset(seed=seed)
        task = self._pick_task(options or {})
        told = self._pending_limit
        if told is None and self.max_turns is None:  # nothing said: the id's registered limit (gym.make's TimeLimit)
            told = self._registered_limit()
        limits = [n for n in (self.max_turns, told) if n is not None and n > 0]
        self.turn_limit, self._pending_limit = (min(limits) if limits else None), None
        return task

    async def _acheck(self, results: list[ToolResult]) -> TaskState | None:
        return await self.acheck_task(self._running().task, results)

    def _pick_task(self, options: Mapping[str, Any]) -> Task:
        if self._closed:
            raise ResetNeeded("this environment is closed; create a new one")
        return pick_task(self.tasks, options, self.np_random)

    def _score_answer(self, parsed: ParsedAction) -> float | None:
        return None if parsed.answer is None else self.score(parsed.answer, self._running().task)

    def _release(self) -> None:
        try:
            self.release()
        finally:
            self._holdings.release()
