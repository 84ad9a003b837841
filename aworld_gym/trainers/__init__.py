"""Trainer faces and training helpers; each face imports its framework lazily.

One face per trainer, all on the one episode driver and the one ``Trajectory``: TRL (``trl``: ``rollout_func``;
``trl_tools``: ``environment_factory``), verl (``verl``), RLlib (``rllib``), SkyRL (``skyrl``), slime (``slime``),
OpenRLHF (``openrlhf``), AReaL (``areal``), ms-swift (``swift``) and any OpenEnv consumer (``openenv``:
``aworld-gym serve-env``). See docs/training.md for how each is launched and how it masks a void episode.

What the faces are built from (the episode stepped from outside on both faces, the pool, the group collector, the
row's env, the void weight) is exported by :mod:`aworld_gym.trainers.seam`; docs/trainer-adapter.md builds a new
face on it.
"""

from __future__ import annotations

from pathlib import Path


def recipes_dir() -> Path:
    """The folder of the bundled training recipes (YAML)."""
    return Path(__file__).with_name("recipes")
