"""Token-exact episodes in batches, for trainers that generate a whole batch at once (TRL's ``rollout_func``).

Each episode is the episode driver in token mode (:mod:`aworld_gym.rollout.tokens`), one coroutine per episode on
a loop of its own; a batcher gathers their generation requests, and when every unfinished episode is waiting for
its next turn, the trainer's thread generates them in one batch (lock-step turns: one ``generate`` call per turn
for the whole batch, on the caller's thread, where the model and the distributed state live).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import queue
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aworld_gym.core.trajectory import Trajectory
from aworld_gym.rollout.driver import run_episode
from aworld_gym.rollout.pool import EnvPool, run_pooled
from aworld_gym.rollout.tokens import ChatTokens, Generate, TokenMode
from aworld_gym.trainers.seam.env_loop import EnvLoop
from aworld_gym.trainers.seam.overflow import OverflowWatch

__all__ = [
    "adhoc_task",
    "episode_options",
    "prompt_text",
    "run_token_batch",
    "scripted_episode",
    "token_episodes",
]

Reply = Callable[[Any, BaseException | None], None]


class Batcher:
    """Generation requests of a batch's episodes (on their loop), handed to the trainer's thread in one batch when
    every unfinished episode is waiting."""

    def __init__(self, n: int, requests: queue.Queue[Any]) -> None:
        self.active, self.requests = n, requests
        self.waiting: dict[int, tuple[list[int], int, asyncio.Future[Any]]] = {}

    async def generate(self, i: int, ids: list[int], max_new: int) -> Any:
        fut = asyncio.get_running_loop().create_future()
        self.waiting[i] = (ids, max_new, fut)
        self._flush()
        return await fut

    def done(self) -> None:
        self.active -= 1
        self._flush()

    def _flush(self) -> None:
        if self.waiting and len(self.waiting) >= self.active:
            batch = sorted(self.waiting.items())
            self.waiting = {}
            loop = asyncio.get_running_loop()

            def reply(outs: Any, err: BaseException | None) -> None:
                for k, (_, (_, _, fut)) in enumerate(batch):
                    if err is not None:
                        fut.set_exception(err)
                    else:
                        fut.set_result(outs[k])

            inputs = [ids for _, (ids, _, _) in batch]
            max_new = max(m for _, (_, m, _) in batch)
            self.requests.put((inputs, max(max_new, 1), lambda o, e: loop.call_soon_threadsafe(reply, o, e)))
        elif self.active <= 0:
            self.requests.put(None)


def run_token_batch(
    pool: EnvPool,
    options: Sequence[dict[str, Any]],
    mode: Callable[[Callable[..., Any]], TokenMode],
    generate: Generate,
    *,
    envs: EnvLoop,
    env_id: str = "",
    groups: Sequence[str | None] | None = None,
    retry_void: int = 0,
    any_active: Callable[[int], bool] | None = None,
    watch: OverflowWatch | None = None,
) -> list[Trajectory]:
    """Run one token-mode episode per entry of ``options`` on envs of ``pool``, the episodes on ``envs`` (the loop,
    in a thread of its own, where the envs' sessions live) and every generation on this thread.

    Args:
        mode: ``episode's generate -> TokenMode`` (the chat template, budget and context limit of the run).
        generate: the batch backend ``(inputs, max_new_tokens) -> [(ids, logprobs)]``.
        any_active: ``any_active(n_local)`` decides whether another turn's ``generate`` runs (distributed trainers:
            every process joins each generate call while any process has an unfinished episode).
        watch: the run's :class:`~aworld_gym.trainers.seam.overflow.OverflowWatch` (default: one for this call):
            episodes that end ``context_limit`` before the model's first token are warned about once per watch, and
            a batch where every one does raises :class:`~aworld_gym.base.errors.PromptOverflowError`.
    """
    requests: queue.Queue[Any] = queue.Queue()
    n = len(options)
    failure: list[BaseException] = []
    modes: list[TokenMode | None] = [None] * n

    async def main() -> list[Trajectory]:
        batcher = Batcher(n, requests)

        async def one(i: int) -> Trajectory:
            async def gen(ids: list[int], max_new: int) -> Any:
                return await batcher.generate(i, ids, max_new)

            modes[i] = mode(gen)
            try:
                return await run_pooled(pool, None, env_id=env_id, options=dict(options[i]), sample=i,
                                        group=groups[i] if groups else None, tokens=modes[i],
                                        retry_void=retry_void)  # fmt: skip
            finally:
                batcher.done()

        if n == 0:
            requests.put(None)
        return list(await asyncio.gather(*(one(i) for i in range(n))))

    fut = envs.submit(main())
    while True:
        item = requests.get()
        if item is None:
            break
        inputs, max_new, reply = item
        if any_active is not None:
            any_active(len(inputs))  # every process joins the same number of collective calls
        try:
            outs, err = generate(inputs, max_new), None
        except BaseException as exc:  # noqa: BLE001 - handed to the episodes, then raised here
            outs, err = None, exc
            failure.append(exc)
        reply(outs, err)
    trajectories = fut.result()
    while any_active is not None and any_active(0):
        generate([], 1)  # other processes still have episodes: join their generate calls
    if failure:
        raise failure[0]  # the trainer's own model failed: a bug to see, not an episode to mask
    (watch or OverflowWatch()).check([(t, m) for t, m in zip(trajectories, modes, strict=True) if m is not None])
    return trajectories


def token_episodes(
    make: Callable[[], Any], options: Sequence[dict[str, Any]], chat: ChatTokens, generate: Generate, budget: int,
    **mode: Any,
) -> list[Trajectory]:  # fmt: skip
    """:func:`run_token_batch` with a pool and a loop of its own, both closed after (evaluation, tests);
    ``mode``: :class:`~aworld_gym.rollout.tokens.TokenMode`'s keywords (``max_model_len``, ...)."""
    pool, envs = EnvPool(make), EnvLoop("aworld-gym-token-episodes")
    try:
        return run_token_batch(pool, options, lambda gen: TokenMode(chat, gen, budget, **mode), generate, envs=envs)
    finally:
        envs.call(pool.aclose(), timeout=120)
        envs.stop()


def scripted_episode(
    env: Any, chat: ChatTokens, actions: list[str], options: dict[str, Any] | None = None, budget: int = 1024
) -> Trajectory:
    """A token-mode episode whose model turns are given texts (each closed with the eos token): demonstrations for
    supervised warm starts, and rollouts with known token ids for tests."""
    turns = iter(actions)

    def generate(ids: list[int], max_new: int) -> tuple[list[int], None]:
        text = next(turns, None)
        return ([*chat.encode(text), chat.eos_id] if text is not None else [chat.eos_id]), None

    return run_episode(env, options=options or {}, tokens=TokenMode(chat, generate, budget))


def prompt_text(prompt: Any) -> str:
    """The text of a dataset prompt: the last user message of a conversation, or the string itself."""
    if isinstance(prompt, list):
        users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        text = users[-1]["content"] if users else ""
        return text if isinstance(text, str) else json.dumps(text)
    return "" if prompt is None else str(prompt)


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


def adhoc_task(text: str) -> dict[str, Any]:
    """A task without a reference answer for a prompt that is not one of the env's tasks (stable id)."""
    return {"id": "adhoc-" + hashlib.sha1(text.encode()).hexdigest()[:12], "prompt": text}
