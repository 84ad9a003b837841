"""Policies: what turns an observation into the next action text.

A policy is any object with ``act(env, observation, info) -> str`` (``env`` is the unwrapped env, read-only, so a
policy can read ``env.messages``, ``env.tools`` and, for scripted reference policies, ``env.task``).
Model-backed policies (OpenAI-compatible endpoints, local HF models) come with the rollout issue.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from aworld_gym.base.errors import ConfigError
from aworld_gym.core import registry
from aworld_gym.core.actions import Action


@runtime_checkable
class Policy(Protocol):
    """Maps the current observation to the model's next action: its raw text, or an
    :class:`~aworld_gym.core.actions.Action` (text, the endpoint's parsed tool calls, the sample with token ids,
    logprobs and model version). ``aact`` is used on the async face when the policy has one. A policy with
    ``finish_episode(env, traj)`` (sync or async) has it called once when an episode it acted in ended, however it
    ended (``aworld_gym.endpoint.AgentPolicy`` closes its agent's calls there and attaches their tokens)."""

    name: str

    def act(self, env: Any, observation: str, info: dict[str, Any]) -> str | Action: ...


@dataclass(frozen=True)
class ContextLimit:
    """A text policy's context: before each turn, ``count(messages) + max_new_tokens > max_model_len`` ends the
    episode with ``context_limit``. A policy that knows its tokenizer has one as ``policy.context_limit``."""

    max_model_len: int
    max_new_tokens: int
    count: Any  # (messages) -> int
    overflow_reward: float = 0.0

    def overflows(self, messages: list[dict[str, Any]]) -> bool:
        return int(self.count(messages)) + self.max_new_tokens > self.max_model_len


class Latency:
    """Mixin: a fixed per-turn delay standing in for a model server (``--policy-latency``)."""

    latency_s: float = 0.0

    def _wait(self) -> None:
        if self.latency_s > 0:
            time.sleep(self.latency_s)

    async def _await(self) -> None:
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)


class ScriptedPolicy(Latency):
    """Base of the scripted (model-free) policies: ``decide(env)`` picks the action; ``act``/``aact`` add the
    optional fixed latency that stands in for a model server."""

    name = "reference"

    def __init__(self, latency_s: float = 0.0) -> None:
        self.latency_s = latency_s

    def decide(self, env: Any) -> str:
        raise NotImplementedError

    def act(self, env: Any, observation: str, info: dict[str, Any]) -> str:
        self._wait()
        return self.decide(env)

    async def aact(self, env: Any, observation: str, info: dict[str, Any]) -> str:
        await self._await()
        return self.decide(env)


async def policy_act(policy: Policy, env: Any, observation: str, info: dict[str, Any]) -> str | Action:
    """The policy's next action from async code: its ``aact`` if it has one, else ``act`` in a worker thread."""
    aact = getattr(policy, "aact", None)
    if aact is not None:
        return await aact(env, observation, info)
    return await asyncio.to_thread(policy.act, env, observation, info)


PolicyFactory = Callable[..., Policy]

# The model-backed policies by name, imported when asked for (they build on this module's contract: a name, not an
# import, keeps the contract below them).
MODEL_POLICIES: dict[str, str] = {
    "openai": "aworld_gym.rollout.policies.openai_policy:OpenAIPolicy",
    "hf": "aworld_gym.rollout.policies.hf_policy:HFPolicy",
}


def make_policy(name: str, env_id: str, latency_s: float = 0.0, **kwargs: Any) -> Policy:
    """Build a policy by name for ``env_id`` (a registered id, or Gymnasium's ``"module:Id"``: the module is imported).

    ``"reference"``: the env's scripted solver (an id that is not registered raises Gymnasium's error); ``"openai"``: any OpenAI-compatible endpoint
    (:class:`~aworld_gym.rollout.policies.openai_policy.OpenAIPolicy`); ``"hf"``: a local transformers model
    (:class:`~aworld_gym.rollout.policies.hf_policy.HFPolicy`).
    """
    if latency_s < 0:
        raise ConfigError("--policy-latency must be >= 0")
    if name == "reference":
        env_id = registry.resolve(env_id)  # "module:Id": the module registers the id and its reference policy
        target = registry.reference_policy(env_id)
        if target is None:
            import gymnasium as gym

            gym.spec(env_id)  # an id that is not registered: Gymnasium's own error, with its "Did you mean"
            known = sorted(registry.REFERENCE_POLICIES)
            raise ConfigError(
                f"{env_id} has no reference policy (aworld_gym.register(..., reference_policy=)); ids with one: {known}"
            )
        return registry.load(target)(latency_s=latency_s, **kwargs)
    if name in MODEL_POLICIES:
        return registry.load(MODEL_POLICIES[name])(**kwargs)
    raise ConfigError(f"unknown policy {name!r}; choose 'reference', 'openai' or 'hf'")
