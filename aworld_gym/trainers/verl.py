"""verl (>= 0.9) agent loop: AWorld environments, multi-turn, token-in/token-out, registered as ``aworld_agent``.

verl runs ``AgentLoopBase.run`` once per sample inside its agent-loop workers, with ``server_manager.generate``
(token ids in, token ids and logprobs out) on its vLLM/SGLang servers. This loop resets an AWorld env, renders its
system prompt and first observation with the tokenizer's chat template, and then alternates: generate (the
model's ids kept exactly as sampled, mask 1) and ``await env.astep`` (the env's answer rendered by the chat
template and appended as ids, mask 0), until the env ends the episode or ``rollout.response_length`` tokens are
spent. The env's summed reward is the trajectory's ``reward_score`` (verl puts it on the last token). The token
bookkeeping is :class:`~aworld_gym.trainers.token_rollout.TokenEpisode`, the same as the TRL adapter's.

Select it per row (``agent_name: aworld_agent`` in the dataset) or as the default
(``actor_rollout_ref.rollout.agent.default_agent_loop=aworld_agent``), and give the env through the agent-loop
YAML (``actor_rollout_ref.rollout.agent.agent_loop_config_path``, see ``recipes/aworld_agent_loop.yaml``) or
per row in ``extra_info``: ``env_id``, ``env_kwargs``, ``task_id`` / ``task_index`` / ``task``, ``seed``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

import aworld_gym  # noqa: F401 - registers the ids
from aworld_gym.core.errors import ConfigError
from aworld_gym.core.rewards import add_group_scores
from aworld_gym.rollout.envs import env_factory, env_name
from aworld_gym.trainers.groups import gate
from aworld_gym.trainers.token_rollout import ChatTokens, TokenEpisode, adhoc_task, prompt_text
from aworld_gym.trainers.verl_data import AGENT_NAME
from aworld_gym.wrappers.reward_shaping import group_hooks

logger = logging.getLogger(__name__)


class EnvPool:
    """Envs of one worker process, reused across samples (MCP servers and browsers are not restarted per sample).

    Keyed by event loop (an env's MCP sessions live on the loop that first used it; verl's worker keeps one),
    env id and kwargs; an env whose episode crashed is closed rather than reused.
    """

    def __init__(self, max_idle_per_key: int = 64) -> None:
        self._free: dict[str, list[Any]] = {}
        self.max_idle_per_key = max_idle_per_key
        self.created = 0

    @staticmethod
    def key(env_id: Any, env_kwargs: Mapping[str, Any]) -> str:
        loop = id(asyncio.get_running_loop())
        name = env_id if isinstance(env_id, str) else f"factory:{id(env_id)}"
        return json.dumps([loop, name, env_kwargs], sort_keys=True, default=str)

    async def acquire(self, env_id: Any, env_kwargs: Mapping[str, Any]) -> tuple[str, Any]:
        """An idle env for ``env_id`` (a registered id with ``env_kwargs``, or a zero-argument factory)."""
        key = self.key(env_id, env_kwargs)
        free = self._free.get(key)
        if free:
            return key, free.pop()
        env = await asyncio.to_thread(env_factory(env_id, env_kwargs or None))
        self.created += 1
        return key, env

    async def release(self, key: str, env: Any, broken: bool = False) -> None:
        if broken or len(self._free.get(key, ())) >= self.max_idle_per_key:
            try:
                await env.aclose()
            except Exception:  # a broken env is dropped either way
                logger.warning("closing an env failed", exc_info=True)
            return
        self._free.setdefault(key, []).append(env)

    async def aclose(self) -> None:
        envs = [e for free in self._free.values() for e in free]
        self._free.clear()
        for env in envs:
            await env.aclose()


POOL = EnvPool()
_CHATS: dict[int, ChatTokens] = {}


def _chat(tokenizer: Any, kwargs: Mapping[str, Any]) -> ChatTokens:
    key = id(tokenizer)
    if key not in _CHATS:
        _CHATS[key] = ChatTokens(tokenizer, dict(kwargs))
    return _CHATS[key]


def _load_factory(spec: Any) -> Any:
    """A factory from a callable or its import path ``"package.module:function"``; ``None`` for none."""
    if spec is None or callable(spec):
        return spec
    module, _, attr = str(spec).partition(":")
    if not module or not attr:
        raise ConfigError(f"env_factory must be a callable or 'package.module:function', got {spec!r}")
    import importlib

    return getattr(importlib.import_module(module), attr)


def _group_record(out: AgentLoopOutput) -> dict[str, Any]:
    """What a group reward hook sees of one sample (the shape of a trajectory record)."""
    f = out.extra_fields
    return {"task_id": f["task_id"], "score": f["task_score"], "reward": out.reward_score,
            "reward_components": dict(f["reward_components"]), "num_turns": out.num_turns,
            "truncation_reason": f["truncation_reason"]}  # fmt: skip


def _plain(obj: Any) -> dict[str, Any]:
    """A plain dict from a dict or an OmegaConf DictConfig (what hydra hands the YAML's values over as)."""
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(obj, DictConfig):
            return dict(OmegaConf.to_container(obj, resolve=True))  # type: ignore[arg-type]
    except ImportError:  # pragma: no cover - verl always brings omegaconf
        pass
    return dict(obj)


def episode_options(extra_info: Mapping[str, Any], raw_prompt: Any) -> dict[str, Any]:
    """``env.reset`` options for a dataset row: its task (by id, index or whole), else an ad-hoc task made from
    the row's prompt; ``{}`` (a task drawn by the env) when the row names none and has no prompt."""
    if "task" in extra_info:
        return {"task": dict(extra_info["task"])}
    if "task_id" in extra_info:
        return {"task_id": str(extra_info["task_id"])}
    if "task_index" in extra_info:
        return {"task_index": int(extra_info["task_index"])}
    text = prompt_text(raw_prompt)
    return {"task": adhoc_task(text)} if text else {}


@register(AGENT_NAME)
class AWorldAgentLoop(AgentLoopBase):
    """Runs one AWorld episode per sample through verl's ``server_manager.generate``.

    Args (from the agent-loop YAML entry, besides verl's own):
        env_id: the default environment (a row's ``extra_info.env_id`` wins).
        env_factory: instead of an id, a zero-argument factory returning an env (wrappers included), or its import
            path ``"package.module:make_env"`` (what a YAML file can hold); a row's ``extra_info.env_factory`` wins.
        env_kwargs: ``gym.make`` kwargs (merged under a row's ``extra_info.env_kwargs``), with an id only.
    """

    def __init__(
        self,
        *args: Any,
        env_id: str | None = None,
        env_factory: Any = None,
        env_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("tools", None)  # verl's own tool list: our tools are the env's MCP servers
        super().__init__(*args, **kwargs)
        self.env_id = env_id
        self.env_factory = env_factory
        self.env_kwargs = _plain(env_kwargs or {})
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        uid = kwargs.get("uid")
        if uid is None:
            return (await self._run(sampling_params, **kwargs))[0]
        uid, groups = str(uid), gate()
        groups.enter(uid)  # before any await: every member of this worker's group has entered when one leaves
        try:
            out, rubric = await self._run(sampling_params, **kwargs)
        except BaseException:
            await groups.leave(uid, None, None)
            raise
        record = None if rubric is None else _group_record(out)
        scores = await groups.leave(uid, record, rubric)
        if record is not None and scores is not None:  # the env's group reward hooks, on the complete group
            add_group_scores([record], [scores])
            out.reward_score = record["reward"]
            out.extra_fields.update(reward_components=record["reward_components"], env_reward=record["reward"],
                                    group_reward_components=record["group_reward_components"])  # fmt: skip
        return out

    async def _run(self, sampling_params: dict[str, Any], **kwargs: Any) -> tuple[AgentLoopOutput, Any]:
        """One episode; returns its output and the env's group hooks (``None``: none, or the env did not start)."""
        extra = dict(kwargs.get("extra_info") or {})
        factory = _load_factory(extra.get("env_factory") or (None if extra.get("env_id") else self.env_factory))
        env_id = factory or extra.get("env_id") or self.env_id
        if not env_id:
            raise ConfigError(
                "aworld_agent needs an env: extra_info.env_id / env_factory in the data, or env_id / env_factory in "
                "its YAML"
            )
        env_kwargs = {} if factory else {**self.env_kwargs, **_plain(extra.get("env_kwargs") or {})}
        options = episode_options(extra, kwargs.get("raw_prompt"))
        chat = _chat(self.tokenizer, self.apply_chat_template_kwargs)
        request_id = uuid.uuid4().hex
        timing = {"generate": 0.0, "env": 0.0}
        episode = TokenEpisode(chat, self.response_length)
        t = time.perf_counter()
        started = await self._start(episode, env_id, env_kwargs, options, extra.get("seed"))
        timing["env"] += time.perf_counter() - t
        if isinstance(started, BaseException):
            return self._failed(episode, started, env_name(env_id)), None
        key, env = started
        rubric = group_hooks(env)
        self._logprobs = self._config_logprobs()
        broken = False
        try:
            while not episode.done:
                cap = int(sampling_params.get("max_tokens") or episode.remaining)
                params = {**sampling_params, "max_tokens": min(cap, episode.remaining)}
                t = time.perf_counter()
                out = await self.server_manager.generate(
                    request_id=request_id, prompt_ids=episode.generation_input(), sampling_params=params
                )
                timing["generate"] += time.perf_counter() - t
                self._logprobs = self._logprobs or out.log_probs is not None
                text = episode.add_model_turn(list(out.token_ids), out.log_probs)
                if text is None:
                    break
                t = time.perf_counter()
                await episode.astep(env, text)
                timing["env"] += time.perf_counter() - t
            broken = episode.truncation_reason == "env_crash"
        except BaseException:
            broken = True
            raise
        finally:
            await POOL.release(key, env, broken)
        return self._output(episode, timing, env_name(env_id, env)), rubric

    async def _start(
        self, episode: TokenEpisode, env_id: Any, env_kwargs: dict[str, Any], options: dict[str, Any], seed: Any
    ) -> tuple[str, Any] | BaseException:
        """Reset a pooled env on the row's task (a second try on a fresh env); the error if both fail."""
        error: BaseException | None = None
        for _ in range(2):
            try:
                key, env = await POOL.acquire(env_id, env_kwargs)
            except Exception as exc:  # noqa: BLE001 - reported in the sample's output, the batch goes on
                return exc
            try:
                _, info = await env.areset(seed=seed, options=options)
            except Exception as exc:  # noqa: BLE001 - retried once on a fresh env, then reported
                error = exc
                await POOL.release(key, env, broken=True)
                continue
            episode.start(env.unwrapped.messages, info.get("task_id"))
            episode.prompt_ids = self._cap_text_prompt_length(episode.prompt_ids)
            return key, env
        assert error is not None
        return error

    def _failed(self, ep: TokenEpisode, error: BaseException, env_id: str) -> AgentLoopOutput:
        """A sample whose env could not start: one masked token, reward 0, the error in ``extra_fields``."""
        logger.warning("aworld_agent: the env could not start: %r", error)
        ep.prompt_ids = ep.prompt_ids or [ep.chat.eos_id]
        ep.completion_ids, ep.mask, ep.logprobs = [ep.chat.eos_id], [0], [0.0]
        ep.truncation_reason = "env_error"
        self._logprobs = self._config_logprobs()
        out = self._output(ep, {"generate": 0.0, "env": 0.0}, env_id)
        out.extra_fields["error"] = f"{type(error).__name__}: {error}"
        return out

    def _config_logprobs(self) -> bool:
        """Whether verl asked its servers for logprobs (then every sample carries them, zeros where none)."""
        return bool(self.rollout_config.get("calculate_log_probs", False))

    def _output(self, ep: TokenEpisode, timing: dict[str, float], env_id: str) -> AgentLoopOutput:
        n = self.response_length
        return AgentLoopOutput(
            prompt_ids=ep.prompt_ids,
            response_ids=ep.completion_ids[:n],
            response_mask=ep.mask[:n],
            # present whenever the server returned logprobs, so that a batch never mixes None and tensors
            response_logprobs=ep.logprobs[:n] if self._logprobs else None,
            reward_score=ep.reward,
            # the prompt, every model turn and every env answer that went into the token sequence
            num_turns=1 + ep.num_turns + ep.env_turns,
            metrics=AgentLoopMetrics(generate_sequences=timing["generate"], tool_calls=timing["env"]),
            extra_fields={
                "env_id": env_id,
                "task_id": ep.task_id,
                "task_score": ep.score,
                "env_reward": ep.reward,
                "truncation_reason": ep.truncation_reason or "",
                "terminated": ep.terminated,
                "reward_components": dict(ep.components),
                "error": "",
            },
        )
