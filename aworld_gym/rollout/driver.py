"""The episode driver: the one loop that runs an episode, used by every engine and trainer face.

``await arun_episode(env, policy)`` runs one episode on the env's async face (the outermost env, wrappers included)
and returns its :class:`~aworld_gym.core.trajectory.Trajectory`; ``run_episode`` is the same loop on the sync face
(the coroutine is driven without an event loop: every await on that face returns at once). In **token mode**
(``tokens=TokenMode(...)``) the actions are generated from token ids (the model's ids kept exactly, the env's
appended with mask 0) instead of asked from a policy: the data TRL, verl and the other trainer faces train on.

Never raises for what the policy, the model or the tools do: a failure ends the episode with its kind
(``policy_error``, ``env_error``; status ``void``). Before each generation the context is checked (token mode, or a
policy with a ``context_limit``): an episode that would overflow ends with ``context_limit``; a reply cut off by
its ``max_tokens`` (finish reason ``length``) ends with ``length``.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import traceback
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import gymnasium as gym

from aworld_gym.core.actions import Action, Sample, action_text
from aworld_gym.core.faces import async_face
from aworld_gym.core.running import set_turn_reward
from aworld_gym.core.trajectory import RewardLedger, Source, Termination, TokenData, Trajectory
from aworld_gym.rollout.policies import Policy, policy_act
from aworld_gym.rollout.policies.openai_policy import ContextOverflow
from aworld_gym.rollout.sinks.screenshots import Screenshots, render_async, render_sync
from aworld_gym.rollout.tokens import TokenMode, TokenTrack, new_env_messages, split_output

T = TypeVar("T")
PROMPT_CHARS = 8000  # the first observation kept in a trajectory, at most

__all__ = ["PROMPT_CHARS", "adopt_episode", "arun_episode", "error_text", "record_step", "run_episode", "run_now"]


class _SyncFace:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def reset(self, seed: int | None, options: dict[str, Any] | None) -> Any:
        return self.env.reset(seed=seed, options=options)

    async def step(self, action: Any) -> Any:
        return self.env.step(action)

    async def act(self, policy: Policy, env: Any, obs: Any, info: dict[str, Any], timeout: float | None) -> Any:
        return policy.act(env, obs, info)

    async def render(self, env: Any) -> Any:
        return render_sync(env)

    async def generate(self, result: Any) -> Any:
        if inspect.isawaitable(result):
            raise RuntimeError("an async generate() in run_episode: use await arun_episode(...)")
        return result


class _AsyncFace(_SyncFace):
    async def reset(self, seed: int | None, options: dict[str, Any] | None) -> Any:
        return await self.env.areset(seed=seed, options=options)

    async def step(self, action: Any) -> Any:
        return await self.env.astep(action)

    async def act(self, policy: Policy, env: Any, obs: Any, info: dict[str, Any], timeout: float | None) -> Any:
        return await asyncio.wait_for(policy_act(policy, env, obs, info), timeout)

    async def render(self, env: Any) -> Any:
        return await render_async(env)

    async def generate(self, result: Any) -> Any:
        return await result if inspect.isawaitable(result) else result


def error_text(exc: BaseException) -> str:
    """The traceback of ``exc`` (what a trajectory keeps of a failure)."""
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def policy_name(policy: Any) -> str | None:
    return None if policy is None else getattr(policy, "name", type(policy).__name__)


async def _drive(
    face: _SyncFace,
    policy: Policy | None,
    *,
    env_id: str,
    seed: int | None,
    options: dict[str, Any] | None,
    sample: int,
    group: str | None,
    policy_timeout_s: float | None,
    screenshots: str | Path | None,
    tokens: TokenMode | None,
) -> Trajectory:
    env = face.env
    t0 = time.perf_counter()
    traj = Trajectory(env_id=env_id, seed=seed, sample=sample, group=group,
                      policy="tokens" if tokens is not None and policy is None else policy_name(policy))  # fmt: skip
    timings = traj.timings
    timings.update(reset_s=0.0, policy_s=0.0, env_s=0.0)
    track = TokenTrack(tokens.chat, tokens.budget, TokenData()) if tokens is not None else None
    if track is not None:
        traj.tokens = track.data
    context = getattr(policy, "context_limit", None) if tokens is None else None
    unwrapped: Any = None
    try:
        obs, info = await face.reset(seed, options)
        unwrapped = env.unwrapped
        traj.task_id = info.get("task_id")
        traj.task_meta = dict(info.get("task_meta") or {})
        if isinstance(obs, str):  # the first observation (the task as the model saw it), for reading runs
            traj.prompt = obs if len(obs) <= PROMPT_CHARS else obs[:PROMPT_CHARS] + " [...]"
        own_log = adopt_episode(traj, unwrapped)
        timings["reset_s"] = time.perf_counter() - t0
        shots = Screenshots.open(screenshots, traj, unwrapped)
        if shots is not None:
            shots.save(0, await face.render(unwrapped))
        if track is not None:
            track.start(unwrapped.messages)
            if tokens is not None and tokens.cap_prompt is not None:
                track.data.prompt_ids = list(tokens.cap_prompt(track.data.prompt_ids))
        while not traj.done:
            p0 = time.perf_counter()
            before = len(unwrapped.messages) if track is not None else 0
            try:
                if track is not None:
                    action = await _token_action(face, track, tokens, traj)  # type: ignore[arg-type]
                elif context is not None and context.overflows(unwrapped.messages):
                    _overflow(traj, context.overflow_reward)
                    action = None
                else:
                    action = await face.act(policy, unwrapped, obs, info, policy_timeout_s)  # type: ignore[arg-type]
            except ContextOverflow as exc:  # the model server says the history no longer fits: the model's fault
                _overflow(traj, context.overflow_reward if context is not None else 0.0, error_text(exc))
                break
            except Exception as exc:  # noqa: BLE001 - a failing or hung policy ends its own episode only
                # an exception may name its ending (an agent program's own failure: agent_error); else policy_error
                kind = getattr(exc, "termination", None)
                traj.end(kind if kind in Termination.ALL else Termination.POLICY_ERROR, error=error_text(exc))
                break
            p1 = time.perf_counter()
            timings["policy_s"] += p1 - p0
            if action is None:
                break
            if isinstance(action, Action) and action.sample is not None and action.sample.finish_reason == "length":
                traj.extra["cut_reply"] = action_text(action)[-2000:]
                traj.extra["cut_sampled"] = action.sample.to_dict()  # its tokens stay trainable (a policy face)
                traj.end(Termination.LENGTH)  # the reply was cut off: not stepped (it would only be a parse error)
                break
            out = await face.step(action)
            env_s = time.perf_counter() - p1
            timings["env_s"] += env_s
            record_step(traj, action, out, p1 - p0, env_s, own_log)
            obs, info = out[0], out[4]
            if track is not None and not traj.done:
                ending = track.add_env_turn(new_env_messages(env, before + 1))
                if ending is not None:
                    traj.end(ending)
            if shots is not None:
                shots.save(len(traj.turns), await face.render(unwrapped))
    except Exception as exc:  # noqa: BLE001 - an env failure is recorded, not raised
        traj.end(Termination.ENV_ERROR, error=error_text(exc))
    await _finish(policy, unwrapped, traj)
    timings["total_s"] = time.perf_counter() - t0
    return traj


async def _finish(policy: Any, env: Any, traj: Trajectory) -> None:
    """A policy's ``finish_episode(env, traj)`` (sync or async), once its episode ended however it ended: an agent
    program's calls closed and its tokens attached (``endpoint.AgentPolicy``). Its failure is kept, never raised."""
    finish = getattr(policy, "finish_episode", None)
    if finish is None:
        return
    try:
        result = finish(env, traj)
        if inspect.isawaitable(result):
            await result
    except Exception as exc:  # noqa: BLE001 - the episode is over; what failed is recorded with it
        traj.extra["finish_error"] = error_text(exc)


async def _token_action(face: _SyncFace, track: TokenTrack, mode: TokenMode, traj: Trajectory) -> Action | None:
    """Generate the next model turn from the token ids so far (``None``: the episode ended instead)."""
    ids = track.generation_input()
    max_new = mode.max_new(track.remaining)
    if mode.max_model_len is not None and len(ids) + max_new > mode.max_model_len:
        _overflow(traj, mode.overflow_reward)
        return None
    out_ids, logprobs, finish = split_output(await face.generate(mode.generate(ids, max_new)))
    text, ending = track.add_model_turn(out_ids, logprobs, finish, max_new)
    if ending is not None:
        traj.end(ending)
    if text is None:
        return None
    return Action(text, sample=Sample(token_ids=out_ids, logprobs=logprobs, finish_reason=finish))


def _overflow(traj: Trajectory, reward: float, error: str | None = None) -> None:
    traj.end(Termination.CONTEXT_LIMIT, error=error)
    if reward:
        traj.ledger.add({Termination.CONTEXT_LIMIT: reward}, source=Source.DRIVER)


def adopt_episode(traj: Trajectory, env: Any) -> bool:
    """Give ``traj`` the episode ``env`` (the unwrapped env, just reset) keeps: its turn log and its reward ledger,
    the same objects (new ones at every reset), so that each turn and each part of its reward is written once.
    Returns whether the driver keeps its own instead (the env keeps no turn log and ledger)."""
    turns, ledger = getattr(env, "turns", None), getattr(env, "ledger", None)
    if not isinstance(turns, list) or not isinstance(ledger, RewardLedger):
        return True
    traj.turns, traj.ledger = turns, ledger
    return False


def record_step(
    traj: Trajectory, action: Any, out: tuple[Any, ...], policy_s: float, env_s: float, own: bool = False
) -> None:
    """One step from what the outermost env returned: the turn is the env's own log entry, its reward as the env
    and its wrappers logged it is in the ledger already, and the driver adds what the outermost env returned beyond
    it (``own``: the env keeps no log and ledger, so the driver builds the turn from ``info`` and adds all of it)."""
    obs, reward, terminated, truncated, info = out
    components = dict(info.get("reward_components") or {})
    if own:
        traj.ledger.add_metrics(info.get("metrics"), info.get("reward_errors"))
    if info.get("score") is not None:
        traj.score = info["score"]
    if info.get("answer") is not None:
        traj.answer = info["answer"]
    turn = info.get("turn", len(traj.turns) + 1)
    entry: Any = traj.turns[-1] if traj.turns and traj.turns[-1].get("turn") == turn and not own else None
    if entry is None:
        entry = {"turn": turn, "action": action_text(action), "tool_calls": info.get("tool_calls", []),
                 "tool_results": info.get("tool_results", []), "observation": obs,
                 "action_error": info.get("action_error"), "answer": info.get("answer")}  # fmt: skip
        traj.turns.append(entry)
    set_turn_reward(entry, float(reward), components, traj.ledger, Source.OUTER)  # the outermost env's reward
    entry.update(policy_s=policy_s, env_s=env_s)
    sample = action.sample if isinstance(action, Action) else None
    if sample is not None:  # the policy's sampled tokens/logprobs (and model version) for this action
        entry["sampled"] = sample.to_dict()
    traj.terminated, traj.truncated = bool(terminated), bool(truncated)
    if terminated:
        traj.termination = Termination.ANSWER
    elif truncated:
        traj.termination = info.get("truncation_reason", Termination.TURN_LIMIT)


def run_now(coro: Coroutine[Any, Any, T]) -> T:
    """Drive a coroutine whose every await returns at once (a sync face) without an event loop: the one runner of
    the sync faces (this driver's, :class:`~aworld_gym.rollout.text_episode.SyncTextEpisode`'s)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("run_episode's sync face awaited something that did not return at once")


def run_episode(env: gym.Env[Any, Any], policy: Policy | None = None, **driver: Any) -> Trajectory:
    """Run one episode to its end on the env's sync face (``reset``/``step``); never raises for what the policy
    or the tools do. ``driver``: the keywords of :func:`arun_episode` (``policy_timeout_s`` needs the async face)."""
    if driver.get("policy_timeout_s") is not None:
        raise ValueError("policy_timeout_s needs the async face: await arun_episode(...)")
    return run_now(_drive(_SyncFace(env), policy, **_keywords(env, driver)))


def _keywords(env: Any, driver: dict[str, Any]) -> dict[str, Any]:
    known = ("env_id", "seed", "options", "sample", "group", "policy_timeout_s", "screenshots", "tokens")
    unknown = set(driver) - set(known)
    if unknown:
        raise TypeError(f"unknown keyword(s) of the episode driver: {sorted(unknown)}")
    out = {k: driver.get(k) for k in known}
    out["env_id"] = out["env_id"] or _name(env)
    out["sample"] = out["sample"] or 0
    return out


async def arun_episode(
    env: gym.Env[Any, Any],
    policy: Policy | None = None,
    *,
    env_id: str = "",
    seed: int | None = None,
    options: dict[str, Any] | None = None,
    sample: int = 0,
    group: str | None = None,
    policy_timeout_s: float | None = None,
    screenshots: str | Path | None = None,
    tokens: TokenMode | None = None,
) -> Trajectory:
    """Run one episode on the env's async face (``areset``/``astep`` of the outermost env, wrappers included);
    many run on one loop. A wrapper without an async face raises
    :class:`~aworld_gym.core.faces.AsyncFaceError` before the episode starts.

    Args:
        env: the env (the outermost one is driven).
        policy: what acts (``act``/``aact``); not needed in token mode.
        env_id: the name the trajectory carries (default: the env's spec id).
        seed, options: ``reset``'s.
        sample, group: the sample index and GRPO group key the trajectory carries.
        policy_timeout_s: a policy turn that takes longer ends the episode as ``policy_error``.
        screenshots: a folder; an env with ``render_mode="rgb_array"`` or image observations gets a PNG per step
            there (``<episode_id>/<turn>.png``, turn 0 after reset), named in each turn's ``screenshot``.
        tokens: token mode (see :class:`~aworld_gym.rollout.tokens.TokenMode`).
    """
    env = async_face(env)
    driver = {"env_id": env_id, "seed": seed, "options": options, "sample": sample, "group": group,
              "policy_timeout_s": policy_timeout_s, "screenshots": screenshots, "tokens": tokens}  # fmt: skip
    return await _drive(_AsyncFace(env), policy, **_keywords(env, driver))


def _name(env: Any) -> str:
    spec = getattr(env, "spec", None)
    return getattr(spec, "id", None) or ""
