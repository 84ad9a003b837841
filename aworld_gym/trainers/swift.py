"""ms-swift (>= 4.6) faces, registered on import. Load them in swift with ``--external_plugins`` and the plugin file
``aworld_gym/trainers/plugins/aworld_swift.py`` (``aworld_gym.trainers.plugins.SWIFT``; not this file: swift puts a
plugin's folder first on ``sys.path``, and this folder's ``trl.py`` would shadow TRL):

- **Token-exact scheduler** ``--multi_turn_scheduler aworld --reward_funcs aworld``: :class:`AWorldScheduler`, a
  ``MultiTurnScheduler`` that runs each request as an AWorld episode (``on_trajectory_start``: reset, the env's
  system prompt and task become the request's messages; ``on_turn_end``: the model's text steps the env). Its
  ``step`` returns ``response_token_ids`` (the model's ids exactly as sampled, after the template's response prefix
  with loss mask 0), ``response_loss_mask`` and ``rollout_logprobs``; the env's answer goes in as the next user
  message, which swift renders into the prompt and never trains on. :class:`AWorldReward` (``orms["aworld"]``)
  gives the episode's reward.
- **Gym env** ``--multi_turn_scheduler aworld_gym --gym_env aworld``: :class:`AWorldEnv`, a
  ``swift.rollout.gym_env.Env`` (text turns; swift sums the step rewards), under :class:`AWorldGymScheduler`
  (swift's ``GYMScheduler`` that also masks a void episode; swift's own ``gym_scheduler`` runs the env too, but keeps
  nothing of a step's info, so a void episode there trains as reward 0).
- **OpenEnv** ``--multi_turn_scheduler aworld_openenv``: :class:`AWorldOpenEnvScheduler`, swift's
  ``OpenEnvScheduler`` speaking to an ``aworld-gym serve-env`` server (envs on CPU nodes apart from the GPUs).

The env comes from the dataset row's ``env_config`` (``env_id`` any ``AWorld/*`` id, ``env_kwargs``, the task as
``task_id`` / ``task_index`` / ``task``, ``seed``), else ``$AWORLD_ENV_ID`` / ``$AWORLD_ENV_KWARGS`` (the row's prompt
then becomes a task without a reference answer).

**Void episodes** (infrastructure's fault) on the schedulers: every loss-mask entry of the episode is set to 0 (the
mask lists the scheduler handed swift, in place: swift's server ``run()`` and colocate ``run_multi_turn`` both keep
them) and :class:`AWorldReward` gives it its group's live mean (the group: the rows with its ``prompt_id``), so its
advantage is 0 and the baseline does not move; ``rollout_infos`` says ``status``/``void``/``weight``. On the gym env,
:class:`AWorldGymScheduler` masks it the same way and its ``total_reward`` (swift's ``gym_reward``) is 0: add
``--reward_funcs aworld --reward_weights 1 0`` to give it the group's live mean instead.

Our envs live on a background event loop of their own (swift's colocate trainer opens a new loop for every hook
call; MCP sessions stay on the loop that opened them), and come from one env pool per env id and kwargs.
"""

from __future__ import annotations

import asyncio
import json
import uuid as uuidlib
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from swift.rewards import ORM, orms
from swift.rollout.gym_env import Env, envs
from swift.rollout.multi_turn import GYMScheduler, MultiTurnScheduler, OpenEnvScheduler, multi_turns

import aworld_gym  # noqa: F401 - registers the ids
from aworld_gym.base.errors import last_line
from aworld_gym.core.trajectory import Termination, Trajectory
from aworld_gym.rollout.envs import env_factory
from aworld_gym.rollout.groups import check_void_policy
from aworld_gym.rollout.pool import EnvPools
from aworld_gym.rollout.text_episode import TextEpisode
from aworld_gym.trainers.seam.env_loop import EnvLoop
from aworld_gym.trainers.seam.groups import finish_groups
from aworld_gym.trainers.seam.rows import environ_env, row_env, void_weight
from aworld_gym.trainers.seam.token_rollout import episode_options
from aworld_gym.wrappers.reward_shaping import group_hooks

T = TypeVar("T")
NAME = "aworld"
RECORD = "aworld_record"  # rollout_infos' key of the episode's trajectory record (what group hooks read)
POOLS = EnvPools()
ENVS = EnvLoop("aworld-gym-swift-envs")


async def on_env_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the envs' own loop and wait for it from the caller's loop."""
    return await ENVS.run(coro)


def swift_env(env_config: Mapping[str, Any] | None, row: Mapping[str, Any] | None) -> tuple[str, dict, dict]:
    """(env id, env kwargs, the task fields) from the row's ``env_config`` (and the row), else the environment."""
    fields = {**dict(row or {}), **dict(env_config or {})}  # env_config's fields win over the row's
    env_id, kwargs = row_env(fields, *environ_env(), face="ms-swift",
                             needs="env_config's env_id (an AWorld/* id) or $AWORLD_ENV_ID")  # fmt: skip
    task = {k: v for k, v in fields.items() if k in ("task", "task_id", "task_index", "seed")}
    return env_id, kwargs, task


async def _start_episode(env_config: Any, row: Any, messages: Any, policy: str) -> tuple[TextEpisode, Any]:
    async def start() -> tuple[TextEpisode, Any]:
        env_id, kwargs, task = swift_env(env_config, row)
        episode = TextEpisode(POOLS.get(env_id, kwargs), env_id, policy)
        return episode, await episode.start(task.get("seed"), episode_options(task, messages))

    return await on_env_loop(start())


def first_messages(env_messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The env's opening messages as swift's (role and text only)."""
    return [{"role": m["role"], "content": m["content"]} for m in env_messages]


def rollout_infos(traj: Trajectory, void_policy: str) -> dict[str, Any]:
    """What a finished episode tells swift's trainer (and :class:`AWorldReward`)."""
    return {"total_reward": 0.0 if traj.void else traj.reward, "status": traj.status, "void": float(traj.void),
            "termination": traj.termination, "score": traj.score, "weight": void_weight(traj.void, void_policy),
            "task_id": traj.task_id, "aworld_turns": traj.num_turns,
            "error": last_line(traj.error, 500) or None, RECORD: traj.to_record()}  # fmt: skip


# ----- the gym env ----------------------------------------------------------------------------------------------------
class AWorldEnv(Env):
    """One AWorld episode for swift's ``GYMScheduler`` (``--use_gym_env --gym_env aworld``)."""

    def __init__(self, env_config: dict[str, Any]) -> None:
        super().__init__(env_config)
        self.episode: TextEpisode | None = None

    async def reset(self, config: Any) -> tuple[str, dict[str, Any], str]:
        self.episode, turn = await _start_episode(self.env_config, config.data_dict, config.messages, "swift-gym")
        if turn.error is not None:
            return turn.observation, {"status": "void", "error": turn.error}, ""
        msgs = first_messages(turn.messages)
        system = "\n".join(m["content"] for m in msgs if m["role"] == "system")
        user = "\n".join(m["content"] for m in msgs if m["role"] == "user")
        return user, {"task_id": self.episode.trajectory.task_id}, system

    async def step(self, action: list[dict[str, Any]]) -> tuple[str, float, bool, dict[str, Any]]:
        episode = self.episode
        if episode is None or not episode.running:
            return "", 0.0, True, {"status": episode.trajectory.status if episode else "void"}
        turn = await on_env_loop(episode.step(str(action[-1]["content"])))
        info = rollout_infos(episode.trajectory, "zero") if turn.done else {}
        return turn.observation, turn.reward, turn.done, info

    async def close(self) -> None:
        if self.episode is not None:
            await on_env_loop(self.episode.close())


# ----- the schedulers -------------------------------------------------------------------------------------------------
class VoidMasks:
    """Mixin for swift schedulers: every loss mask handed to swift for a request is kept, so that when its episode
    turns out void they are all set to 0 in place (see the module's docstring)."""

    void_policy = "mask"

    def _masks(self) -> dict[str, list[list[int]]]:
        if "_mask_lists" not in self.__dict__:
            self.__dict__["_mask_lists"] = {}
        return self.__dict__["_mask_lists"]

    def get_response_token_data(self, infer_request: Any, response_choice: Any, is_continuation: bool = False,
                                response_token_ids: Any = None, response_loss_mask: Any = None) -> Any:  # fmt: skip
        ids, mask = super().get_response_token_data(  # type: ignore[misc]
            infer_request, response_choice, is_continuation, response_token_ids, response_loss_mask
        )
        key, mask = infer_request.uuid, list(mask)
        if self.is_void(key):
            mask[:] = [0] * len(mask)
        if self.is_finished(key):
            self.forget(key)  # the request's last data: nothing of it is kept
        else:
            self._masks().setdefault(key, []).append(mask)
        return ids, mask

    def mask_void(self, key: str) -> None:
        if void_weight(True, self.void_policy) == 0:
            for mask in self._masks().get(key, []):
                mask[:] = [0] * len(mask)

    def is_void(self, key: str) -> bool:
        return False

    def is_finished(self, key: str) -> bool:
        return False

    def forget(self, key: str) -> None:
        self._masks().pop(key, None)


class EndedMasks(VoidMasks):
    """Mixin for schedulers whose episode ends are known only from what they report (the gym env's trajectory, the
    OpenEnv server's last step): :meth:`ended` records a request's ending, masks it if void and gives the infos."""

    def _statuses(self) -> dict[str, dict[str, Any]]:
        if "_ended" not in self.__dict__:
            self.__dict__["_ended"] = {}
        return self.__dict__["_ended"]

    async def on_trajectory_start(self, requests: list[Any]) -> None:
        for req in requests:
            if req.uuid is None:
                req.uuid = uuidlib.uuid4().hex
            self.forget(req.uuid)
        await super().on_trajectory_start(requests)  # type: ignore[misc]

    def ended(self, key: str, status: str, termination: Any, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        void = status == "void"
        info = {"status": status, "termination": termination, "void": float(void),
                "weight": void_weight(void, self.void_policy), **dict(extra or {})}  # fmt: skip
        if void:
            info["total_reward"] = 0.0
            self.mask_void(key)
        self._statuses()[key] = info
        return info

    def is_void(self, key: str) -> bool:
        return self._statuses().get(key, {}).get("weight", 1.0) == 0.0

    def is_finished(self, key: str) -> bool:
        return key in self._statuses()

    def forget(self, key: str) -> None:
        super().forget(key)
        self._statuses().pop(key, None)


class AWorldScheduler(VoidMasks, MultiTurnScheduler):
    """Token-exact AWorld episodes in swift's multi-turn rollout (``--multi_turn_scheduler aworld``).

    Args:
        infer_engine, max_turns: swift's (``max_turns`` ends an unfinished episode as ``turn_limit``).
        void_policy: ``"mask"`` (loss mask 0, the group's live mean) or ``"zero"`` (trained on as reward 0).
    """

    def __init__(self, infer_engine: Any = None, max_turns: int | None = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(infer_engine, max_turns, *args, **kwargs)
        self.void_policy = check_void_policy(str(kwargs.get("void_policy") or "mask"))
        self.episodes: dict[str, TextEpisode] = {}
        self.pending: dict[str, str] = {}
        self.finished: list[Trajectory] = []  # the last episodes (for logging and tests), newest last

    async def on_trajectory_start(self, requests: list[Any]) -> None:
        async def one(req: Any) -> None:
            if req.uuid is None:
                req.uuid = uuidlib.uuid4().hex
            await self._drop(req.uuid)
            row = dict(req.data_dict or {})
            episode, turn = await _start_episode(row.get("env_config"), row, req.messages, "swift")
            self.episodes[req.uuid] = episode
            text = [{"role": "user", "content": turn.observation}]  # a void start: the model's one turn is masked
            req.messages = text if turn.error is not None else first_messages(turn.messages)

        await asyncio.gather(*(one(r) for r in requests))

    async def on_turn_end(self, infer_request: Any, response_choice: Any, current_turn: int) -> dict[str, Any]:
        key = infer_request.uuid
        episode = self.episodes.get(key)
        if episode is None:
            return {"done": True}
        if episode.running:
            if response_choice.finish_reason == "length":
                episode.end(Termination.LENGTH)  # the reply was cut off: not stepped (as the episode driver does)
            else:
                turn = await on_env_loop(episode.step(str(infer_request.messages[-1]["content"])))
                if not turn.done and self.max_turns and current_turn >= self.max_turns:
                    episode.end(Termination.TURN_LIMIT)
                elif not turn.done:
                    self.pending[key] = turn.observation
        if episode.running:
            return {"done": False, "rollout_infos": {"total_reward": episode.trajectory.reward}}
        await on_env_loop(episode.close())
        traj = episode.trajectory
        self.finished = [*self.finished[-1023:], traj]
        if traj.void:
            self.mask_void(key)
        return {"done": True, "rollout_infos": rollout_infos(traj, self.void_policy)}

    def step(self, infer_request: Any, response_choice: Any, current_turn: int) -> dict[str, Any]:
        key = infer_request.uuid
        infer_request.messages.append({"role": "user", "content": self.pending.pop(key, "")})
        ids, mask = self.get_response_token_data(infer_request, response_choice)
        logprobs = [float(x["logprob"]) for x in (response_choice.logprobs or {}).get("content") or []]
        return {"infer_request": infer_request, "response_token_ids": ids, "response_loss_mask": mask,
                "rollout_logprobs": logprobs}  # fmt: skip

    def is_void(self, key: str) -> bool:
        episode = self.episodes.get(key)
        return episode is not None and void_weight(episode.trajectory.void, self.void_policy) == 0

    def is_finished(self, key: str) -> bool:
        episode = self.episodes.get(key)
        return episode is not None and episode.started and not episode.running and episode.env is None

    def forget(self, key: str) -> None:
        super().forget(key)
        self.episodes.pop(key, None)
        self.pending.pop(key, None)

    async def _drop(self, key: str) -> None:
        episode = self.episodes.get(key)
        self.forget(key)
        if episode is not None:
            episode.end(Termination.POLICY_ERROR, "swift restarted the request before its episode ended")
            await on_env_loop(episode.close())


class AWorldOpenEnvScheduler(EndedMasks, OpenEnvScheduler):
    """swift's ``OpenEnvScheduler`` for an ``aworld-gym serve-env`` server (``--multi_turn_scheduler
    aworld_openenv``; the row's ``env_config``: ``base_url``, ``reset_kwargs`` such as ``{"task_id": ...}``). The
    action is the model's text; the env's system prompt and task open the conversation; a void ending is masked."""

    max_concurrent_envs = 4  # class attributes: swift reads them with getattr
    env_config_defaults: dict[str, Any] = {}  # noqa: RUF012 - swift's name and shape

    def _create_env(self, env_config: dict[str, Any]) -> Any:
        wrapper = super()._create_env(env_config)
        reset, step = wrapper.reset, wrapper.step

        def keep_reset() -> Any:
            obs, meta = reset()
            wrapper.first = obs
            return obs, meta

        def keep_step(action: dict[str, Any]) -> Any:
            out = step(action)
            wrapper.last = out[0]
            return out

        wrapper.reset, wrapper.step = keep_reset, keep_step
        return wrapper

    async def on_trajectory_start(self, requests: list[Any]) -> None:
        await super().on_trajectory_start(requests)  # each request's uuid set and its last ending forgotten
        for req in requests:
            first = getattr(self._envs.get(req.uuid), "first", None)
            if isinstance(first, dict) and first.get("messages"):
                req.messages = first_messages(first["messages"])

    async def on_turn_end(self, infer_request: Any, response_choice: Any, current_turn: int) -> dict[str, Any]:
        wrapper = self._envs.get(infer_request.uuid)
        out = await super().on_turn_end(infer_request, response_choice, current_turn)
        last = getattr(wrapper, "last", None)
        if out.get("done") and isinstance(last, dict) and last.get("status"):
            info = self.ended(infer_request.uuid, last["status"], last.get("termination"))
            out["rollout_infos"] = {**out.get("rollout_infos", {}), **info}
        return out

    def parse_action(self, text: str) -> dict[str, Any]:
        return {"text": text}

    def format_observation(self, observation: Any) -> str:
        return str(observation.get("text", "")) if isinstance(observation, dict) else str(observation)


class AWorldGymScheduler(EndedMasks, GYMScheduler):
    """swift's ``GYMScheduler`` for :class:`AWorldEnv` (``--multi_turn_scheduler aworld_gym --gym_env aworld``) that
    also reads each finished episode's Trajectory: ``rollout_infos`` get ``status``, ``termination``, ``weight``
    (and the rest of :func:`rollout_infos`), and a void episode's loss masks are all set to 0 (see the module's
    docstring). ``void_policy``: ``"mask"`` or ``"zero"``."""

    def __init__(self, infer_engine: Any = None, max_turns: int | None = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(infer_engine, max_turns, *args, **kwargs)
        self.void_policy = check_void_policy(str(kwargs.get("void_policy") or "mask"))

    async def on_turn_end(self, infer_request: Any, response_choice: Any, current_turn: int) -> dict[str, Any]:
        env = self._envs.get(infer_request.uuid)
        out = await super().on_turn_end(infer_request, response_choice, current_turn)
        episode = env.episode if isinstance(env, AWorldEnv) else None
        if out.get("done") and episode is not None:
            traj = episode.trajectory
            extra = {k: v for k, v in rollout_infos(traj, self.void_policy).items() if k != "total_reward"}
            info = self.ended(infer_request.uuid, traj.status, traj.termination, extra)
            out["rollout_infos"] = {**out.get("rollout_infos", {}), **info}
        return out


# ----- the reward -----------------------------------------------------------------------------------------------------
class AWorldReward(ORM):
    """``--reward_funcs aworld``: each episode's training reward from the scheduler's ``rollout_infos``, with the
    group's work done on the batch (swift hands the whole group only to reward functions): per group (the rows with
    one ``prompt_id`` and task in ``env_config``), the env's group reward hooks run once on the live rows' trajectory records
    and each row's share is added to its reward; a masked (void) row gets its group's live mean, so its advantage is 0.
    The hooks are the env's that the row names (its ``env_config``, else ``$AWORLD_ENV_ID`` / ``$AWORLD_ENV_KWARGS`` in
    the trainer's process, as for the scheduler). Rows with no record (swift's own ``gym_scheduler``, the OpenEnv
    scheduler) count with their ``total_reward`` and run no group hooks."""

    def __call__(self, completions: list[Any], rollout_infos: list[dict[str, Any]] | None = None,
                 prompt_id: list[str] | None = None, **kwargs: Any) -> list[float]:  # fmt: skip
        if rollout_infos is None:
            raise ValueError("the aworld reward needs rollout_infos: use --multi_turn_scheduler aworld")
        n = len(rollout_infos)
        keys, members, rubrics = [], [], []
        for i, info in enumerate(rollout_infos):
            row = {k: v[i] for k, v in kwargs.items() if isinstance(v, list) and len(v) == n}  # swift's batched columns
            keys.append((prompt_id[i] if prompt_id else str(i), _task_key(row.get("env_config"))))
            members.append(_member(info))
            rubrics.append(group_rubric(*swift_env(row.get("env_config"), row)[:2]) if RECORD in info else None)
        policy = "zero" if any(t.void and t.weight > 0 for t in members) else "mask"  # the scheduler's, by its weights
        rewards = finish_groups(keys, members, rubrics, policy)
        return [0.0 if t.void and t.weight > 0 else r for t, r in zip(members, rewards, strict=True)]


def _task_key(env_config: Any) -> str:
    """What tells a row's task apart beside its ``prompt_id`` (swift's id of the dataset's messages, which AWorld rows
    may all share): its ``env_config`` but the env's kwargs (objects there may differ by row and not by task)."""
    fields = {k: v for k, v in dict(env_config or {}).items() if k != "env_kwargs"}
    return json.dumps(fields, sort_keys=True, default=str)


def _member(info: Mapping[str, Any]) -> Trajectory:
    """One row's trajectory: its record (the scheduler's weight), else its ``total_reward`` and ending."""
    record = info.get(RECORD) or {"reward": info.get("total_reward", 0.0), "termination": info.get("termination")}
    traj = Trajectory.from_record(record)
    traj.weight = float(info.get("weight", 1.0))
    return traj


_RUBRICS: dict[str, Any] = {}


def group_rubric(env_id: str, env_kwargs: Mapping[str, Any]) -> Any:
    """The group reward rubric of an env id and kwargs (``None``: no group hooks), read once off an env made for it
    and closed at once (an env starts its servers at its first reset, so this starts none)."""
    key = json.dumps([env_id, env_kwargs], sort_keys=True, default=str)
    if key not in _RUBRICS:
        env = env_factory(env_id, dict(env_kwargs) or None)()
        try:
            _RUBRICS[key] = group_hooks(env)
        finally:
            env.close()
    return _RUBRICS[key]


envs[NAME] = AWorldEnv
multi_turns[NAME] = AWorldScheduler
multi_turns[f"{NAME}_openenv"] = AWorldOpenEnvScheduler
multi_turns[f"{NAME}_gym"] = AWorldGymScheduler
orms[NAME] = AWorldReward
