"""What every trainer face reads off a dataset row and writes back about an episode, in one place.

- :func:`row_env`: which env a row runs on (``env_id`` and ``env_kwargs``): the row's fields win over the face's
  defaults (its constructor, its config, or ``$AWORLD_ENV_ID`` / ``$AWORLD_ENV_KWARGS`` via :func:`environ_env`), and
  the row's ``env_kwargs`` are merged over the defaults' key by key.
- :func:`void_weight`: the loss weight of an episode under a void policy (0 for a void episode unless the policy
  is ``"zero"``), the rule :func:`~aworld_gym.rollout.groups.mask_void` applies to whole groups.
- :data:`TRUNCATING`: the endings a trainer should report as truncated (the episode was cut, not finished).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from aworld_gym.base.errors import ConfigError
from aworld_gym.core.trajectory import Termination

__all__ = ["ENV_ID_VAR", "ENV_KWARGS_VAR", "TRUNCATING", "environ_env", "row_env", "void_weight"]

ENV_ID_VAR, ENV_KWARGS_VAR = "AWORLD_ENV_ID", "AWORLD_ENV_KWARGS"
TRUNCATING = frozenset({Termination.TOKEN_BUDGET, Termination.LENGTH, Termination.CONTEXT_LIMIT})


def environ_env() -> tuple[str | None, dict[str, Any]]:
    """The default env of faces configured by the environment: ``$AWORLD_ENV_ID`` and ``$AWORLD_ENV_KWARGS`` (a
    JSON object)."""
    return os.environ.get(ENV_ID_VAR) or None, dict(json.loads(os.environ.get(ENV_KWARGS_VAR) or "{}"))


def row_env(
    row: Mapping[str, Any] | None,
    env_id: Any = None,
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    face: str,
    needs: str,
) -> tuple[str, dict[str, Any]]:
    """The env one row runs on: ``(env id, env kwargs)``.

    Args:
        row: the row's fields; its ``env_id`` wins over ``env_id`` and its ``env_kwargs`` are merged over
            ``env_kwargs``.
        env_id: the face's default env id (``None``: the row must name one).
        env_kwargs: the face's default ``gym.make`` kwargs.
        face: the face's name, for the error.
        needs: where the face looks for an env, for the error when neither names one (e.g. ``"a JSON label with
            env_id, or $AWORLD_ENV_ID"``).

    Raises:
        ConfigError: neither the row nor the defaults name an env.
    """
    row = dict(row or {})
    name = row.get("env_id") or env_id
    if not name:
        raise ConfigError(f"the {face} face needs an env: {needs}")
    return str(name), {**dict(env_kwargs or {}), **dict(row.get("env_kwargs") or {})}


def void_weight(void: bool, void_policy: str) -> float:
    """The loss weight of an episode: 0 for a void one unless ``void_policy`` is ``"zero"`` (trained on as reward
    0), else 1."""
    return 0.0 if void and void_policy != "zero" else 1.0
