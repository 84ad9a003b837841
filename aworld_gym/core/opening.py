"""How an episode opens (reset's first observation, chat head and info) and how a step opens (the action parsed).

Shared by both faces of :class:`~aworld_gym.core.env.MCPEnv` (``env`` is the env), like
:mod:`~aworld_gym.core.stepping`, which concludes a step.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from gymnasium.error import ResetNeeded

from aworld_gym.core.actions import ParsedAction, action_text, parse_action
from aworld_gym.core.episode import image_content
from aworld_gym.core.stepping import tool_change
from aworld_gym.core.task import Task, task_meta

if TYPE_CHECKING:
    from aworld_gym.core.env import MCPEnv


def start_episode(env: MCPEnv, task: Task) -> tuple[str, dict[str, Any]]:
    """Begin the episode on ``task`` (after the servers and the task hooks did): its first observation and info."""
    env.task, env.turn, env._done = task, 0, False
    env.turns, env.episode_reward, env.episode_components = [], 0.0, {}
    obs = env._bound(env.render_prompt(task))
    env._chars = len(obs)
    tool_change(env)  # tools a server re-listed since the last episode: this episode's system prompt lists them
    system = env.system_prompt
    env.observation_images = list(env.prompt_images(task))
    env._head = [{"role": "system", "content": system},
                 {"role": "user", "content": image_content(obs, env.observation_images)}]  # fmt: skip
    info = {"task_id": task.id, "tools": env.tools, "system_prompt": system,
            "files": list(env.task_files(task)), "turn": 0}  # fmt: skip
    if env.observation_images:
        info["images"] = env.observation_images
    info.update(env.reset_info(task))
    info["task_meta"] = task_meta(task.metadata, info)
    return obs, info


def parse_turn(env: MCPEnv, action: Any) -> ParsedAction:
    """Start a turn: count it, start its clock, and parse ``action`` (a parser failure is a format error unless the
    env is ``strict``). Raises ``ResetNeeded`` when no episode is running."""
    if env.task is None or env._done:
        raise ResetNeeded("call reset() before step(): the episode has not started or is over")
    env.turn += 1
    env._step_started = time.perf_counter()
    try:
        return parse_action(env.parser, action)  # a string, or an Action (its own tool calls win)
    except Exception as exc:
        if env.strict:
            raise
        return ParsedAction(text=action_text(action), errors=[f"the action parser failed: {repr(exc)[:300]}"])
