"""The trainer-adapter seam: everything a trainer face is built from, in one public module.

``from aworld_gym.trainers.seam import ...`` is the one import of an adapter (docs/trainer-adapter.md); the names
live where their concept does and are only gathered here (importing this module starts nothing and imports no
trainer, torch or Ray).

Where the trainer drives the loop (it hands over the model's text one turn at a time):
    :class:`TextEpisode` (async) / :class:`SyncTextEpisode` (sync): one episode on a pooled env, ``start`` /
    ``step(text)`` / ``end`` / ``close``, each answer a :class:`Turn`; :class:`EnvLoop`, a loop of the envs' own
    for trainers that call from changing loops.

Where we drive the loop (token-exact: the model's ids kept as sampled):
    :func:`run_pooled` (one episode through the episode driver on an :class:`EnvPool`; :class:`EnvPools` for one
    pool per loop, env id and kwargs), :class:`TokenMode` and :class:`ChatTokens`.

Rows, groups and void episodes:
    :func:`row_env` / :func:`environ_env` (which env a row runs on), :func:`episode_options` (its task),
    :func:`void_weight` and :data:`TRUNCATING`; :class:`GroupCollector` (:class:`GroupGate`, its async form), :func:`member_of` (one sample per
    coroutine), :func:`finish_group`, :func:`training_rewards`, :func:`rewards_by_group`, :func:`check_void_policy`;
    :class:`Trajectory`, :class:`Termination` and :func:`void_counts`; :class:`OverflowWatch` (episodes that end
    ``context_limit`` before the model's first token: a warning once per run, an error for a batch of them).
"""

from __future__ import annotations

from aworld_gym.core.trajectory import Termination, Trajectory, void_counts
from aworld_gym.rollout.groups import GroupCollector, GroupGate, check_void_policy, finish_group, training_rewards
from aworld_gym.rollout.pool import EnvPool, EnvPools, run_pooled
from aworld_gym.rollout.text_episode import SyncTextEpisode, TextEpisode, Turn
from aworld_gym.rollout.tokens import ChatTokens, TokenMode
from aworld_gym.trainers.seam.env_loop import EnvLoop
from aworld_gym.trainers.seam.groups import member_of, rewards_by_group
from aworld_gym.trainers.seam.overflow import OverflowWatch
from aworld_gym.trainers.seam.rows import TRUNCATING, environ_env, row_env, void_weight
from aworld_gym.trainers.seam.token_rollout import episode_options

__all__ = [
    "TRUNCATING",
    "ChatTokens",
    "EnvLoop",
    "EnvPool",
    "EnvPools",
    "GroupCollector",
    "GroupGate",
    "OverflowWatch",
    "SyncTextEpisode",
    "Termination",
    "TextEpisode",
    "TokenMode",
    "Trajectory",
    "Turn",
    "check_void_policy",
    "environ_env",
    "episode_options",
    "finish_group",
    "member_of",
    "rewards_by_group",
    "row_env",
    "run_pooled",
    "training_rewards",
    "void_counts",
    "void_weight",
]
