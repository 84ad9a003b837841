"""An agent program as the policy of an episode: the agent runs its own loop, and every tool call it makes is a turn.

``AgentPolicy(agent, endpoint)`` is a policy like any other (``collect``, ``stream``; the in-process engine), so the episode
driver, its statuses and the recorder are the ones every policy gets. Per episode the agent program,
``agent(ctx) -> answer``, runs as a task of its own with an :class:`AgentContext`: the task as the env words it, the
env's tools (OpenAI schemas) and ``ctx.call_tool(name, arguments)``, which makes the call one turn of the episode
(through the env's hub: its guard, cache, limits and reward hooks) and returns the tool's result text; and the
endpoint's base URL for this episode, where the agent's model calls are recorded. Its answer is submitted as the
episode's final answer and scored by the env.

How an episode ends besides an answer: the agent raised (``agent_error``, failed: the agent's fault; an error of the
model endpoint is ``policy_error``, void), returned no answer (``agent_error``), hung past the driver's
``policy_timeout_s`` between two turns (``policy_error``, void), or the env ended it (a turn limit, a dead server):
the agent's task is then cancelled, and a model call it makes after its episode is refused by the endpoint and kept
nowhere. When the episode ends, its calls are closed and merged (:func:`~aworld_gym.endpoint.merge.merge_calls`):
``traj.tokens`` when they form one sequence, else ``traj.extra["token_samples"]``; ``traj.extra["agent"]`` says which.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aworld_gym.core.actions import Action
from aworld_gym.core.trajectory import Termination, Trajectory
from aworld_gym.endpoint.bridge import ToolBridge
from aworld_gym.endpoint.merge import merge_calls
from aworld_gym.endpoint.server import TokenEndpoint


class AgentFailed(Exception):
    """The agent program raised (its own fault) or returned no answer: the episode ends ``agent_error``."""

    termination = Termination.AGENT_ERROR


@dataclass
class AgentContext:
    """What an agent program gets for one episode (see the module)."""

    task: str
    system_prompt: str | None
    tools: list[dict[str, Any]]
    base_url: str
    api_key: str
    model: str
    call_tool: Callable[[str, dict[str, Any]], Awaitable[str]]
    mcp_config: dict[str, Any] | None = None  # the same tools as an MCP server (``endpoint.bridge``)


AgentProgram = Callable[[AgentContext], Awaitable[str | None]]


class _Run:
    """One episode's agent: its task, the queue of what it asks, the call waiting for its result."""

    def __init__(self, episode: str, env_episode: Any) -> None:
        self.episode, self.env_episode = episode, env_episode
        self.asks: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.waiting: asyncio.Future[str] | None = None
        self.task: asyncio.Task[None] | None = None

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        await self.asks.put(("call", (name, dict(arguments or {}), future)))
        return await future

    async def run(self, agent: AgentProgram, ctx: AgentContext) -> None:
        try:
            await self.asks.put(("answer", await agent(ctx)))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - handed to the driver as the policy's failure
            await self.asks.put(("error", exc))


class AgentPolicy:
    """An agent program (``agent(ctx) -> answer``) as the policy of each episode (see the module).

    Args:
        agent: an async function of an :class:`AgentContext`, returning its final answer (``None``: none).
        endpoint: the serving :class:`~aworld_gym.endpoint.server.TokenEndpoint` its model calls go to.
        model: the model name the agent is told (default the endpoint's).
        api_key: what the agent sends as its key (the endpoint's token when it has one).
        mcp: also give each agent the env's tools as an MCP server (``ctx.mcp_config``; one streamable-HTTP server
            on 127.0.0.1 for the policy, :class:`~aworld_gym.endpoint.bridge.ToolBridge`). ``close()`` stops it.
    """

    name = "agent"

    def __init__(self, agent: AgentProgram, endpoint: TokenEndpoint, *, model: str | None = None,
                 api_key: str | None = None, mcp: bool = True) -> None:  # fmt: skip
        self.agent, self.endpoint = agent, endpoint
        self.model = model or endpoint.model_name
        self.api_key = api_key or endpoint.guard.token or "unused"
        self.bridge = ToolBridge() if mcp else None
        self._runs: dict[int, _Run] = {}

    def close(self) -> None:
        if self.bridge is not None:
            self.bridge.close()

    def __enter__(self) -> AgentPolicy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def act(self, env: Any, observation: str, info: dict[str, Any]) -> str:
        raise RuntimeError("an agent program runs on the async face: collect(), stream() or await arun_episode()")

    async def aact(self, env: Any, observation: str, info: dict[str, Any]) -> str | Action:
        run = self._runs.get(id(env))
        if run is None or run.env_episode is not getattr(env, "episode", None):
            run = self._start(env, observation)
        elif run.waiting is not None:  # the observation answers the agent's last tool call
            waiting, run.waiting = run.waiting, None
            if not waiting.done():
                waiting.set_result(_tool_text(info, observation))
        kind, value = await run.asks.get()
        if kind == "call":
            name, arguments, run.waiting = value
            return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}</tool_call>"
        if kind == "error":
            if _endpoint_error(value):
                raise value  # the model endpoint failed: policy_error (void)
            raise AgentFailed(f"the agent program raised {type(value).__name__}: {value}") from value
        if value is None:
            raise AgentFailed("the agent program ended without an answer")
        return f"<answer>{value}</answer>"

    def _start(self, env: Any, observation: str) -> _Run:
        episode, base_url = self.endpoint.open_episode()
        run = _Run(episode, getattr(env, "episode", None))
        tools = list(env.tools)
        config = None
        if self.bridge is not None:
            self.bridge.register(episode, tools, run.call_tool, asyncio.get_running_loop())
            config = self.bridge.mcp_config(episode)
        ctx = AgentContext(task=observation, system_prompt=getattr(env, "system_prompt", None), tools=tools,
                           base_url=base_url, api_key=self.api_key, model=self.model, call_tool=run.call_tool,
                           mcp_config=config)  # fmt: skip
        run.task = asyncio.ensure_future(run.run(self.agent, ctx))
        self._runs[id(env)] = run
        return run

    async def finish_episode(self, env: Any, traj: Trajectory) -> None:
        run = self._runs.pop(id(env), None)
        if run is None:
            return
        if self.bridge is not None:
            self.bridge.unregister(run.episode)
        if run.task is not None and not run.task.done():
            run.task.cancel()  # the env ended the episode first: the agent stops here
            await asyncio.gather(run.task, return_exceptions=True)
        if run.waiting is not None and not run.waiting.done():
            run.waiting.cancel()
        calls = self.endpoint.close_episode(run.episode)
        merged = merge_calls(calls)
        if merged.merged and merged.samples:
            traj.tokens = merged.samples[0]
        elif merged.samples:
            traj.extra["token_samples"] = [s.to_dict() for s in merged.samples]
        traj.extra["agent"] = {"endpoint_episode": run.episode, "calls": len(calls), "merged": merged.merged,
                               "continued": sum(c.continued for c in calls),
                               "weights_versions": sorted({c.weights_version for c in calls if c.weights_version
                                                           is not None})}  # fmt: skip


def _tool_text(info: dict[str, Any], observation: str) -> str:
    """The result text of the agent's one call (the step's tool result), else the env's observation."""
    results = info.get("tool_results") or []
    if len(results) == 1 and isinstance(results[0], dict) and isinstance(results[0].get("text"), str):
        return results[0]["text"]
    return observation


def _endpoint_error(exc: BaseException) -> bool:
    """Whether an agent's exception is its model endpoint's failure (an OpenAI SDK connection or server error)."""
    return any(c.__module__.startswith("openai") and c.__name__ in ("APIConnectionError", "APITimeoutError",
                                                                     "InternalServerError", "RateLimitError")
               for c in type(exc).__mro__)  # fmt: skip
