"""Many Browser-v0 envs at once on one event loop, with faults: the harness of ``benchmarks/browser_scale.py`` and of
its test.

:class:`Fleet` makes ``n`` envs (shared browser mode: they spread over browsers of ``contexts_per_browser`` contexts
each) and runs a plan: per env, a list of episodes (task, seed, fault or ``None``), the envs concurrently, each
episode through the rollout driver (:func:`~aworld_gym.rollout.driver.arun_episode`) with the reference policy.
An episode that ends ``void`` is run again when ``retry_void`` allows (never with its fault); an env whose reset
failed (``env_error``) is closed and replaced, as the rollout engines' env pool does. Each episode's record says
which faults reached it: the fault it carried (``renderer``, ``hang``: only its own page), and for ``browser`` and
``server`` every episode in flight on the same browser when the fault struck.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym

from aworld_gym.base.errors import last_line
from aworld_gym.core.faces import async_face
from aworld_gym.core.trajectory import Termination, Trajectory
from aworld_gym.envs.browser.faults import WIDE, FaultPolicy
from aworld_gym.rollout.driver import arun_episode
from aworld_gym.rollout.pool import close_quietly

Planned = tuple[str, int, str | None]  # task, seed, fault


@dataclass
class Episode:
    """One planned episode, as it ended (its last attempt).

    Attributes:
        slot: the env that ran it. task, seed: what was run. fault: the fault this episode carried (injected at
            its first turn). hit_by: the faults that reached it. status, termination, score: the last attempt's
            ending. first_status: the first attempt's. attempts: how many ran. reset_s, steps_s: the last
            attempt's reset and step times (env time, the policy excluded). error: the last attempt's error.
            tool_errors: the last attempt's failed tool calls (kind and text, up to 1,000 characters).
    """

    slot: int
    task: str
    seed: int
    fault: str | None = None
    hit_by: list[str] = field(default_factory=list)
    status: str = ""
    first_status: str = ""
    termination: str | None = None
    score: float | None = None
    attempts: int = 0
    reset_s: float | None = None
    steps_s: list[float] = field(default_factory=list)
    error: str | None = None
    tool_errors: list[str] = field(default_factory=list)
    end: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_episodes(n_envs: int, per_env: int, tasks: Sequence[str], faults: dict[int, str] | None = None,
                  first_seed: int = 0) -> list[list[Planned]]:  # fmt: skip
    """Per env, ``per_env`` episodes over ``tasks`` round-robin (seed ``first_seed + 1000 k + e`` for env ``k``'s
    episode ``e``); ``faults`` maps a global episode index (``e * n_envs + k``) to the fault it carries."""
    faults = faults or {}
    return [[(tasks[(e * n_envs + k) % len(tasks)], first_seed + 1000 * k + e, faults.get(e * n_envs + k))
             for e in range(per_env)] for k in range(n_envs)]  # fmt: skip


class Fleet:
    """``n`` Browser-v0 envs and the episodes they run (see the module's docstring).

    Args:
        n: how many envs.
        env_kwargs: ``gym.make`` keywords (``tasks`` included).
        retry_void: how many times a void episode is run again.
        make_concurrency: envs made at once (in worker threads).
        on_episode: called with each finished :class:`Episode`.
    """

    def __init__(self, n: int, env_kwargs: dict[str, Any], retry_void: int = 0, make_concurrency: int = 8,
                 on_episode: Callable[[Episode], None] | None = None) -> None:  # fmt: skip
        self.n, self.env_kwargs, self.retry_void = n, dict(env_kwargs), retry_void
        self.make_concurrency = make_concurrency
        self.on_episode = on_episode
        self.envs: list[Any] = []
        self.policy = FaultPolicy(on_fault=self._struck)
        self.episodes: list[Episode] = []
        self.replaced = 0  # envs closed after a failed reset and made again
        self._in_flight: dict[int, Episode] = {}

    def _make(self) -> Any:
        return async_face(gym.make("AWorld/Browser-v0", **self.env_kwargs))

    async def open(self) -> None:
        """Make the envs (``make_concurrency`` at a time)."""
        gate = asyncio.Semaphore(self.make_concurrency)

        async def one() -> Any:
            async with gate:
                return await asyncio.to_thread(self._make)

        made = await asyncio.gather(*(one() for _ in range(self.n)), return_exceptions=True)
        self.envs = [e for e in made if not isinstance(e, BaseException)]
        errors = [e for e in made if isinstance(e, BaseException)]
        if errors:
            await self.close()
            raise errors[0]

    def browsers(self) -> list[Any]:
        """The distinct shared browsers (Playwright MCP servers) the envs are on."""
        out: list[Any] = []
        for env in self.envs:
            server = env.unwrapped.local_server("browser")
            if server is not None and all(server is not s for s in out):
                out.append(server)
        return out

    async def run(self, plan: list[list[Planned]]) -> list[Episode]:
        """Run ``plan`` (one list per env, see :func:`plan_episodes`), the envs concurrently; the episodes, in the
        order they ended."""
        start = len(self.episodes)
        await asyncio.gather(*(self._slot(k, plan[k]) for k in range(min(len(plan), len(self.envs)))))
        return self.episodes[start:]

    async def close(self) -> None:
        """Close every env (their browsers stop with the last one)."""
        envs, self.envs = self.envs, []
        await asyncio.gather(*(close_quietly(e) for e in envs))

    # ----- internals -----------------------------------------------------------------------------------------
    async def _slot(self, k: int, episodes: list[Planned]) -> None:
        for task, seed, fault in episodes:
            await self._episode(k, task, seed, fault)

    async def _episode(self, k: int, task: str, seed: int, fault: str | None) -> None:
        rec = Episode(slot=k, task=task, seed=seed, fault=fault)
        for attempt in range(self.retry_void + 1):
            env = self.envs[k]
            self._in_flight[k] = rec
            if fault is not None and attempt == 0:
                self.policy.arm(env, fault)
            try:
                traj = await arun_episode(env, self.policy, seed=seed, options={"task_id": task})
            finally:
                self._in_flight.pop(k, None)
                self.policy.disarm(env)
            self._record(rec, traj, attempt)
            if traj.termination == Termination.ENV_ERROR:  # its reset failed: a new env, as the env pool does
                await close_quietly(env)
                self.envs[k] = await asyncio.to_thread(self._make)
                self.replaced += 1
            if not traj.void:
                break
        rec.end = time.monotonic()
        self.episodes.append(rec)
        if self.on_episode is not None:
            self.on_episode(rec)

    @staticmethod
    def _record(rec: Episode, traj: Trajectory, attempt: int) -> None:
        rec.attempts = attempt + 1
        rec.status, rec.termination, rec.score = traj.status, traj.termination, traj.score
        rec.first_status = rec.first_status or traj.status
        rec.reset_s = traj.timings.get("reset_s")
        rec.steps_s = [float(t.get("env_s", 0.0)) for t in traj.turns]
        rec.error = last_line(traj.error) or None
        results = [r for t in traj.turns for r in t.get("tool_results", [])]
        rec.tool_errors = [f"{r.get('error')}: {str(r.get('text', ''))[:1000]}" for r in results if r.get("error")]

    def _struck(self, env: Any, record: dict[str, Any]) -> None:
        """A fault was injected into ``env``'s episode: mark the episodes it reaches."""
        kind = record["fault"]
        for k, rec in list(self._in_flight.items()):
            target = self.envs[k].unwrapped
            same_browser = getattr(target.local_server("browser"), "marker", None) == record["server"]
            if target is env or (kind in WIDE and same_browser):
                rec.hit_by.append(kind)
