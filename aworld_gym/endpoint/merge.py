"""The calls of one episode as token-exact training data: merged into one sequence where the conversation allows it.

An agent's second call usually sends back the whole conversation: the first call's prompt, the reply, then the
tool results and the next generation prompt. When a call's prompt ids begin with the previous call's prompt ids and
completion ids (checked on ids, not text), the calls merge: one ``TokenData`` whose completion is every sampled id
(mask 1, its logprob) with the ids between them (tool results, the template's turn markers: mask 0, logprob 0). A
call whose prompt does not extend the previous one (the agent rewrote its history, cut it, summarised it, or the
reply was cut at a ``stop`` string and the agent sent back the shorter text) starts a new sample: the episode is then
several samples, each token-exact on its own, and :func:`merge_calls` says so (``merged=False``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aworld_gym.core.trajectory import TokenData
from aworld_gym.endpoint.calls import CallRecord


@dataclass
class MergedCalls:
    """``samples``: one ``TokenData`` per run of calls that extend each other; ``merged``: all in one."""

    samples: list[TokenData]

    @property
    def merged(self) -> bool:
        return len(self.samples) <= 1


def merge_calls(calls: Sequence[CallRecord]) -> MergedCalls:
    samples: list[TokenData] = []
    current: TokenData | None = None
    for call in calls:
        if current is not None:
            so_far = current.prompt_ids + current.completion_ids
            if call.prompt_ids[: len(so_far)] == so_far and len(call.prompt_ids) >= len(so_far):
                between = call.prompt_ids[len(so_far) :]
                current.completion_ids += between + call.completion_ids
                current.logprobs += [0.0] * len(between) + list(call.logprobs)
                current.mask += [0] * len(between) + [1] * len(call.completion_ids)
                current.model_turns += 1
                current.env_turns += 1 if between else 0
                continue
        current = TokenData(prompt_ids=list(call.prompt_ids), completion_ids=list(call.completion_ids),
                            logprobs=list(call.logprobs), mask=[1] * len(call.completion_ids), model_turns=1)  # fmt: skip
        samples.append(current)
    return MergedCalls(samples)
