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
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aworld_gym  # noqa: F401 - registers the ids
from aworld_gym.rollout.envs import EnvLike, env_factory, env_name
from aworld_gym.trainers.groups import group_keys, run_group_hooks
from aworld_gym.trainers.token_rollout import (
    ChatTokens,
    Generate,
    TokenEpisode,
    adhoc_task,
    prompt_text,
    run_token_episodes,
)
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
    "run_group_hooks",
    "task_dataset",
    "vllm_generate",
]

logger = logging.getLogger(__name__)

EXTRA_FIELDS = ("env_reward", "task_score", "reward_components", "num_turns", "truncation_reason", "task_id")


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
def env_reward(completions: Sequence[Any], env_reward: Sequence[float] | None = None, **_: Any) -> list[float]:
    """The episode return computed by the env (task score plus its shaping components)."""
    if env_reward is None:
        raise ValueError("env_reward needs the rollouts of make_rollout_func (the env_reward field is missing)")
    return [float(r) for r in env_reward]


def component_reward(name: str) -> Callable[..., list[float]]:
    """A reward function for one component of the env's reward (e.g. ``"task_score"``, ``"format_penalty"``)."""

    def reward(completions: Sequence[Any], reward_components: Sequence[dict] | None = None, **_: Any) -> list[float]:
        if reward_components is None:
            raise ValueError(f"{name}: the reward_components field of make_rollout_func is missing")
        return [float((c or {}).get(name, 0.0)) for c in reward_components]

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
    ) -> None:
        self.make = env_factory(env_id, env_kwargs)
        self.env_id, self.env_kwargs = env_name(env_id), env_kwargs
        self.max_workers = max_workers
        self.make_generate = generate
        self._envs: list[Any] = []
        self._by_prompt: dict[str, str] | None = None
        self._chat: ChatTokens | None = None
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="aworld-rollout")
        self._warned_adhoc = False
        self.last_episodes: list[TokenEpisode] = []
        _live.add(self)

    # The envs and the thread pool live as long as this object (the trainer holds it).
    def close(self) -> None:
        for env in self._envs:
            try:
                env.close()
            except Exception as exc:  # noqa: BLE001 - closing must go on for the others
                logger.warning("closing %s failed: %r", self.env_id, exc)
        self._envs = []
        self._pool.shutdown(wait=False)

    def _env(self, i: int) -> Any:
        while len(self._envs) <= i:
            self._envs.append(self.make())
        return self._envs[i]

    def _task_of(self, prompt: Any) -> dict[str, Any]:
        """reset() options for a prompt: its task id when the prompt is one of the env's tasks."""
        text = prompt_text(prompt)
        if self._by_prompt is None:
            env = self._env(0).unwrapped
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
        if self.make_generate is not None:
            generate = self.make_generate(trainer)
        elif getattr(trainer, "use_vllm", False):
            generate = vllm_generate(trainer)
        else:
            generate = hf_generate(trainer)
        budget = int(trainer.max_completion_length)
        envs = [self._env(i) for i in range(len(prompts))]
        options = [self._task_of(p) for p in prompts]
        accelerator = getattr(trainer, "accelerator", None)
        episodes = run_token_episodes(
            envs,
            options,
            chat,
            generate,
            budget,
            pool=self._pool,
            any_active=lambda n: self._any_active(accelerator, n),
        )
        self.last_episodes = episodes
        summaries = [ep.summary() for ep in episodes]
        run_group_hooks(group_hooks(envs[0]), summaries, group_keys(prompts, getattr(trainer, "num_generations", None)))
        out: dict[str, Any] = {
            "prompt_ids": [ep.prompt_ids for ep in episodes],
            "completion_ids": [ep.completion_ids for ep in episodes],
            "logprobs": [ep.logprobs for ep in episodes],
            "env_mask": [ep.mask for ep in episodes],
        }
        for key in EXTRA_FIELDS:
            out[key] = [s[key] for s in summaries]
        return out

    @staticmethod
    def _any_active(accelerator: Any, n: int) -> bool:
        if accelerator is None or getattr(accelerator, "num_processes", 1) <= 1:
            return n > 0
        import torch

        total = accelerator.gather(torch.tensor([n], device=accelerator.device)).sum().item()
        return total > 0


_live: weakref.WeakSet[AWorldRolloutFunc] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for f in list(_live):
        f.close()


def make_rollout_func(
    env_id: EnvLike, *, max_workers: int = 8, generate: Callable[[Any], Generate] | None = None, **env_kwargs: Any
) -> AWorldRolloutFunc:
    """A ``rollout_func`` for ``GRPOTrainer`` that runs each prompt as a multi-turn episode of ``env_id``.

    Args:
        env_id: a registered id (``"AWorld/Code-v0"``, ``"AWorld/MCP-v0"``...) or a zero-argument factory that
            returns an env (wrappers included: the outermost env is stepped).
        max_workers: env steps run concurrently in this many threads.
        generate: ``trainer -> (inputs, max_new_tokens) -> [(ids, logprobs)]``, to override the backend (the
            default is the trainer's vLLM when ``use_vllm=True``, else its HF model).
        env_kwargs: passed to ``gym.make``.

    The returned dict holds ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask`` and the extra fields
    ``env_reward``, ``task_score``, ``reward_components``, ``num_turns``, ``truncation_reason`` and ``task_id``
    (reward functions receive them as keyword arguments; see :func:`env_reward`). The env's group reward hooks run
    on the episodes of each prompt in the batch (a GRPO group) and are included in ``env_reward`` and
    ``reward_components``.
    """
    return AWorldRolloutFunc(env_id, env_kwargs, max_workers=max_workers, generate=generate)
