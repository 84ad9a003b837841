"""What an env id declares beside its Gymnasium registration: its reference policy and its machine share.

``aworld_gym.register`` fills this table (the package root registers the built-in ids at import); the layers above
core read it here, so nothing below the package root imports the root for it:

- ``make_policy("reference", env_id)`` builds the id's reference policy (a scripted solver);
- ``aworld-gym envs`` shows :func:`describe`: the kwargs an id needs and its tool names, declared here so that listing
  the ids starts no server;
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
# env id -> the names of its tools (a sequence, or a "module:attr" naming one), known without starting its servers
TOOL_NAMES: dict[str, Target | tuple[str, ...]] = {}
# env id -> the keyword arguments gym.make needs for it (``"a | b"``: one of them), for ids that need some
NEEDS: dict[str, tuple[str, ...]] = {}
# every id declared here (with or without a policy or share)
DECLARED: set[str] = set()


def declare(
    env_id: str,
    *,
    reference_policy: Target | None = None,
    worker_share: Target | None = None,
    tool_names: Target | tuple[str, ...] | None = None,
    needs: tuple[str, ...] | None = None,
) -> None:
    """Declare (or re-declare: what is not given is dropped) what ``env_id`` brings beside its registration."""
    DECLARED.add(env_id)
    tables: tuple[tuple[dict[str, Any], Any], ...] = (
        (REFERENCE_POLICIES, reference_policy),
        (WORKER_SHARES, worker_share),
        (TOOL_NAMES, tool_names),
        (NEEDS, tuple(needs) if needs else None),
    )
    for table, value in tables:
        if value is None:
            table.pop(env_id, None)
        else:
            table[env_id] = value


def reference_policy(env_id: str) -> Target | None:
    """The reference policy registered with ``env_id`` (``None`` if it has none)."""
    return REFERENCE_POLICIES.get(env_id)


def resolve(env_id: str) -> str:
    """Gymnasium's ``"module:Id"`` form: import ``module`` (which registers the id), return ``Id``; a plain id is
    returned as it is. A module that cannot be imported is Gymnasium's own error (a ``ModuleNotFoundError`` that says
    the registration failed), as ``gym.make`` raises it."""
    module, sep, name = env_id.rpartition(":")
    if not sep:
        return env_id
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            f"{exc}. Environment registration via importing a module failed. "
            f"Check whether '{module}' contains env registration and can be imported."
        ) from exc
    return name


def load(target: Target) -> Any:
    """``target`` itself, or the attribute a ``"module:attr"`` string names."""
    if not isinstance(target, str):
        return target
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def describe(env_id: str) -> dict[str, Any]:
    """What ``aworld-gym envs`` shows of a registered id, without making the env (no server starts): its default turn
    limit, the keyword arguments ``gym.make`` needs (declared with ``needs=``, and the entry point's parameters
    without a default that the registration does not give), its tool names (declared with ``tool_names=``, else the
    names of a ``tools=`` default kwarg's functions, else ``None``: unknown until the env is made) and whether it has
    a reference policy."""
    import gymnasium as gym

    spec = gym.spec(env_id)
    needs = list(NEEDS.get(env_id, ()))
    needs += [name for name in _required(spec.entry_point) if name not in spec.kwargs and name not in needs]
    declared = TOOL_NAMES.get(env_id)
    functions = spec.kwargs.get("tools")
    tools: list[str] | None = None
    if declared is not None:
        tools = [str(name) for name in (load(declared) if isinstance(declared, str) else declared)]
    elif isinstance(functions, list | tuple) and all(callable(f) for f in functions):
        tools = [getattr(f, "__name__", repr(f)) for f in functions]
    return {"id": env_id, "max_turns": spec.max_episode_steps, "needs": needs, "tools": tools,
            "reference_policy": env_id in REFERENCE_POLICIES}  # fmt: skip


def _required(entry_point: Any) -> list[str]:
    """The keyword parameters of ``entry_point`` (a class or factory, or its ``"module:attr"``) without a default."""
    import inspect

    try:
        params = inspect.signature(load(entry_point)).parameters.values()
    except (ImportError, AttributeError, TypeError, ValueError):
        return []  # an entry point that cannot be read here: gym.make will say what is wrong
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in params if p.kind in kinds and p.default is inspect.Parameter.empty]


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
