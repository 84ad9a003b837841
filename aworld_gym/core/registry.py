"""What an env id declares beside its Gymnasium registration: its reference policy and its machine share.

``aworld_gym.register`` fills this table (the package root registers the built-in ids at import); the layers above
core read it here, so nothing below the package root imports the root for it:

- ``make_policy("reference", env_id)`` builds the id's reference policy (a scripted solver);
- the engines that run episodes in several processes on one machine (a process engine's workers, a node's Ray
  actors) ask :func:`worker_environ` for the environment of each worker. An env whose gate is per process (the
  browser env lets only so many envs drive their browser at once) declares a *worker share*: a function
  ``(processes, cpus) -> {variable: value}`` that gives each of ``processes`` workers its part of the machine, so
  the workers together take the machine's slots once, not once each.

A target is the object itself or a ``"module:attr"`` string, imported on first use (registration stays light).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

Target = str | Callable[..., Any]

# env id -> reference policy (a class or factory taking ``latency_s``), for ids that have one
REFERENCE_POLICIES: dict[str, Target] = {}
# env id -> worker share ``(processes: int, cpus: float | None) -> dict[str, str]``, for ids that declare one
WORKER_SHARES: dict[str, Target] = {}
# every id declared here (with or without a policy or share)
DECLARED: set[str] = set()


def declare(env_id: str, *, reference_policy: Target | None = None, worker_share: Target | None = None) -> None:
    """Declare (or re-declare: what is not given is dropped) what ``env_id`` brings beside its registration."""
    DECLARED.add(env_id)
    for table, value in ((REFERENCE_POLICIES, reference_policy), (WORKER_SHARES, worker_share)):
        if value is None:
            table.pop(env_id, None)
        else:
            table[env_id] = value


def reference_policy(env_id: str) -> Target | None:
    """The reference policy registered with ``env_id`` (``None`` if it has none)."""
    return REFERENCE_POLICIES.get(env_id)


def load(target: Target) -> Any:
    """``target`` itself, or the attribute a ``"module:attr"`` string names."""
    if not isinstance(target, str):
        return target
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def worker_environ(env_id: str | None, processes: int, cpus: float | None = None) -> dict[str, str]:
    """The environment variables of one of ``processes`` worker processes on a machine with ``cpus`` CPUs (``None``:
    this process's) that run episodes of ``env_id``: the id's declared worker share. For ``None`` or a name that was
    not declared (a warm pool started before its runs, a factory's name: the engine cannot know the env before it
    makes one), the shares of every declared id, so a factory of a browser env still splits the machine's browser
    slots."""
    if env_id in DECLARED:
        shares = [WORKER_SHARES[env_id]] if env_id in WORKER_SHARES else []
    else:
        shares = list(WORKER_SHARES.values())
    environ: dict[str, str] = {}
    for share in shares:
        environ.update(load(share)(processes, cpus))
    return environ
