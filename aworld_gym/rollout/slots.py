"""The env slot: the one place where an engine makes, reuses, replaces and closes an env.

Both engines run slots: in-process, ``concurrency`` slots on one event loop; on Ray, each actor runs its own slots
the same way. A slot makes its env lazily (in a worker thread), runs one job at a time on it, replaces it after an
``env_error`` (a broken env is never reused) and closes it quietly. It never raises for what an episode does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aworld_gym.rollout.jobs import Job, failed_record
from aworld_gym.rollout.policies import Policy
from aworld_gym.rollout.runner import arun_episode


class Slot:
    """One env (made on first use) and one policy.

    Args:
        env_id: the name the records carry.
        make: a zero-argument factory returning the env (the outermost one is driven).
        policy: the slot's policy.
        policy_timeout_s: a policy turn that takes longer ends its episode as ``policy_error``.
        screenshots: a folder for a PNG per step (envs made with ``render_mode="rgb_array"``).
    """

    def __init__(
        self,
        env_id: str,
        make: Callable[[], Any],
        policy: Policy,
        policy_timeout_s: float | None = None,
        screenshots: str | Path | None = None,
    ) -> None:
        self.env_id, self.make, self.policy = env_id, make, policy
        self.policy_timeout_s, self.screenshots = policy_timeout_s, screenshots
        self.env: Any = None
        self.made = 0

    async def run(self, job: Job, task_id: str | None = None) -> dict[str, Any]:
        """Run ``job`` as one episode and return its record (a failed env start is an ``env_error`` record)."""
        if self.env is None:
            try:
                self.env = await asyncio.to_thread(self.make)
                self.made += 1
            except Exception as exc:  # noqa: BLE001 - this episode is recorded as failed; the slot stays usable
                return failed_record(self.env_id, job, task_id, "env_error", exc, self.policy)
        record = await arun_episode(
            self.env,
            self.policy,
            env_id=self.env_id,
            seed=job.seed,
            options={"task_index": job.task_index},
            sample=job.sample,
            policy_timeout_s=self.policy_timeout_s,
            screenshots=self.screenshots,
        )
        if record.get("task_id") is None:
            record["task_id"] = task_id  # reset failed before the env could name its task
        if record["termination"] == "env_error":  # a broken env is replaced, not reused
            await self.close()
        return record

    async def close(self) -> None:
        """Close the slot's env (its sessions and server processes), quietly."""
        env, self.env = self.env, None
        if env is not None:
            try:
                await env.aclose()
            except Exception:  # noqa: BLE001 - closing a broken env must not stop the run
                pass
