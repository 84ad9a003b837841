"""A token-recording OpenAI-compatible endpoint: an agent we did not write calls it like any chat model, and every
call's tokens are kept for training.

``POST /v1/chat/completions`` (and ``/e/<episode>/v1/chat/completions``, or the header ``X-AWorld-Episode``):
OpenAI's request with ``tools`` and ``tool_choice``, streamed or not. The endpoint renders the chat template itself
(:mod:`aworld_gym.endpoint.chat`), generates through a token-in/token-out backend
(:mod:`aworld_gym.endpoint.backends`), parses Qwen3/Hermes ``<tool_call>`` blocks into OpenAI ``tool_calls``
(:mod:`aworld_gym.endpoint.completion`), and records per call the prompt ids, the completion ids as sampled, their
logprobs, the finish reason and the weights version (:class:`~aworld_gym.endpoint.calls.CallRecord`), kept apart per
episode (:class:`~aworld_gym.endpoint.calls.Episodes`). A call for an episode that has ended is refused and recorded
nowhere. :class:`TokenEndpoint` serves it in-process (tests, a driver); ``aworld-gym serve-model`` from the command
line. :class:`AgentPolicy` runs an agent program as the policy of an episode (:mod:`aworld_gym.endpoint.agents`).
"""

from aworld_gym.endpoint.agents import AgentContext, AgentPolicy
from aworld_gym.endpoint.backends import Backend, Generated, HFBackend
from aworld_gym.endpoint.calls import CallRecord, Episodes
from aworld_gym.endpoint.server import TokenEndpoint

__all__ = ["AgentContext", "AgentPolicy", "Backend", "CallRecord", "Episodes", "Generated", "HFBackend",
           "TokenEndpoint"]  # fmt: skip
