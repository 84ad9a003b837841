"""Run whole episodes (sync or async) and turn them into trajectory records."""

from __future__ import annotations

import asyncio
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import gymnasium as gym

from aworld_gym.core.actions import Action, action_text
from aworld_gym.core.faces import check_async
from aworld_gym.rollout.policies import Policy, policy_act

PROMPT_CHARS = 8000  # the first observation kept in a record, at most


class EpisodeRecorder:
    """Accumulates one episode's turns, totals and timings into its trajectory record."""

    def __init__(self, env_id: str, policy: Policy, seed: int | None, sample: int) -> None:
        self.t0 = time.perf_counter()
        self.record: dict[str, Any] = {
            "episode_id": uuid.uuid4().hex,
            "env_id": env_id,
            "task_id": None,
            "seed": seed,
            "sample": sample,
            "policy": None if policy is None else getattr(policy, "name", type(policy).__name__),
            "started_at": time.time(),
        }
        self.turns: list[dict[str, Any]] = []
        self.total_reward = 0.0
        self.totals: dict[str, float] = {}
        self.metrics: dict[str, float] = {}
        self.reward_errors: dict[str, str] = {}
        self.terminated = self.truncated = False
        self.termination: str | None = None
        self.score: float | None = None
        self.answer: str | None = None
        self.error: str | None = None
        self.reset_s = self.policy_s = self.env_s = 0.0

    def reset_done(self, info: dict[str, Any], obs: Any = None) -> None:
        self.record["task_id"] = info.get("task_id")
        self.record["task_meta"] = dict(info.get("task_meta") or {})
        if isinstance(obs, str):  # the first observation (the task as the model saw it), for reading runs
            self.record["prompt"] = obs if len(obs) <= PROMPT_CHARS else obs[:PROMPT_CHARS] + " [...]"
        self.reset_s = time.perf_counter() - self.t0

    def step_done(
        self, action: str | Action, out: tuple[Any, ...], policy_s: float, env_s: float, env: Any = None
    ) -> None:
        """Record one step from what the outermost env returned; the turn's details come from the env's own turn
        log (``env.unwrapped.turns``) when it keeps one."""
        obs, reward, terminated, truncated, info = out
        self.policy_s += policy_s
        self.env_s += env_s
        self.total_reward += float(reward)
        components = info.get("reward_components", {})
        for k, v in components.items():
            self.totals[k] = self.totals.get(k, 0.0) + v
        for k, v in (info.get("metrics") or {}).items():
            self.metrics[k] = self.metrics.get(k, 0.0) + v
        if info.get("reward_errors"):
            self.reward_errors.update(info["reward_errors"])
        if info.get("score") is not None:
            self.score = info["score"]
        if info.get("answer") is not None:
            self.answer = info["answer"]
        turn = info.get("turn", len(self.turns) + 1)
        log = getattr(env, "turns", None) if env is not None else None
        entry = log[-1] if log and log[-1].get("turn") == turn else None
        if entry is not None:
            row = {k: v for k, v in entry.items() if k not in ("messages", "step_time_s")}
        else:
            row = {"turn": turn, "action": action_text(action), "tool_calls": info.get("tool_calls", []),
                   "tool_results": info.get("tool_results", []), "observation": obs,
                   "action_error": info.get("action_error"), "answer": info.get("answer")}  # fmt: skip
        # What the outermost env (wrappers included) returned is the turn's reward.
        row.update(reward=float(reward), reward_components=components, policy_s=policy_s, env_s=env_s)
        self.turns.append(row)
        sample = action.sample if isinstance(action, Action) else None
        if sample is not None:  # the policy's sampled tokens/logprobs (and model version) for this action
            self.turns[-1]["sampled"] = sample.to_dict()
        self.terminated, self.truncated = bool(terminated), bool(truncated)
        if terminated:
            self.termination = "answer"
        elif truncated:
            self.termination = info.get("truncation_reason", "turn_limit")

    def failed(self, kind: str, exc: BaseException) -> None:
        self.termination = kind
        self.error = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]
        if kind != "policy_error":
            self.truncated = True

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated or self.termination is not None

    def finish(self) -> dict[str, Any]:
        self.record.update(
            {
                "turns": self.turns,
                "num_turns": len(self.turns),
                # what the outermost env returned (a Gymnasium reward wrapper's transform shows here, not in the
                # components, which are the env's and our wrappers')
                "reward": self.total_reward,
                "reward_components": self.totals,
                "metrics": self.metrics,
                "reward_errors": self.reward_errors,
                "score": self.score,
                "answer": self.answer,
                "terminated": self.terminated,
                "truncated": self.truncated or self.termination in ("policy_error", "env_error", "env_crash"),
                "termination": self.termination,
                "error": self.error,
                "timings": {
                    "reset_s": self.reset_s,
                    "policy_s": self.policy_s,
                    "env_s": self.env_s,
                    "total_s": time.perf_counter() - self.t0,
                },
            }
        )
        return self.record


def run_episode(
    env: gym.Env[str, str],
    policy: Policy,
    *,
    env_id: str,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
    sample: int = 0,
    screenshots: str | Path | None = None,
) -> dict[str, Any]:
    """Run one episode to its end; never raises for what the policy or the tools do.

    Returns the trajectory record: ids, every turn (action, parsed calls, tool results, observation, reward
    and its components, timings), the totals, and how the episode ended (``termination``: ``answer`` or the
    truncation reason, or ``policy_error`` / ``env_error`` with the traceback in ``error``).

    ``screenshots``: a folder; an env with ``render_mode="rgb_array"`` or image observations (Browser-v0's
    screenshot modes: the image the model saw is the one kept) then gets a PNG per step there
    (``<episode_id>/<turn>.png``, turn 0 after reset), named in each turn's ``screenshot``.
    """
    rec = EpisodeRecorder(env_id, policy, seed, sample)
    try:
        obs, info = env.reset(seed=seed, options=options)
        rec.reset_done(info, obs)
        unwrapped = env.unwrapped
        shots = Screenshots.open(screenshots, rec, unwrapped)
        if shots is not None:
            shots.save(0, _render_sync(unwrapped))
        while not rec.done:
            p0 = time.perf_counter()
            try:
                action = policy.act(unwrapped, obs, info)
            except Exception as exc:  # noqa: BLE001 - a failing policy ends its own episode only
                rec.failed("policy_error", exc)
                break
            p1 = time.perf_counter()
            out = env.step(action)
            rec.step_done(action, out, p1 - p0, time.perf_counter() - p1, unwrapped)
            obs, info = out[0], out[4]
            if shots is not None:
                shots.save(len(rec.turns), _render_sync(unwrapped))
    except Exception as exc:  # noqa: BLE001 - an env failure outside step() is recorded, not raised
        rec.failed("env_error", exc)
    return rec.finish()


async def arun_episode(
    env: gym.Env[str, str],
    policy: Policy,
    *,
    env_id: str,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
    sample: int = 0,
    policy_timeout_s: float | None = None,
    screenshots: str | Path | None = None,
) -> dict[str, Any]:
    """Async :func:`run_episode` on the env's async face (``areset``/``astep`` of the outermost env, wrappers
    included); many run on one loop. A wrapper without an async face raises
    :class:`~aworld_gym.core.faces.AsyncFaceError` before the episode starts. A policy that does not answer within
    ``policy_timeout_s`` ends the episode as ``policy_error``.
    """
    check_async(env)
    rec = EpisodeRecorder(env_id, policy, seed, sample)
    unwrapped: Any = env.unwrapped
    try:
        obs, info = await env.areset(seed=seed, options=options)  # type: ignore[attr-defined]
        rec.reset_done(info, obs)
        shots = Screenshots.open(screenshots, rec, unwrapped)
        if shots is not None:
            shots.save(0, await _render_async(unwrapped))
        while not rec.done:
            p0 = time.perf_counter()
            try:
                action = await asyncio.wait_for(policy_act(policy, unwrapped, obs, info), policy_timeout_s)
            except Exception as exc:  # noqa: BLE001 - a failing or hung policy ends its own episode only
                rec.failed("policy_error", exc)
                break
            p1 = time.perf_counter()
            out = await env.astep(action)  # type: ignore[attr-defined]
            rec.step_done(action, out, p1 - p0, time.perf_counter() - p1, unwrapped)
            obs, info = out[0], out[4]
            if shots is not None:
                shots.save(len(rec.turns), await _render_async(unwrapped))
    except Exception as exc:  # noqa: BLE001 - an env failure outside step() is recorded, not raised
        rec.failed("env_error", exc)
    return rec.finish()


class Screenshots:
    """Writes an episode's frames as PNG files and names them in its record (a failed frame is noted, not raised)."""

    def __init__(self, folder: Path, rec: EpisodeRecorder) -> None:
        self.folder = folder / rec.record["episode_id"]
        self.rec = rec

    @classmethod
    def open(cls, folder: str | Path | None, rec: EpisodeRecorder, env: Any) -> Screenshots | None:
        if folder is None or not (getattr(env, "render_mode", None) == "rgb_array" or image_observations(env)):
            return None
        return cls(Path(folder), rec)

    def save(self, turn: int, frame: Any) -> None:
        """Write ``frame`` (an RGB array, or PNG bytes: an observation image as the model saw it)."""
        from PIL import Image

        if frame is None:
            return
        where = self.rec.turns[-1] if turn else self.rec.record
        path = self.folder / f"{turn:03d}.png"
        if not isinstance(frame, BaseException):
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                if isinstance(frame, bytes):
                    path.write_bytes(frame)
                else:
                    Image.fromarray(frame).save(path)
                where["screenshot"] = str(path)
                return
            except Exception as exc:  # noqa: BLE001 - a missing frame is noted; the episode goes on
                frame = exc
        where["screenshot_error"] = f"{type(frame).__name__}: {frame}"


def image_observations(env: Any) -> bool:
    """Whether the env shows the model images (its observation then has PNGs in ``observation_images``)."""
    return bool(getattr(env, "image_observations", False))


def _render_sync(env: Any) -> Any:
    if image_observations(env):
        return next(iter(getattr(env, "observation_images", None) or []), None)  # none: the step ended the task
    try:
        return env.render()
    except Exception as exc:  # noqa: BLE001 - a missing frame must not end the episode
        return exc


async def _render_async(env: Any) -> Any:
    if image_observations(env):
        return _render_sync(env)
    try:
        shot = getattr(env, "ascreenshot", None)
        return await shot() if shot is not None else await asyncio.to_thread(env.render)
    except Exception as exc:  # noqa: BLE001 - a missing frame must not end the episode
        return exc
