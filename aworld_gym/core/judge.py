"""LLMJudge: an episode reward hook that asks any OpenAI-compatible chat endpoint to grade the episode.

Async (awaited on the async face, run on the env's loop on the sync face), so a slow judge never blocks other
episodes. Its failure (no endpoint, an HTTP error, an unreadable verdict) is a recorded reward-component error
(``info["reward_errors"]["judge"]``), never a crash of the run.
"""

from __future__ import annotations

import os
import re

from aworld_gym.base.errors import ConfigError
from aworld_gym.core.rewards import EpisodeContext

DEFAULT_RUBRIC = (
    "You grade an AI agent's work. Given the task, the reference answer (if any), the agent's tool calls and its "
    "final answer, reply with a score between 0 and 1 inside <score></score> tags (1: fully correct and well "
    "supported; 0: wrong or missing), after at most three sentences of reasoning."
)
_SCORE = re.compile(r"<score>\s*([-+]?\d*\.?\d+)\s*</score>", re.I)


class LLMJudge:
    """Grades a finished episode with a chat model; the component is its score in [0, 1].

    Args:
        base_url: the endpoint's base URL (``.../v1``); default ``LLM_BASE_URL``.
        model: the model name; default ``LLM_MODEL_NAME``.
        api_key: the bearer token; default ``LLM_API_KEY`` (none sent when empty).
        rubric: the system prompt that says how to grade.
        name: the reward component's name.
        timeout_s: per-request timeout.
        max_retries: retries of transient failures (connection errors, timeouts, 408/409/429/5xx), with backoff.
        max_transcript_chars: how much of the tool calls and results the judge is shown.
    """

    on = "episode"

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        *,
        rubric: str = DEFAULT_RUBRIC,
        name: str = "judge",
        timeout_s: float = 60.0,
        max_retries: int = 2,
        max_transcript_chars: int = 8000,
    ) -> None:
        self.base_url = (base_url or os.environ.get("LLM_BASE_URL") or "").rstrip("/")
        self.model = model or os.environ.get("LLM_MODEL_NAME") or ""
        self.api_key = api_key if api_key is not None else os.environ.get("LLM_API_KEY", "")
        self.rubric, self.name = rubric, name
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self.max_transcript_chars = max_transcript_chars

    def messages(self, ctx: EpisodeContext) -> list[dict[str, str]]:
        """The judge's conversation for an episode."""
        lines = []
        for t in ctx.turns:
            for call, result in zip(t.get("tool_calls", []), t.get("tool_results", []), strict=False):
                lines.append(f"- {call.get('name')}({call.get('arguments')}) -> {str(result.get('text'))[:500]}")
        transcript = "\n".join(lines)[: self.max_transcript_chars] or "(no tool calls)"
        reference = ctx.task.answer if ctx.task.answer is not None else "(none given)"
        ending = ctx.answer if ctx.answer is not None else f"(no answer: the episode ended by {ctx.truncation_reason})"
        user = (
            f"Task:\n{ctx.task.prompt}\n\nReference answer: {reference}\n\nTool calls:\n{transcript}\n\n"
            f"Final answer: {ending}"
        )
        return [{"role": "system", "content": self.rubric}, {"role": "user", "content": user}]

    async def __call__(self, ctx: EpisodeContext) -> dict[str, float]:
        if not self.base_url or not self.model:
            raise ConfigError("LLMJudge needs base_url= and model= (or LLM_BASE_URL and LLM_MODEL_NAME)")
        text = await self._complete(self.messages(ctx))
        match = _SCORE.search(text)
        if match is None:
            raise ValueError(f"the judge's reply has no <score>: {text[:200]!r}")
        return {self.name: min(1.0, max(0.0, float(match.group(1))))}

    async def _complete(self, messages: list[dict[str, str]]) -> str:
        from openai import AsyncOpenAI

        # The client retries only what is transient (connection errors, timeouts, 408/409/429/5xx), with backoff.
        async with AsyncOpenAI(
            base_url=self.base_url, api_key=self.api_key or "none", timeout=self.timeout_s, max_retries=self.max_retries
        ) as client:
            response = await client.chat.completions.create(model=self.model, messages=messages, temperature=0.0)
        return str(response.choices[0].message.content or "")
