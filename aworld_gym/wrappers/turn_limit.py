"""TurnLimit: the outermost wrapper of every AWorld id, so that what ``gym.make`` returns has both faces.

``gym.make`` puts Gymnasium's ``TimeLimit`` around the env and keeps its limit to itself (the env's own spec says
``max_episode_steps=None``); the env needs it to end, label (``turn_limit``) and score its last turn. Rather than
change ``TimeLimit``, every id registered through :func:`aworld_gym.register` names this wrapper as its spec's
additional wrapper: ``gym.make`` puts it outside ``TimeLimit``, it reads the limit from ``TimeLimit``'s public
``spec.max_episode_steps`` and tells the env at every reset, on both faces.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from aworld_gym.core.faces import AsyncWrapper, Reset, tell_turn_limit, time_limit_of


class TurnLimit(AsyncWrapper, gym.utils.RecordConstructorArgs):
    """Tells the env below the turn limit of the ``TimeLimit`` under it at every reset; both faces.

    Args:
        env: what ``gym.make`` made (``TimeLimit(OrderEnforcing(PassiveEnvChecker(env)))``, or less).

    Attributes:
        limit: the ``TimeLimit``'s ``max_episode_steps`` (``None`` when there is none, e.g. ``max_episode_steps=-1``).
    """

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)  # gym.make(env.spec) re-makes it
        AsyncWrapper.__init__(self, env)
        self.limit: int | None = time_limit_of(env)  # not env.spec: it deep-copies the gym.make keywords

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Reset:
        tell_turn_limit(self, self.limit)
        return self.env.reset(seed=seed, options=options)

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Reset:
        tell_turn_limit(self, self.limit)
        return await self.inner.areset(seed, options)
