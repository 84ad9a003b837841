"""TRL ``GRPOTrainer`` adapters: token-exact multi-turn rollouts on any AWorld environment.

Two ways in, both for ``trl>=1.16``:

- :func:`make_rollout_func` for ``GRPOTrainer(rollout_func=...)``: every prompt of the batch is an episode of
  the env, generated with the trainer's own model (vLLM server/colocate when ``use_vllm=True``, the HF model's
  ``generate`` otherwise). The model's sampled ids and logprobs are kept exactly; env turns are appended as ids
  with ``env_mask = 0``; ``max_completion_length`` bounds the whole multi-turn completion. The env's reward and
  its components go out as extra fields, read by :func:`env_reward` / :func:`component_reward`.
- :func:`environment_factory` for ``GRPOTrainer(environment_factory=...)``: a class whose public methods are the
  env's MCP tools (typed signatures, Google docstrings), plus ``answer`` to submit the final answer, ``reset``
  and ``get_reward``. TRL then runs its own tool loop.

:func:`task_dataset` builds the ``train_dataset`` (one row per task: ``prompt``, ``task_id``).
"""

from __future__ import annotations

import atexit
import inspect
import json
import logging
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import aworld_gym  # noqa: F401 - registers the ids
from aworld_gym.core.rewards import apply_group_hooks
from aworld_gym.rollout.envs import EnvLike, env_factory, env_name, run_coroutine
from aworld_gym.trainers.token_rollout import (
    ChatTokens,
    Generate,
    TokenEpisode,
    adhoc_task,
    prompt_text,
    run_token_episodes,
)
from aworld_gym.wrappers.reward_shaping import group_hooks

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


def group_keys(prompts: Sequence[Any], num_generations: int | None) -> list[str]:
    """The GRPO group of each prompt of a batch: TRL repeats each prompt ``num_generations`` times in a row, so
    consecutive blocks of identical prompts are groups (two groups of one prompt stay apart); otherwise, the text."""
    texts = [prompt_text(p) for p in prompts]
    g = int(num_generations or 0)
    if g > 1 and len(texts) % g == 0 and all(len(set(texts[i : i + g])) == 1 for i in range(0, len(texts), g)):
        return [f"{i // g}:{t}" for i, t in enumerate(texts)]
    return texts


def run_group_hooks(rubric: Any, summaries: list[dict[str, Any]], keys: Sequence[str]) -> None:
    """Run group reward hooks on each GRPO group of a batch (the episodes with the same ``key``), and fold their
    components into ``env_reward`` / ``reward_components`` (the fields TRL's reward functions read)."""
    if rubric is None or not rubric.group:
        return
    by_key: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        by_key.setdefault(key, []).append(i)
    for idxs in by_key.values():
        records = [{**summaries[i], "reward": summaries[i]["env_reward"], "score": summaries[i]["task_score"]}
                   for i in idxs]  # fmt: skip
        apply_group_hooks(rubric, records, run_coroutine)
        for i, rec in zip(idxs, records, strict=True):
            summaries[i]["env_reward"] = rec["reward"]
            summaries[i]["reward_components"] = rec["reward_components"]
            summaries[i]["group_reward_components"] = rec.get("group_reward_components", {})


def group_reward(completions: Sequence[Any], environments: Sequence[Any] | None = None, **_: Any) -> list[float]:
    """A TRL reward function for ``environment_factory`` training: the env's group reward hooks, run on the
    rollouts of each task in the batch (a GRPO group), each hook seeing every rollout's return and components as
    the other adapters do. Add it to ``reward_funcs`` next to the env's ``get_reward``: it returns only the group
    part."""
    if environments is None:
        raise ValueError("group_reward needs GRPOTrainer(environment_factory=...): the environments are missing")
    rubric = group_hooks(environments[0]._env) if environments else None
    summaries = [
        {"env_reward": e.get_reward(), "task_score": e.score or 0.0, "reward_components": dict(e.components),
         "task_id": e.task_id, "num_turns": e.turns, "truncation_reason": e.truncation_reason or ""}
        for e in environments
    ]  # fmt: skip
    before = [s["env_reward"] for s in summaries]
    run_group_hooks(rubric, summaries, [str(e.task_id) for e in environments])
    return [float(s["env_reward"]) - b for s, b in zip(summaries, before, strict=True)]


# ----- generation backends -------------------------------------------------------------------------------
def model_generate(model: Any, tokenizer: Any, temperature: float = 1.0, **generate_kwargs: Any) -> Generate:
    """Sample with an HF causal LM: left-padded batches, the sampled ids and their logprobs under
    ``log_softmax(logits / temperature)`` (how TRL scores them)."""
    import torch

    tok = getattr(tokenizer, "tokenizer", tokenizer)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    def generate(inputs: list[list[int]], max_new_tokens: int) -> list[tuple[list[int], list[float] | None]]:
        if not inputs:
            return []
        width = max(len(x) for x in inputs)
        ids = torch.tensor([[pad] * (width - len(x)) + x for x in inputs])
        attn = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in inputs])
        kwargs = {"do_sample": True, "temperature": temperature, "pad_token_id": pad, "eos_token_id": tok.eos_token_id}
        kwargs.update(generate_kwargs)
        kwargs.update(max_new_tokens=max_new_tokens, output_logits=True, return_dict_in_generate=True)
        kwargs.pop("cache_implementation", None)
        with torch.no_grad():
            device = next(model.parameters()).device
            out = model.generate(input_ids=ids.to(device), attention_mask=attn.to(device), **kwargs)
        new = out.sequences[:, width:].cpu()
        logits = torch.stack(out.logits, dim=1).float().cpu() / (temperature or 1.0)
        lps = torch.log_softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        return [(new[i].tolist(), lps[i].tolist()) for i in range(len(inputs))]

    return generate


def hf_generate(trainer: Any) -> Generate:
    """Sample with the trainer's HF model (``unwrap_model_for_generation``, the trainer's sampling settings)."""
    from trl.models.utils import unwrap_model_for_generation

    kwargs = dict(getattr(trainer, "generation_kwargs", None) or {})
    temperature = float(kwargs.pop("temperature", None) or getattr(trainer, "temperature", 1.0) or 1.0)

    def generate(inputs: list[list[int]], max_new_tokens: int) -> list[tuple[list[int], list[float] | None]]:
        with unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
            gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
        ) as model:
            return model_generate(model, trainer.processing_class, temperature, **kwargs)(inputs, max_new_tokens)

    return generate


def vllm_generate(trainer: Any) -> Generate:
    """Sample with the trainer's vLLM (server or colocate mode): token ids in, token ids and logprobs out."""
    gen = trainer.vllm_generation

    def generate(inputs: list[list[int]], max_new_tokens: int) -> list[tuple[list[int], list[float] | None]]:
        saved = gen.max_completion_length
        gen.max_completion_length = max_new_tokens
        try:
            _, completion_ids, logprobs, _ = gen.generate(prompts=inputs, images=None, num_generations=1)
        finally:
            gen.max_completion_length = saved
        out = []
        for i, ids in enumerate(completion_ids):
            lp = None if logprobs is None else [x[0] if isinstance(x, list | tuple) else x for x in logprobs[i]]
            out.append((list(ids), lp))
        return out

    return generate


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


# ----- environment_factory -------------------------------------------------------------------------------
_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict}


def _hint(schema: dict[str, Any]) -> Any:
    """A Python type hint for a JSON schema property (as transformers' get_json_schema reads them back)."""
    if "enum" in schema and schema["enum"] and all(isinstance(v, str | int | float | bool) for v in schema["enum"]):
        return Literal[tuple(schema["enum"])]
    kind = schema.get("type")
    if isinstance(kind, list):
        hints = [_hint({**schema, "type": k}) for k in kind if k != "null"]
        hint: Any = hints[0] if hints else str
        for h in hints[1:]:
            hint = hint | h
        return hint | None if "null" in kind else hint
    if kind == "array":
        items = schema.get("items")
        return list[_hint(items)] if isinstance(items, dict) and items.get("type") else list
    if kind in _JSON_TYPES:
        return _JSON_TYPES[kind]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return _hint({"type": [s.get("type", "string") for s in schema[key] if isinstance(s, dict)]})
    return str


def _docstring(description: str, props: dict[str, Any]) -> str:
    lines = [(description or "A tool.").strip().replace("\n\n", "\n"), "", "Args:"]
    for name, prop in props.items():
        desc = " ".join(str(prop.get("description") or f"The {name} argument.").split())
        lines.append(f"    {name}: {desc}")
    if not props:
        lines = lines[:-2]
    return "\n".join(lines)


def _tool_method(name: str, schema: dict[str, Any]) -> Callable[..., str]:
    fn = schema.get("function", schema)
    params = fn.get("parameters") or {}
    props: dict[str, Any] = dict(params.get("properties") or {})
    required = set(params.get("required") or [])
    order = [p for p in props if p in required] + [p for p in props if p not in required]
    sig_params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    for p in order:
        hint = _hint(props[p])
        if p in required:
            sig_params.append(inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, annotation=hint))
        else:
            hint = hint | None
            sig_params.append(inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, annotation=hint, default=None))
        annotations[p] = hint
    annotations["return"] = str

    def method(self: Any, **kwargs: Any) -> str:
        args = {k: v for k, v in kwargs.items() if v is not None or k in required}
        return self._call_tool(name, args)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = _docstring(fn.get("description", ""), {p: props[p] for p in order})
    method.__annotations__ = annotations
    method.__signature__ = inspect.Signature(sig_params, return_annotation=str)  # type: ignore[attr-defined]
    return method


class AWorldToolEnv:
    """Base of the classes made by :func:`environment_factory` (one env per instance)."""

    env_id: str = ""
    env_kwargs: dict[str, Any] = {}  # noqa: RUF012 - set per generated subclass
    _make_env: Callable[[], Any] = staticmethod(lambda: None)  # type: ignore[assignment] - set per subclass
    ANSWER_HINT = "\n\nUse the tools as needed; when you know the final answer, call `answer` with it."

    def __init__(self) -> None:
        self._env = self._make_env()
        self._over = True
        self._return = 0.0
        self.components: dict[str, float] = {}
        self.turns = 0
        self.truncation_reason: str | None = None
        self.task_id: str | None = None
        self.score: float | None = None
        _tool_envs.add(self)

    def reset(self, **row: Any) -> str | None:
        """Start the episode on the row's task (``task_id`` column, else the prompt's text)."""
        options: dict[str, Any] = {}
        if row.get("task_id") is not None:
            options["task_id"] = row["task_id"]
        else:
            options["task"] = adhoc_task(prompt_text(row.get("prompt")))
        _, info = self._env.reset(options=options)
        self.task_id = info.get("task_id")
        self.score: float | None = None
        self._over, self._return, self.components, self.turns = False, 0.0, {}, 0
        self.truncation_reason = None
        return self.ANSWER_HINT

    def get_reward(self) -> float:
        """The episode's return: the task score when ``answer`` was called, plus the env's shaping components."""
        return self._return

    def answer(self, answer: str) -> str:
        """Submit the final answer to the task; this ends the episode.

        Args:
            answer: The final answer.
        """
        return self._act(f"<answer>{answer}</answer>")

    def _close(self) -> None:
        """Close the env (not a tool: TRL exposes every public method to the model)."""
        self._env.close()

    def _call_tool(self, name: str, args: dict[str, Any]) -> str:
        call = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
        return self._act(f"<tool_call>\n{call}\n</tool_call>")

    def _act(self, text: str) -> str:
        if self._over:
            return "The episode is over; no more tool calls are accepted."
        _, reward, term, trunc, info = self._env.step(text)
        self.turns += 1
        self._return += float(reward)
        for k, v in (info.get("reward_components") or {}).items():
            self.components[k] = self.components.get(k, 0.0) + float(v)
        if info.get("score") is not None:
            self.score = float(info["score"])
        # what the model is shown of each call (a task's note after the last one, e.g. the page now, included)
        log = getattr(self._env.unwrapped, "turns", None)
        shown = [m["content"] for m in log[-1]["messages"] if m["role"] == "tool"] if log else []
        results = info.get("tool_results") or []
        if not shown:
            shown = [r["text"] for r in results]
        out = "\n".join(shown) if shown else (info.get("action_error") or "")
        if term or trunc:
            self._over = True
            self.truncation_reason = info.get("truncation_reason")
            if info.get("answer") is not None:
                out = "Your final answer was recorded."
            else:
                out = (out + "\n" if out else "") + f"The episode ended ({self.truncation_reason})."
        return out


_tool_envs: weakref.WeakSet[AWorldToolEnv] = weakref.WeakSet()


@atexit.register
def _close_tool_envs() -> None:
    for e in list(_tool_envs):
        try:
            e._close()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def environment_factory(env_id: EnvLike, **env_kwargs: Any) -> type[AWorldToolEnv]:
    """A class for ``GRPOTrainer(environment_factory=...)``: one instance per rollout, the env's MCP tools as
    typed, documented methods, ``answer(answer)`` to finish, ``reset(**row)`` and ``get_reward()``.

    ``env_id`` is a registered id (with ``env_kwargs``) or a zero-argument factory returning an env; each instance
    steps the outermost env. Add :func:`group_reward` to ``reward_funcs`` to run the env's group reward hooks.
    """
    make = env_factory(env_id, env_kwargs)
    probe = make()
    try:
        schemas = probe.unwrapped.tools
        name = env_name(env_id, probe)
    finally:
        probe.close()
    namespace: dict[str, Any] = {"env_id": name, "env_kwargs": dict(env_kwargs), "_make_env": staticmethod(make)}
    reserved = set(dir(AWorldToolEnv))
    for schema in schemas:
        tool = schema["function"]["name"]
        if tool in reserved or not tool.isidentifier():
            raise ValueError(f"tool {tool!r} of {name} cannot be a method name; rename it with allow_tools/deny_tools")
        namespace[tool] = _tool_method(tool, schema)
    cls_name = "".join(ch for ch in name.title() if ch.isalnum()) + "Tools"
    return type(cls_name, (AWorldToolEnv,), namespace)


def ensure_tool_parser(tokenizer: Any) -> Any:
    """Give ``tokenizer`` TRL's Qwen3 response parser when TRL does not recognise its chat template.

    ``environment_factory`` needs ``tokenizer.parse_response`` to find tool calls. TRL sets it for the chat
    templates it knows (real Qwen3 checkpoints); a Qwen3-format template it does not know by heart (e.g. the tiny
    offline Qwen3 of ``aworld_gym.trainers.tiny_qwen3``) gets TRL's Qwen3 parser here.
    """
    from trl import chat_template_utils as ctu

    if getattr(tokenizer, "response_schema", None) is not None or getattr(tokenizer, "response_template", None):
        return tokenizer
    try:
        return ctu.add_response_schema(tokenizer)
    except ValueError:
        if getattr(ctu, "_SUPPORTS_RESPONSE_TEMPLATE", False):
            tokenizer.response_template = ctu.qwen3_template
        else:
            tokenizer.response_schema = ctu.qwen3_schema
        return tokenizer
