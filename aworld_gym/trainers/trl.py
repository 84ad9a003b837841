"""TRL ``GRPOTrainer`` adapters: token-exact multi-turn rollouts on any AWorld environment.

Two ways in, both for ``trl>=1.16``:

- :func:`make_rollout_func` for ``GRPOTrainer(rollout_func=...)``: every prompt of the batch is an episode of
  the env, generated with the trainer's own model (vLLM server/colocate when ``use_vllm=True``, the HF model's
  ``generate`` otherwise). The model's sampled ids and logprobs are kept exactly; env turns are appended as ids
  with ``env_mask = 0``; ``max_completion_length`` bounds the whole multi-turn completion. The env's reward and
  its components go out as extra fields, read by :func:`env_reward` / :func:`component_reward`.
- :func:`environment_factory` for ``GRPOTrainer(environment_factory=...)`` (``trl_tools.py``, re-exported here): a
  class whose public methods are the env's MCP tools (typed signatures, Google docstrings), plus ``answer`` to
  submit the final answer, ``reset`` and ``get_reward``. TRL then runs its own tool loop.

:func:`task_dataset` builds the ``train_dataset`` (one row per task: ``prompt``, ``task_id``).
"""

from __future__ import annotations

import atexit
import logging
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aworld_gym  # noqa: F401 - registers the ids
from aworld_gym.core.trajectory import Trajectory, void_counts
from aworld_gym.rollout.envs import EnvLike, env_factory, env_name
from aworld_gym.rollout.groups import GroupCollector, check_void_policy
from aworld_gym.rollout.health import ALARMS, ParseHealth, health_metrics
from aworld_gym.rollout.pool import EnvPool
from aworld_gym.rollout.sinks import JSONLSink
from aworld_gym.rollout.sinks.sink_files import OutputWriteError
from aworld_gym.rollout.tokens import ChatTokens, Generate, TokenMode
from aworld_gym.trainers.seam.env_loop import EnvLoop
from aworld_gym.trainers.seam.groups import group_keys, rewards_by_group
from aworld_gym.trainers.seam.overflow import OverflowWatch
from aworld_gym.trainers.seam.token_rollout import adhoc_task, prompt_text, run_token_batch
from aworld_gym.trainers.trl_generate import hf_generate, model_generate, vllm_generate
from aworld_gym.trainers.trl_tools import AWorldToolEnv, ensure_tool_parser, environment_factory, group_reward
from aworld_gym.wrappers.reward_shaping import group_hooks

__all__ = [
    "EXTRA_FIELDS",
    "AWorldRolloutFunc",
    "AWorldToolEnv",
    "adhoc_task",
    "component_reward",
    "ensure_tool_parser",
    "env_reward",
    "environment_factory",
    "group_keys",
    "group_reward",
    "hf_generate",
    "make_rollout_func",
    "model_generate",
    "prompt_text",
    "task_dataset",
    "vllm_generate",
]

logger = logging.getLogger(__name__)

# Per-sample fields of the rollouts (reward functions get them as keyword arguments): the Trajectory's vocabulary.
EXTRA_FIELDS = ("reward", "score", "reward_components", "num_turns", "termination", "status", "weight", "task_id")


# ----- datasets ------------------------------------------------------------------------------------------
def _task_prompts(env: Any) -> list[tuple[str, str]]:
    """(task id, first observation) for every task of ``env``."""
    u = env.unwrapped
    return [(t.id, u.render_prompt(t)) for t in u.tasks]


def task_dataset(env_id: EnvLike, *, limit: int | None = None, **env_kwargs: Any) -> Any:
    """A ``datasets.Dataset`` with one row per task of the env: ``prompt`` (conversational) and ``task_id``.

    ``env_id`` is a registered id (with ``env_kwargs``) or a zero-argument factory returning an env. The prompt is
    the env's first observation, so :func:`make_rollout_func` finds each row's task from it and
    ``environment_factory``'s ``reset(task_id=...)`` from the ``task_id`` column.
    """
    from datasets import Dataset

    env = env_factory(env_id, env_kwargs)()
    try:
        rows = [
            {"prompt": [{"role": "user", "content": prompt}], "task_id": tid}
            for tid, prompt in _task_prompts(env)[:limit]
        ]
    finally:
        env.close()
    return Dataset.from_list(rows)


# ----- reward functions ----------------------------------------------------------------------------------
def _masked(values: list[float], weight: Sequence[float] | None) -> list[float | None]:
    """``None`` for masked (void) samples: TRL then leaves them out of their group's baseline (advantage 0)."""
    if weight is None:
        return list(values)
    return [v if float(w) > 0 else None for v, w in zip(values, weight, strict=True)]


def env_reward(
    completions: Sequence[Any], reward: Sequence[float] | None = None, weight: Sequence[float] | None = None, **_: Any
) -> list[float | None]:
    """The episode return computed by the env (task score plus its shaping components); ``None`` for a void
    episode (infrastructure's fault), which TRL leaves out of the group's baseline and the loss."""
    if reward is None:
        raise ValueError("env_reward needs the rollouts of make_rollout_func (the reward field is missing)")
    return _masked([float(r) for r in reward], weight)


def component_reward(name: str) -> Callable[..., list[float]]:
    """A reward function for one component of the env's reward (e.g. ``"task_score"``, ``"format_penalty"``)."""

    def reward(
        completions: Sequence[Any], reward_components: Sequence[dict] | None = None,
        weight: Sequence[float] | None = None, **_: Any,
    ) -> list[float | None]:  # fmt: skip
        if reward_components is None:
            raise ValueError(f"{name}: the reward_components field of make_rollout_func is missing")
        return _masked([float((c or {}).get(name, 0.0)) for c in reward_components], weight)

    reward.__name__ = f"aworld_{name}"
    return reward


# ----- the rollout function ------------------------------------------------------------------------------
class AWorldRolloutFunc:
    """``rollout_func(prompts, trainer) -> dict`` for ``GRPOTrainer``; see :func:`make_rollout_func`."""

    def __init__(
        self,
        env_id: EnvLike,
        env_kwargs: dict[str, Any],
        *,
        max_workers: int = 8,
        generate: Callable[[Any], Generate] | None = None,
        void_policy: str = "mask",
        retry_void: int | None = None,
        max_model_len: int | None = None,
        max_new_tokens: int | None = None,
        overflow_reward: float = 0.0,
        parse_health: ParseHealth | None = None,
        out: str | Path | None = None,
    ) -> None:
        self.make = env_factory(env_id, env_kwargs)
        self.env_id, self.env_kwargs = env_name(env_id), env_kwargs
        self.pool = EnvPool(self.make, max_idle=max(max_workers, 64))
        self.make_generate = generate
        self.void_policy = check_void_policy(void_policy)
        self.retry_void = (2 if void_policy == "retry" else 0) if retry_void is None else int(retry_void)
        self.max_model_len, self.max_new_tokens, self.overflow_reward = max_model_len, max_new_tokens, overflow_reward
        self.envs = EnvLoop("aworld-gym-trl-envs")  # the envs' sessions live on this loop, call after call
        self._by_prompt: dict[str, str] | None = None
        self._chat: ChatTokens | None = None
        self._warned_adhoc = False
        self.overflow = OverflowWatch("max_completion_length (or make_rollout_func's max_new_tokens)")
        self.last_trajectories: list[Trajectory] = []
        # every episode of the training run: whether the model still calls tools (the alarm), and its records
        self.health = parse_health if parse_health is not None else ParseHealth()
        self._out = JSONLSink(out, resume=True, keyed=False) if out else None
        _live.add(self)

    # The envs and their loop live as long as this object (the trainer holds it).
    def close(self) -> None:
        if self.envs.loop is not None:
            self.envs.call(self.pool.aclose(), timeout=120)
            self.envs.stop()
        self.pool.close()
        if self._out is not None:
            self._out.close()

    def _task_of(self, prompt: Any) -> dict[str, Any]:
        """reset() options for a prompt: its task id when the prompt is one of the env's tasks."""
        text = prompt_text(prompt)
        if self._by_prompt is None:
            env = self.pool.peek().unwrapped
            self._by_prompt = {}
            for task in env.tasks:
                self._by_prompt.setdefault(env.render_prompt(task).strip(), task.id)
                self._by_prompt.setdefault(task.prompt.strip(), task.id)
        tid = self._by_prompt.get(text.strip())
        if tid is not None:
            return {"task_id": tid}
        if not self._warned_adhoc:
            self._warned_adhoc = True
            logger.warning(
                "a prompt is not one of %s's tasks: it runs as a task without a reference answer (no task score); "
                "build the dataset with aworld_gym.trainers.trl.task_dataset to train on the env's tasks",
                self.env_id,
            )
        return {"task": adhoc_task(text)}

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        tok = trainer.processing_class
        tok = getattr(tok, "tokenizer", tok)
        if self._chat is None or self._chat.tokenizer is not tok:
            self._chat = ChatTokens(tok, getattr(trainer, "chat_template_kwargs", None))
        chat = self._chat
        options = [self._task_of(p) for p in prompts]
        keys = group_keys(prompts, getattr(trainer, "num_generations", None))
        trajectories = self._episodes(trainer, chat, options, keys)
        self.last_trajectories = trajectories
        collector = GroupCollector(group_hooks(self.pool.peek()), self.void_policy)
        for key in keys:
            collector.expect(key)
        for key, traj in zip(keys, trajectories, strict=True):
            collector.add(key, traj)
        records = [t.to_record() for t in trajectories]  # serialised once: for the health, ``out`` and the batch
        self._watch(records, trainer)
        _log_void(trainer, trajectories, self.health)
        return batch_of(trajectories, chat, prompts, keys, records)

    def _episodes(self, trainer: Any, chat: ChatTokens, options: list[dict[str, Any]], keys: list[Any]
                  ) -> list[Trajectory]:  # fmt: skip
        """One token-mode episode per prompt (``options``: each one's reset options; ``keys``: its GRPO group)."""
        if self.make_generate is not None:
            generate = self.make_generate(trainer)
        elif getattr(trainer, "use_vllm", False):
            generate = vllm_generate(trainer)
        else:
            generate = hf_generate(trainer)
        budget = int(trainer.max_completion_length)
        accelerator = getattr(trainer, "accelerator", None)
        limit = self.max_model_len or model_len(trainer)

        def mode(gen: Callable[..., Any]) -> TokenMode:
            return TokenMode(chat, gen, budget, max_new_tokens=self.max_new_tokens, max_model_len=limit,
                             overflow_reward=self.overflow_reward)  # fmt: skip

        return run_token_batch(
            self.pool, options, mode, generate, envs=self.envs, env_id=self.env_id, groups=keys,
            retry_void=self.retry_void, any_active=lambda n: self._any_active(accelerator, n), watch=self.overflow,
        )  # fmt: skip

    def _watch(self, records: list[dict[str, Any]], trainer: Any) -> None:
        """Count the batch's records into the run's parse health (its alarm may fire) and append them to ``out``,
        each with the trainer's step (``train_step``); a failed write is logged once, training goes on."""
        step = getattr(getattr(trainer, "state", None), "global_step", None)
        for record in records:
            self.health.add(record)
            if self._out is not None and self._out.failed is None:
                if step is not None:
                    record = {**record, "train_step": int(step)}
                try:
                    self._out.write(record)
                except OutputWriteError as exc:
                    logger.error("the training episodes are no longer written to %s: %s", self._out.path, exc)

    @staticmethod
    def _any_active(accelerator: Any, n: int) -> bool:
        if accelerator is None or getattr(accelerator, "num_processes", 1) <= 1:
            return n > 0
        import torch

        total = accelerator.gather(torch.tensor([n], device=accelerator.device)).sum().item()
        return total > 0


def model_len(trainer: Any) -> int | None:
    """The context the trainer's generations have: vLLM's ``vllm_max_model_length`` when it generates, else the
    model config's ``max_position_embeddings`` (``None`` when neither is known)."""
    args = getattr(trainer, "args", None)
    if getattr(trainer, "use_vllm", False) and getattr(args, "vllm_max_model_length", None):
        return int(args.vllm_max_model_length)
    config = getattr(getattr(trainer, "model", None), "config", None)
    n = getattr(config, "max_position_embeddings", None)
    return int(n) if isinstance(n, int) else None


def batch_of(
    trajectories: list[Trajectory],
    chat: ChatTokens,
    prompts: Sequence[Any],
    keys: Sequence[Any] | None = None,
    records: Sequence[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """TRL's rollout batch: the token data (a masked, void sample: every completion token has ``env_mask`` 0) and the
    Trajectory's fields for the reward functions (``weight`` 0 makes :func:`env_reward` return ``None``); ``keys``:
    each sample's GRPO group (a masked sample's ``reward`` is its own group's live mean; default: one group);
    ``records``: the trajectories' records when already made."""
    out: dict[str, Any] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": []}
    rewards = rewards_by_group(keys if keys is not None else [0] * len(trajectories), trajectories)
    records = records if records is not None else [t.to_record() for t in trajectories]
    for traj, prompt, reward, record in zip(trajectories, prompts, rewards, records, strict=True):
        tokens = traj.tokens
        prompt_ids = list(tokens.prompt_ids) if tokens is not None else []
        completion = list(tokens.completion_ids) if tokens is not None else []
        if not prompt_ids:  # the env never started: the dataset's prompt, and one masked token
            prompt_ids = chat.prompt_ids([{"role": "user", "content": prompt_text(prompt)}])
        if not completion:
            completion, logprobs, mask = [chat.eos_id], [0.0], [0]
        else:
            logprobs, mask = list(tokens.logprobs), list(tokens.mask)  # type: ignore[union-attr]
        if traj.weight <= 0:
            mask = [0] * len(completion)
        out["prompt_ids"].append(prompt_ids)
        out["completion_ids"].append(completion)
        out["logprobs"].append(logprobs)
        out["env_mask"].append(mask)
        rec = {**record, "reward": reward}
        for key in EXTRA_FIELDS:
            out.setdefault(key, []).append(rec.get(key))
    return out


def _log_void(trainer: Any, trajectories: list[Trajectory], health: ParseHealth | None = None) -> None:
    """``void/rate`` and ``void/<kind>``, and the batch's parse health (``parse/tool_call_turns``,
    ``parse/failure_turns``, ``parse/no_tool_call_episodes``, ``parse/unknown_tools``; with the run's ``health``,
    ``parse/alarm_no_tool_call`` and ``parse/alarm_parse_failures``: 1 while that alarm is over its threshold) to the
    trainer's logger (TRL's ``_log_metric``, averaged over ranks)."""
    log = getattr(trainer, "_log_metric", None)
    if log is None:
        return
    metrics = {**void_counts(trajectories), **health_metrics(trajectories)}
    if health is not None:
        metrics.update({f"parse/alarm_{name}": float(name in health.raised) for name in ALARMS})
    for name, value in metrics.items():
        try:
            log(name, float(value))
        except Exception:
            logger.debug("logging %s failed", name, exc_info=True)
            return


_live: weakref.WeakSet[AWorldRolloutFunc] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for f in list(_live):
        f.close()


def make_rollout_func(
    env_id: EnvLike, *, max_workers: int = 8, generate: Callable[[Any], Generate] | None = None,
    void_policy: str = "mask", retry_void: int | None = None, max_model_len: int | None = None,
    max_new_tokens: int | None = None, overflow_reward: float = 0.0, parse_health: ParseHealth | None = None,
    out: str | Path | None = None, **env_kwargs: Any,
) -> AWorldRolloutFunc:  # fmt: skip
    """A ``rollout_func`` for ``GRPOTrainer`` that runs each prompt as a multi-turn episode of ``env_id``.

    Args:
        env_id: a registered id (``"AWorld/Code-v0"``, ``"AWorld/MCP-v0"``...) or a zero-argument factory that
            returns an env (wrappers included: the outermost env is stepped).
        max_workers: envs kept for reuse between batches (at least 64).
        void_policy: a void episode (an infrastructure failure: ``env_crash``, ``env_error``, ``tool_timeout``) is
            ``"mask"``-ed (every completion token gets ``env_mask`` 0 and the reward functions return ``None``, so
            TRL leaves it out of the loss and of its group's baseline), ``"retry"``-ed (run again, ``retry_void``
            times, default 2, then masked) or trained on as reward 0 (``"zero"``).
        max_model_len: the model's context (default: vLLM's ``vllm_max_model_length``, else the model config's
            ``max_position_embeddings``): a turn whose prompt plus ``max_new_tokens`` would not fit ends the episode
            with ``context_limit`` (status ``failed``), with ``overflow_reward`` as its reward component.
        max_new_tokens: tokens per model turn (default: what is left of ``max_completion_length``).
        generate: ``trainer -> (inputs, max_new_tokens) -> [(ids, logprobs)]``, to override the backend (the
            default is the trainer's vLLM when ``use_vllm=True``, else its HF model).
        parse_health: the training run's parse health (:class:`~aworld_gym.rollout.health.ParseHealth`): every
            episode is counted in, and its alarm warns (:class:`~aworld_gym.rollout.health.ParseHealthWarning` and a
            log line) when the model stops calling tools or its calls stop parsing over the last ``window``
            episodes. Default: a window of 200, alarms at 95% of episodes without a tool call or 20% of turns that
            fail to parse. Read it as ``rollout_func.health``.
        out: a JSONL file that every episode's record is appended to (with the trainer's ``train_step``), for
            ``aworld-gym report`` (its parse-health table, plot and alarms over the run).
        env_kwargs: passed to ``gym.make``.

    The returned dict holds ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask`` and the Trajectory's
    fields ``reward``, ``score``, ``reward_components``, ``num_turns``, ``termination``, ``status``, ``weight`` and
    ``task_id`` (reward functions receive them as keyword arguments; see :func:`env_reward`). The env's group reward
    hooks run once on the episodes of each prompt in the batch (a GRPO group; void ones left out) and are included
    in ``reward`` and ``reward_components``. ``void/rate``, ``void/<kind>`` and ``parse/*`` go to the trainer's logs.
    """
    return AWorldRolloutFunc(env_id, env_kwargs, max_workers=max_workers, generate=generate, void_policy=void_policy,
                             retry_void=retry_void, max_model_len=max_model_len, max_new_tokens=max_new_tokens,
                             overflow_reward=overflow_reward, parse_health=parse_health, out=out)  # fmt: skip
