"""SkyRL (``skyrl-gym`` >= 0.4): every AWorld id as a skyrl-gym ``BaseTextEnv``.

SkyRL's generator runs the loop: ``env = skyrl_gym.make(env_class, env_config=..., extras=row)``, then
``env.init(prompt)`` (the conversation the model starts from: the env's system prompt with its tools and the task),
``env.step(text)`` per model turn (the env's answer as chat messages, the step's reward, ``done``, metadata), and
``env.get_metrics()`` at the end. Each instance runs one episode on a pooled AWorld env (servers and browsers are
not restarted per sample) and keeps its :class:`~aworld_gym.core.trajectory.Trajectory`, recorded by the episode
driver's own step recorder, so this face gives the same turns and rewards as every other.

Void episodes (infrastructure's fault) end at once with ``metadata["status"] == "void"`` and ``get_metrics()["void"]``
1. SkyRL's generator builds the loss mask and the rewards itself, one env at a time, so the group's work is done on
its ``GeneratorOutput``: :class:`AWorldGenerator` wraps SkyRL's generator and hands each output to
:func:`finish_output`, which runs the env's group reward hooks once per GRPO group (the rows with one
``trajectory_ids[i].instance_id``; void rows left out) and adds each row's share to its reward, and applies the void
policy (every token of a void row masked, its reward the mean of its group's live rows). Each env names its
Trajectory to :func:`finish_output` through ``get_metrics()["trajectory"]``.

::

    from aworld_gym.trainers.skyrl import AWorldGenerator, register_all
    register_all()  # "aworld" (env_id in env_config or the row's extras) and every AWorld/* id
    # in your entrypoint's get_generator (a BasePPOExp subclass):
    return AWorldGenerator(SkyRLGymGenerator(...))
"""

from __future__ import annotations

import itertools
import json
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

import aworld_gym
from aworld_gym.core.trajectory import VOID, Termination, Trajectory
from aworld_gym.rollout.envs import env_factory
from aworld_gym.rollout.groups import check_void_policy, finish_group, training_rewards
from aworld_gym.rollout.health import health_metrics
from aworld_gym.rollout.pool import EnvPool
from aworld_gym.rollout.text_episode import SyncTextEpisode
from aworld_gym.trainers.seam.rows import row_env, void_weight
from aworld_gym.trainers.seam.token_rollout import episode_options

GENERIC_ID = "aworld"
_POOLS: dict[str, EnvPool] = {}
KEEP = 65536  # the envs' trajectories kept for finish_output, newest last (a run that never calls it stays bounded)
_TRAJECTORIES: OrderedDict[int, AWorldTextEnv] = OrderedDict()
_KEYS = itertools.count(1)


def _pool(env_id: str, env_kwargs: Mapping[str, Any]) -> EnvPool:
    key = json.dumps([env_id, env_kwargs], sort_keys=True, default=str)
    if key not in _POOLS:
        _POOLS[key] = EnvPool(env_factory(env_id, dict(env_kwargs) or None))
    return _POOLS[key]


class AWorldTextEnv(BaseTextEnv):
    """One AWorld episode for SkyRL (a :class:`~aworld_gym.rollout.text_episode.SyncTextEpisode`: SkyRL calls it
    synchronously).

    Args:
        env_config: SkyRL's per-env config (``environment.skyrl_gym.<env_class>``): ``env_id``, ``env_kwargs``,
            ``max_turns``, ``void_policy`` (``"mask"`` or ``"zero"``).
        extras: the dataset row's fields: ``env_id`` / ``env_kwargs`` (win over the config), and the task as
            ``task_id`` / ``task_index`` / ``task`` (directly or in ``extra_info``), ``seed``.
        env_id: set by the registration of an ``AWorld/*`` id.
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None, env_id: str | None = None):
        super().__init__()
        config, extras = dict(env_config or {}), dict(extras or {})
        self.env_id, self.env_kwargs = row_env(extras, config.get("env_id") or env_id, config.get("env_kwargs"),
                                               face="SkyRL", needs="env_id in env_config or the row's extras")  # fmt: skip
        self.max_turns = int(config.get("max_turns") or 64)
        self.void_policy = check_void_policy(str(config.get("void_policy") or "mask"))
        self.extras = extras
        self.pool = _pool(self.env_id, self.env_kwargs)
        self.episode = SyncTextEpisode(self.pool, self.env_id, "skyrl")
        self.key = next(_KEYS)
        _TRAJECTORIES[self.key] = self
        while len(_TRAJECTORIES) > KEEP:
            _TRAJECTORIES.popitem(last=False)

    @property
    def trajectory(self) -> Trajectory:
        """The episode's trajectory (what :func:`finish_output` reads)."""
        return self.episode.trajectory

    def init(self, prompt: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        info = dict(self.extras.get("extra_info") or {})
        options = episode_options({**info, **self.extras}, prompt)
        turn = self.episode.start(self.extras.get("seed"), options)
        if turn.error is not None:  # a void episode: SkyRL's batch goes on
            return list(prompt), {"status": VOID}
        return turn.messages, {"task_id": self.trajectory.task_id}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        if not self.episode.running:
            return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True, metadata=self._metadata())
        self.turns += 1
        turn = self.episode.step(action)
        if not turn.done and self.turns >= self.max_turns:
            self.episode.end(Termination.TURN_LIMIT)
        obs = [] if self.episode.done else [{"role": m["role"], "content": m["content"]} for m in turn.messages]
        return BaseTextEnvStepOutput(observations=obs, reward=turn.reward, done=self.episode.done,
                                     metadata=self._metadata())  # fmt: skip

    def _metadata(self) -> dict[str, Any]:
        t = self.trajectory
        return {"status": t.status, "termination": t.termination, "weight": void_weight(t.void, self.void_policy),
                "score": t.score, "task_id": t.task_id}  # fmt: skip

    def get_metrics(self) -> dict[str, Any]:
        """The episode's numbers, which SkyRL averages over a batch's envs: its status, score, turns and reward,
        and its parse health (``parse/tool_call_turns``, ``parse/failure_turns``: shares of its turns;
        ``parse/no_tool_call_episodes``: 1 when it called no tool; ``parse/unknown_tools``: calls)."""
        t = self.trajectory
        health = health_metrics([t])
        return {"void": float(t.void), "score": float(t.score or 0.0), "turns": float(t.num_turns),
                "reward": t.reward, "weight": self._metadata()["weight"], **health,
                "trajectory": float(self.key)}  # fmt: skip

    def close(self) -> None:
        self.episode.close()


class AWorldGenerator:
    """SkyRL's generator with the group's work done on each output: ``generate`` runs the wrapped generator (SkyRL's
    ``SkyRLGymGenerator`` or a subclass) and hands its ``GeneratorOutput`` to :func:`finish_output`; everything
    else is the wrapped generator's."""

    def __init__(self, generator: Any) -> None:
        self.generator = generator

    async def generate(self, input_batch: Any) -> Any:
        return finish_output(await self.generator.generate(input_batch))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.generator, name)


def finish_output(output: dict[str, Any]) -> dict[str, Any]:
    """The group's work on a SkyRL ``GeneratorOutput`` (in place; see the module's docstring): per group (the rows'
    ``trajectory_ids[i].instance_id``), the env's group hooks run once on the live rows' trajectories, each row's
    reward becomes its training reward (its own plus its group share; a masked row: the group's live mean, on the
    last token for per-token rewards) and a masked row's loss mask is all 0. Rows whose env metrics name no
    trajectory of this process are left as they are. Returns ``output``."""
    metrics = output.get("env_metrics") or [{} for _ in output["rewards"]]
    ids = output.get("trajectory_ids") or [None] * len(output["rewards"])
    envs = [_TRAJECTORIES.pop(int(m["trajectory"]), None) if "trajectory" in m else None for m in metrics]
    groups: dict[Any, list[int]] = {}
    for i, tid in enumerate(ids):
        if envs[i] is not None:
            groups.setdefault(getattr(tid, "instance_id", tid if tid is not None else i), []).append(i)
    rewards = list(output["rewards"])
    for rows in groups.values():
        first = envs[rows[0]]
        assert first is not None
        members = [envs[i].trajectory for i in rows]  # type: ignore[union-attr]
        finish_group(first.pool.group_hooks, members, void_policy=first.void_policy)
        for i, traj, reward in zip(rows, members, training_rewards(members), strict=True):
            rewards[i] = _with_total(rewards[i], reward)
            if traj.weight <= 0:
                output["loss_masks"][i] = [0] * len(output["loss_masks"][i])
    output["rewards"] = rewards
    return output


def _with_total(reward: Any, total: float) -> Any:
    """``reward`` (a float, or per-token rewards) changed to sum to ``total`` (the difference on the last token)."""
    if isinstance(reward, list):
        return [*reward[:-1], float(reward[-1]) + total - _total(reward)] if reward else reward
    return total


def _total(reward: Any) -> float:
    return float(sum(reward)) if isinstance(reward, list) else float(reward)


def register_all() -> list[str]:
    """Register ``"aworld"`` and every AWorld id with skyrl-gym's registry (idempotent); returns the ids."""
    import skyrl_gym

    ids = [GENERIC_ID, *aworld_gym.register_envs()]
    for env_id in ids:
        if env_id in skyrl_gym.registry:
            continue
        kwargs = {} if env_id == GENERIC_ID else {"env_id": env_id}
        skyrl_gym.register(id=env_id, entry_point="aworld_gym.trainers.skyrl:AWorldTextEnv", kwargs=kwargs)
    return ids
