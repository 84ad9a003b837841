"""RayVectorEnv: a Gymnasium ``VectorEnv`` whose sub-envs are Ray actors (on one machine or a cluster).

Registered as every AWorld id's ``vector_entry_point``::

    envs = gym.make_vec("AWorld/Code-v0", num_envs=32, vectorization_mode="vector_entry_point")

Autoreset follows Gymnasium's default ``NEXT_STEP`` mode (declared in ``metadata["autoreset_mode"]``). A sub-env's
exception is re-raised in the driver with its index and traceback; a dead actor is replaced, and the episode it was
running is reported as truncated with ``info["truncation_reason"] == "env_crash"`` (its observation is the new
actor's reset observation).
"""

from __future__ import annotations

import traceback
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from aworld_gym.core.trajectory import Termination
from aworld_gym.rollout.envs import EnvLike, env_factory, env_name


class SubEnvActor:
    """Holds one env made with ``gym.make``; every call returns ``("ok", value)`` or ``("error", traceback)``."""

    def __init__(self, make: Any) -> None:
        import aworld_gym  # noqa: F401 - registers the ids in this worker process

        self.env = make()  # the outermost env, wrappers included: every call goes through them

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
        try:
            return "ok", fn(*args, **kwargs)
        except Exception:  # noqa: BLE001 - sent to the driver, which re-raises it with the env index
            return "error", traceback.format_exc()

    def reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[str, Any]:
        return self._call(self.env.reset, seed=seed, options=options)

    def step(self, action: str) -> tuple[str, Any]:
        return self._call(self.env.step, action)

    def pid(self) -> int:
        import os

        return os.getpid()

    def close(self) -> None:
        self.env.close()


class RayVectorEnv(VectorEnv):
    """``num_envs`` copies of an env, each in its own Ray actor.

    Args:
        num_envs: how many sub-envs.
        env_id: the registered id (bound by the registration's ``vector_entry_point``), or a picklable zero-argument
            factory returning an env, wrappers included (``env_fns`` style).
        ray_address: the Ray cluster to join (``None``: a private local one; ``"auto"``: the running one).
        num_cpus: CPUs reserved per actor (0 by default: tool-bound envs).
        **kwargs: passed to ``gym.make`` for each sub-env.
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}  # noqa: RUF012

    def __init__(
        self, num_envs: int, env_id: EnvLike, ray_address: str | None = None, num_cpus: float = 0, **kwargs: Any
    ) -> None:
        from aworld_gym.rollout.engines.ray_engine import init_ray

        super().__init__()
        self.make = env_factory(env_id, kwargs)
        self.ray = init_ray(ray_address)
        self.kwargs, self.num_envs = kwargs, num_envs
        self.autoreset_mode = AutoresetMode.NEXT_STEP
        self.metadata = {"autoreset_mode": self.autoreset_mode, "render_modes": []}
        probe = self.make()  # before any actor: a bad config fails here, with nothing to clean up
        try:
            self.env_id = env_name(env_id, probe)
            self.single_observation_space = probe.observation_space
            self.single_action_space = probe.action_space
        finally:
            probe.close()
        self._remote = self.ray.remote(num_cpus=num_cpus, max_restarts=0)(SubEnvActor)
        self.actors = [self._spawn(i) for i in range(num_envs)]
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._observations = create_empty_array(self.single_observation_space, n=num_envs, fn=np.zeros)
        self._autoreset = np.zeros(num_envs, dtype=np.bool_)
        self._pending: list[Any] | None = None
        self._kinds: list[str] = []
        self.replaced = 0
        self.closed = False

    def _spawn(self, i: int) -> Any:
        from aworld_gym.rollout.engines.ray_engine import spread

        return self._remote.options(scheduling_strategy=spread(i)).remote(self.make)

    # ----- reset -----------------------------------------------------------------------------------------
    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        seeds = _seeds(seed, self.num_envs)
        refs = [a.reset.remote(s, options) for a, s in zip(self.actors, seeds, strict=True)]
        results = [self._get(i, ref, "reset") for i, ref in enumerate(refs)]
        obs, infos = [], {}
        for i, (o, info) in enumerate(results):
            obs.append(o)
            infos = self._add_info(infos, info, i)
        self._autoreset[:] = False
        self._observations = concatenate(self.single_observation_space, obs, self._observations)
        return self._observations, infos

    # ----- step ------------------------------------------------------------------------------------------
    def step_async(self, actions: Any) -> None:
        """Send one action per sub-env (sub-envs that ended last step are reset instead: NEXT_STEP)."""
        if self._pending is not None:
            raise gym.error.AlreadyPendingCallError("step_async called twice without step_wait", "step")
        actions = list(actions)
        if len(actions) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} actions, got {len(actions)}")
        self._kinds = ["reset" if self._autoreset[i] else "step" for i in range(self.num_envs)]
        self._pending = [
            a.reset.remote(None, None) if kind == "reset" else a.step.remote(action)
            for a, kind, action in zip(self.actors, self._kinds, actions, strict=True)
        ]

    def step_wait(self, timeout: float | None = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Wait for the results of :meth:`step_async` (``TimeoutError`` after ``timeout`` seconds)."""
        if self._pending is None:
            raise gym.error.NoAsyncCallError("step_wait called without step_async", "step")
        refs, self._pending = self._pending, None
        if timeout is not None:
            ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=timeout)
            if len(ready) < len(refs):
                self._pending = refs
                raise TimeoutError(f"step_wait: {len(refs) - len(ready)} sub-envs did not answer within {timeout} s")
        obs: list[Any] = []
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terms = np.zeros(self.num_envs, dtype=np.bool_)
        truncs = np.zeros(self.num_envs, dtype=np.bool_)
        infos: dict[str, Any] = {}
        for i, ref in enumerate(refs):
            kind = self._kinds[i]
            try:
                value = self._get(i, ref, kind, replace=False)
            except _ActorDied as dead:
                o, info = self._replace(i, dead)
                obs.append(o)
                truncs[i] = kind == "step"
                infos = self._add_info(
                    infos, {**info, "truncation_reason": Termination.ENV_CRASH} if kind == "step" else info, i
                )
                continue
            if kind == "reset":
                o, info = value
                obs.append(o)
            else:
                o, r, te, tr, info = value
                obs.append(o)
                rewards[i], terms[i], truncs[i] = float(r), bool(te), bool(tr)
            infos = self._add_info(infos, info, i)
        self._autoreset = np.logical_or(terms, truncs)
        self._observations = concatenate(self.single_observation_space, obs, self._observations)
        return self._observations, rewards, terms, truncs, infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        self.step_async(actions)
        return self.step_wait()

    # ----- helpers ---------------------------------------------------------------------------------------
    def _get(self, i: int, ref: Any, what: str, replace: bool = True) -> Any:
        from ray.exceptions import RayActorError

        try:
            status, value = self.ray.get(ref)
        except RayActorError as exc:
            if not replace:
                raise _ActorDied(str(exc)) from exc
            return self._replace(i, _ActorDied(str(exc)))
        if status == "error":
            raise RuntimeError(f"sub-env {i} of {self.env_id} raised in {what}():\n{value}")
        return value

    def _replace(self, i: int, dead: _ActorDied) -> tuple[Any, dict[str, Any]]:
        """A new actor for sub-env ``i``; returns its reset (observation, info)."""
        self.actors[i] = self._spawn(i)
        self.replaced += 1
        status, value = self.ray.get(self.actors[i].reset.remote(None, None))
        if status == "error":
            raise RuntimeError(f"sub-env {i} of {self.env_id} could not be restarted after its actor died:\n{value}")
        o, info = value
        return o, {**info, "env_crash": str(dead)[:500]}

    def kill_actor(self, i: int) -> None:
        """Kill sub-env ``i``'s actor (fault injection for tests)."""
        self.ray.kill(self.actors[i], no_restart=True)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        raise NotImplementedError("RayVectorEnv does not forward arbitrary calls; use the sub-env's own API")

    def close_extras(self, **kwargs: Any) -> None:
        if self.closed:
            return
        self.closed = True
        refs = [a.close.remote() for a in self.actors]
        self.ray.wait(refs, num_returns=len(refs), timeout=60)  # every live actor closes its env first
        for a in self.actors:
            self.ray.kill(a)


class _ActorDied(Exception):
    pass


def _seeds(seed: int | list[int | None] | None, n: int) -> list[int | None]:
    if seed is None:
        return [None] * n
    if isinstance(seed, int):
        return [seed + i for i in range(n)]
    if len(seed) != n:
        raise ValueError(f"expected {n} seeds, got {len(seed)}")
    return list(seed)
