"""slime: ``--custom-generate-function-path aworld_gym.trainers.slime.generate`` (and ``--custom-rm-path
aworld_gym.trainers.slime.reward``) run each sample as a token-exact AWorld episode.

slime awaits ``generate(args, sample, sampling_params)`` once per sample, the samples of a group concurrently on one
event loop. Here that is the episode driver's token mode on a pooled env: each model turn is one SGLang ``/generate``
call (``input_ids`` in; the sampled ids and logprobs from ``meta_info.output_token_logprobs``) to
``http://{args.sglang_router_ip}:{args.sglang_router_port}``, the env's answers are appended with ``loss_mask`` 0,
and the sample is filled as slime's ``Sample`` expects: ``tokens`` (prompt + response), ``response_length``,
``loss_mask`` and ``rollout_log_probs`` over the response, ``response``, ``reward``, ``status``. A void episode
(infrastructure's fault) gets status ``FAILED``, ``remove_sample=True`` (slime zeros its loss) and, as its reward,
its group's live mean (``sample.group_index``), so the group baseline does not move.

The env comes from the sample's ``metadata`` (``env_id``, ``env_kwargs``, ``task_id`` / ``task_index`` / ``task``,
``seed``) or from ``args.aworld_env_id`` / ``args.aworld_env_kwargs``; the tokenizer from ``args.hf_checkpoint``.
SGLang's finish reasons become the statuses slime's own generate gives: ``length`` ends the episode with ``length``
(``TRUNCATED``, trained on), ``abort`` with ``abort`` (``ABORTED``, no loss: slime's partial rollout takes it back).
slime is not on the package registries: this face is tested against a copy of ``Sample`` whose field names are pinned
to ``slime/utils/types.py`` at a named upstream commit (``tests/trainers/test_slime.py``) and a stand-in SGLang server
speaking ``/generate`` over HTTP.
"""

from __future__ import annotations

import functools
from typing import Any

import aworld_gym  # noqa: F401 - registers the ids
from aworld_gym.core.trajectory import Termination, Trajectory
from aworld_gym.rollout.pool import EnvPools, run_pooled
from aworld_gym.rollout.tokens import ChatTokens, TokenMode
from aworld_gym.trainers.seam.groups import member_of
from aworld_gym.trainers.seam.overflow import PER_SAMPLE
from aworld_gym.trainers.seam.rows import TRUNCATING, row_env
from aworld_gym.trainers.seam.token_rollout import episode_options

POOL = EnvPools()


@functools.lru_cache(maxsize=8)
def _chat(checkpoint: str) -> ChatTokens:
    from transformers import AutoTokenizer

    return ChatTokens(AutoTokenizer.from_pretrained(checkpoint))


async def sglang_generate(url: str, ids: list[int], sampling_params: dict[str, Any], max_new: int) -> Any:
    """One SGLang ``/generate`` call: ``(new ids, their logprobs, finish reason)``."""
    import httpx2

    payload = {"input_ids": ids, "sampling_params": {**sampling_params, "max_new_tokens": max_new},
               "return_logprob": True}  # fmt: skip
    async with httpx2.AsyncClient(timeout=600) as client:
        response = await client.post(url, json=payload)
        response.raise_for_status()
        out = response.json()
    meta = out.get("meta_info") or {}
    pairs = meta.get("output_token_logprobs") or []
    finish = (meta.get("finish_reason") or {}).get("type")  # "stop", "length" or "abort", as slime reads it
    return [int(p[1]) for p in pairs], [float(p[0]) for p in pairs], finish


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
    """slime's custom generate: one AWorld episode per sample (see the module's docstring)."""
    key = None if sample.group_index is None else str(sample.group_index)
    traj, reward, chat = await member_of(key, lambda: _episode(args, sample, sampling_params))
    return fill(sample, traj, reward, chat)


async def _episode(args: Any, sample: Any, sampling_params: dict[str, Any]) -> tuple[Trajectory, Any, ChatTokens]:
    meta = dict(sample.metadata or {})
    env_id, env_kwargs = row_env(meta, getattr(args, "aworld_env_id", None), getattr(args, "aworld_env_kwargs", None),
                                 face="slime", needs="sample.metadata['env_id'] or args.aworld_env_id")  # fmt: skip
    chat = _chat(str(args.hf_checkpoint))
    url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}/generate"
    params = {k: v for k, v in sampling_params.items() if k != "max_new_tokens"}

    async def gen(ids: list[int], max_new: int) -> Any:
        return await sglang_generate(url, ids, params, max_new)

    per_turn = sampling_params.get("max_new_tokens")
    budget = int(getattr(args, "rollout_max_response_len", None) or per_turn or 1024)
    context = getattr(args, "rollout_max_context_len", None)
    mode = TokenMode(chat, gen, budget, max_new_tokens=int(per_turn) if per_turn else None,
                     max_model_len=int(context) if context else None)  # fmt: skip
    pool = POOL.get(env_id, env_kwargs)
    group = None if sample.group_index is None else str(sample.group_index)
    traj = await run_pooled(pool, None, env_id=env_id, seed=meta.get("seed"),
                            options=episode_options(meta, sample.prompt), group=group, tokens=mode)  # fmt: skip
    PER_SAMPLE.check([(traj, mode)], batch=False)
    return traj, pool.group_hooks, chat


def fill(sample: Any, traj: Trajectory, reward: float, chat: ChatTokens) -> Any:
    """Write the episode into slime's ``Sample`` (fields as ``slime/utils/types.py`` names them)."""
    tokens = traj.tokens
    prompt = list(tokens.prompt_ids) if tokens is not None else []
    response = list(tokens.completion_ids) if tokens is not None else []
    mask = list(tokens.mask) if tokens is not None else []
    sample.tokens = prompt + response
    sample.response_length = len(response)
    sample.response = chat.decode(response) if response else ""
    sample.rollout_log_probs = list(tokens.logprobs) if tokens is not None else []
    sample.reward = reward
    status = getattr(type(sample), "Status", None)
    if traj.termination == Termination.ABORT:  # slime's own reading of an aborted generation (partial rollout)
        sample.loss_mask = [0] * len(response)
        name = "ABORTED"
    elif traj.weight <= 0:  # void: no loss, and slime drops it from training
        sample.loss_mask = [0] * len(response)
        sample.remove_sample = True
        name = "FAILED"
    else:
        sample.loss_mask = mask
        name = "TRUNCATED" if traj.termination in TRUNCATING else "COMPLETED"
    sample.status = getattr(status, name) if status is not None else name.lower()
    sample.metadata = {**dict(sample.metadata or {}), "aworld": {
        "status": traj.status, "termination": traj.termination, "reward": traj.reward, "score": traj.score,
        "weight": traj.weight, "task_id": traj.task_id, "error": (traj.error or "")[-500:]}}  # fmt: skip
    return sample


async def reward(args: Any, sample: Any, **kwargs: Any) -> Any:
    """slime's custom reward (``--custom-rm-path``): the env's reward, already in the sample (one sample or, with
    ``--group-rm`` or a list-returning generate, a list of them)."""
    if isinstance(sample, list):
        return [s.reward for s in sample]
    return sample.reward
