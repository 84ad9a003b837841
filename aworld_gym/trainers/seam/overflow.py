"""Episodes that end ``context_limit`` before the model's first token, said out loud.

The driver's context check ends an episode whose prompt plus the first turn's ``max_new_tokens`` would not fit in
the model's context, before anything is generated. Such an episode has no model token: the trainer logs a completion
length of 0, a loss of 0 and a gradient of 0, and nothing else says why (a HumanEval prompt of 785 tokens with
``max_completion_length=4096`` on a model of 4,096 positions). :class:`OverflowWatch` reads the finished episodes
of a batch: it warns once per run with the numbers when some of them overflowed so, and raises
:class:`~aworld_gym.base.errors.PromptOverflowError` when all of them did (the batch would train on nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from aworld_gym.base.errors import PromptOverflowError
from aworld_gym.core.trajectory import Termination, Trajectory
from aworld_gym.rollout.tokens import TokenMode

logger = logging.getLogger(__name__)

__all__ = ["PER_SAMPLE", "Overflow", "OverflowWatch", "first_token_overflow"]


@dataclass(frozen=True)
class Overflow:
    """Why an episode could not start: ``prompt_tokens + max_new_tokens > max_model_len``."""

    prompt_tokens: int
    max_new_tokens: int
    max_model_len: int


def first_token_overflow(traj: Trajectory, mode: TokenMode) -> Overflow | None:
    """The numbers of an episode of ``mode`` that ended ``context_limit`` before the model's first token, else ``None``."""
    tokens = traj.tokens
    if traj.termination != Termination.CONTEXT_LIMIT or tokens is None or tokens.model_turns or not tokens.prompt_ids:
        return None
    if mode.max_model_len is None:
        return None
    return Overflow(len(tokens.prompt_ids), mode.max_new(mode.budget), int(mode.max_model_len))


class OverflowWatch:
    """One run's watch over episodes that overflow before their first token (one per rollout function or batch
    runner: it warns once in its life).

    Args:
        budget: what sets the first turn's ``max_new_tokens`` in the face's words (named in the message as what to
            lower).
    """

    def __init__(self, budget: str = "the completion budget (or max_new_tokens)") -> None:
        self.budget = budget
        self.warned = False

    def check(self, episodes: Sequence[tuple[Trajectory, TokenMode]], *, batch: bool = True) -> None:
        """Look at finished episodes (each with its token mode). Some overflowed before their first token: a warning,
        once per watch. All of them, when they are a batch (``batch``) of at least one: :class:`PromptOverflowError`.
        """
        hits = [o for o in (first_token_overflow(t, m) for t, m in episodes) if o is not None]
        if not hits:
            return
        text = self.describe(hits, len(episodes))
        if batch and len(hits) == len(episodes):
            raise PromptOverflowError(f"every prompt of the batch overflowed, nothing to train on: {text}")
        if not self.warned:
            self.warned = True
            logger.warning("%s (said once per run)", text)

    def describe(self, hits: Sequence[Overflow], n: int) -> str:
        short, long = min(h.prompt_tokens for h in hits), max(h.prompt_tokens for h in hits)
        asked, limit = max(h.max_new_tokens for h in hits), min(h.max_model_len for h in hits)
        prompts = f"{long} prompt tokens" if short == long else f"{short} to {long} prompt tokens"
        fit = limit - long
        fix = (f"lower {self.budget} to at most {fit}, or use a model with a longer context" if fit > 0
               else f"shorten the prompts (the longest, {long} tokens, fills the context), or use a model with a longer context")  # fmt: skip
        return (f"{len(hits)} of {n} episode{'s' if n != 1 else ''} ended context_limit before the model's first token ({prompts} + "
                f"{asked} new tokens > the model's context of {limit}): they train on nothing (completion length 0, "
                f"no gradient); {fix}")  # fmt: skip


# The watch of the faces whose trainer asks for one sample per call (verl, slime, OpenRLHF, AReaL): no batch to refuse,
# a warning once per process.
PER_SAMPLE = OverflowWatch("max_new_tokens (the trainer's response length)")
