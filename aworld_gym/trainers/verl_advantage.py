"""GRPO for verl with masked samples left out of their group's statistics: ``algorithm.adv_estimator=aworld_grpo``.

The ``aworld_agent`` loop masks a void sample (infrastructure's fault): ``response_mask`` all 0 and, as its score,
its group's live mean, so verl's GRPO mean is what it would be without it. verl's GRPO standard deviation still
counts it: the masked samples sit on the mean and shrink the std, and every live sample's advantage grows. In a group
of 2 live samples (scores 1 and 0) and 2 void ones, verl's ``grpo`` gives the live ones +-1.22 instead of +-0.71
(``sqrt(3)``, 1.73 times; in general ``sqrt((n - 1) / (k - 1))`` for ``k`` live of ``n``).

:func:`compute_masked_grpo_advantage` is verl's GRPO with the group's mean and std taken over its live samples only
(those with any ``response_mask`` 1); a group with one live sample gets mean 0 and std 1, as verl's gives a group of
one. Registered under :data:`NAME` with verl's ``register_adv_est`` when this module is imported; verl looks the
estimator up in its trainer process (a Ray actor), so have Ray import it in every worker::

    algorithm:
      adv_estimator: aworld_grpo
    ray_kwargs:
      ray_init:
        runtime_env:
          worker_process_setup_hook: aworld_gym.trainers.verl_advantage.register
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

NAME = "aworld_grpo"


def compute_masked_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's outcome GRPO advantage with each group's mean and std over its live (unmasked) samples.

    Args:
        token_level_rewards: ``(batch, response_length)``; a sample's score is its sum.
        response_mask: ``(batch, response_length)``; a sample with no 1 is masked (left out of its group).
        index: each sample's group (verl's ``uid``).
        epsilon: added to the std.
        norm_adv_by_std_in_grpo: divide by the std (GRPO) or not (Dr.GRPO); ``config``'s value wins.
        config: verl's algorithm config.

    Returns:
        The advantages and the returns (the same tensor), ``(batch, response_length)``; 0 where the mask is 0.
    """
    if config is not None and hasattr(config, "get"):
        norm_adv_by_std_in_grpo = bool(config.get("norm_adv_by_std_in_grpo", norm_adv_by_std_in_grpo))
    scores = token_level_rewards.sum(dim=-1)
    live = response_mask.sum(dim=-1) > 0
    with torch.no_grad():
        groups: dict[Any, list[int]] = defaultdict(list)
        for i in range(scores.shape[0]):
            if bool(live[i]):
                groups[index[i]].append(i)
        stats: dict[Any, tuple[torch.Tensor, torch.Tensor]] = {}
        for key, rows in groups.items():
            group = scores[rows]
            stats[key] = (group.mean(), group.std()) if len(rows) > 1 else (torch.tensor(0.0), torch.tensor(1.0))
        out = torch.zeros_like(scores)
        for i in range(scores.shape[0]):
            if bool(live[i]):
                mean, std = stats[index[i]]
                out[i] = (scores[i] - mean) / (std + epsilon) if norm_adv_by_std_in_grpo else scores[i] - mean
        advantages = out.unsqueeze(-1) * response_mask
    return advantages, advantages


def register() -> None:
    """Register :func:`compute_masked_grpo_advantage` as ``aworld_grpo`` (idempotent; Ray's setup hook calls it)."""
    if NAME not in ADV_ESTIMATOR_REGISTRY:
        register_adv_est(NAME)(compute_masked_grpo_advantage)


register()
