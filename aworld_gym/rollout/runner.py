"""Run whole episodes and turn them into trajectory records."""

from __future__ import annotations

import time
import traceback
import uuid
from typing import Any

import gymnasium as gym

from aworld_gym.rollout.policies import Policy


def run_episode(
    env: gym.Env[str, str],
    policy: Policy,
    *,
    env_id: str,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
    sample: int = 0,
) -> dict[str, Any]:
    """Run one episode to its end; never raises for what the policy or the tools do.

    Returns the trajectory record: ids, every turn (action, parsed calls, tool results, observation, reward
    and its components, timings), the totals, and how the episode ended (``termination``: ``answer`` or the
    truncation reason, or ``policy_error`` / ``env_error`` with the traceback in ``error``).
    """
    started = time.time()
    t0 = time.perf_counter()
    record: dict[str, Any] = {
        "episode_id": uuid.uuid4().hex,
        "env_id": env_id,
        "task_id": None,
        "seed": seed,
        "sample": sample,
        "policy": getattr(policy, "name", type(policy).__name__),
        "started_at": started,
    }
    turns: list[dict[str, Any]] = []
    totals: dict[str, float] = {}
    terminated = truncated = False
    termination: str | None = None
    score = None
    error = None
    policy_s = env_s = 0.0
    try:
        obs, info = env.reset(seed=seed, options=options)
        record["task_id"] = info.get("task_id")
        reset_s = time.perf_counter() - t0
        unwrapped = env.unwrapped
        while not (terminated or truncated):
            p0 = time.perf_counter()
            try:
                action = policy.act(unwrapped, obs, info)
            except Exception as exc:  # noqa: BLE001 - a failing policy ends its own episode only
                termination, error = "policy_error", _describe(exc)
                policy_s += time.perf_counter() - p0
                break
            p1 = time.perf_counter()
            obs, reward, terminated, truncated, info = env.step(action)
            p2 = time.perf_counter()
            policy_s += p1 - p0
            env_s += p2 - p1
            for k, v in info.get("reward_components", {}).items():
                totals[k] = totals.get(k, 0.0) + v
            if info.get("score") is not None:
                score = info["score"]
            turns.append(
                {
                    "turn": info.get("turn", len(turns) + 1),
                    "action": action,
                    "tool_calls": info.get("tool_calls", []),
                    "tool_results": info.get("tool_results", []),
                    "observation": obs,
                    "reward": float(reward),
                    "reward_components": info.get("reward_components", {}),
                    "action_error": info.get("action_error"),
                    "policy_s": p1 - p0,
                    "env_s": p2 - p1,
                }
            )
            if terminated:
                termination = "answer"
            elif truncated:
                termination = info.get("truncation_reason", "turn_limit")
    except Exception as exc:  # noqa: BLE001 - an env failure outside step() is recorded, not raised
        termination, error = "env_error", _describe(exc)
        reset_s = locals().get("reset_s", time.perf_counter() - t0)
        truncated = True
    record.update(
        {
            "turns": turns,
            "num_turns": len(turns),
            "reward": float(sum(totals.values())),
            "reward_components": totals,
            "score": score,
            "terminated": terminated,
            "truncated": truncated or termination in ("policy_error", "env_error"),
            "termination": termination,
            "error": error,
            "timings": {
                "reset_s": reset_s,
                "policy_s": policy_s,
                "env_s": env_s,
                "total_s": time.perf_counter() - t0,
            },
        }
    )
    return record


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]
