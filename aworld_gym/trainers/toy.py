"""The tool-choice environment: a small MCP environment where the tool matters, and a warm start for the tiny Qwen3.

``AWorld/MCP-v0`` on an in-process MCP server with three tools: ``add(a, b)``, ``multiply(a, b)`` and
``lookup(key)`` over a table of values drawn from the task set's seed. Each question names its numbers ("What is
the product of 7 and 4?") or a key ("What is the value stored under key 11?"), and the operation must be read from
its wording. An episode scores 1 only when the answer is right *and* the right tool was called in the episode
(:func:`right_tool`, an episode reward hook, takes the task score back otherwise): the lookup values cannot be
known without the tool, and a model that computes a product in its head earns nothing. Train and held-out task
sets are disjoint (other operand pairs, other keys): learning is measured on tasks never trained on, against a
pre-registered criterion (:func:`learning_criterion`). A briefly SFT'd tiny Qwen3 (:func:`warm_start` on
demonstrations that call a wrong tool half of the time) is the starting point of the GRPO learning test and of
``examples/train_grpo_trl.py``.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from typing import Any

OPS = {"add": lambda a, b: a + b, "multiply": lambda a, b: a * b}
TOOLS = ("add", "multiply", "lookup")
PREAMBLE = "Solve the task with the tools."
NUMBERS = range(2, 10)  # operands: every pair of these, split between train and held-out
KEYS = range(1, 17)  # lookup keys: 12 train, 4 held-out
SPLITS = ("train", "heldout")
# A wrong-tool demonstration calls this instead (the answer is then that tool's result: reward 0).
WRONG = {"add": "multiply", "multiply": "add", "lookup": "add"}

PROMPTS = {
    "add": ("What is the sum of {a} and {b}?", "Add {a} and {b}.", "What do {a} and {b} make together?"),
    "multiply": ("What is the product of {a} and {b}?", "Multiply {a} by {b}.", "What is {a} times {b}?"),
    "lookup": ("What is the value stored under key {key}?", "Look up key {key}.", "Which value does key {key} hold?"),
}


def lookup_table(seed: int = 0) -> dict[int, int]:
    """The lookup tool's table: a value in 10..99 per key, drawn from ``seed``."""
    rng = random.Random(f"aworld-toy-table-{seed}")
    return {k: rng.randint(10, 99) for k in KEYS}


class ToyServer:
    """A picklable factory of the in-process MCP server (terse descriptions: short prompts for tiny models)."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def __repr__(self) -> str:  # stable: env pools key their envs by the kwargs' text
        return f"ToyServer(seed={self.seed})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ToyServer) and other.seed == self.seed

    def __hash__(self) -> int:
        return hash(("ToyServer", self.seed))

    def __call__(self) -> Any:
        from mcp.server.mcpserver import MCPServer

        table = lookup_table(self.seed)
        server = MCPServer("calc", log_level="WARNING")

        @server.tool(description="Add a and b.")
        def add(a: int, b: int) -> int:
            return a + b

        @server.tool(description="Multiply a and b.")
        def multiply(a: int, b: int) -> int:
            return a * b

        @server.tool(description="The value stored under key.")
        def lookup(key: int) -> int:
            if key not in table:
                raise ValueError(f"no key {key}: keys are {min(table)}..{max(table)}")
            return table[key]

        return server


def build_toy_server(seed: int = 0) -> Any:
    """The tool-choice MCP server (an in-process ``MCPServer``)."""
    return ToyServer(seed)()


def _split(items: list[Any], seed: int, n_train: int, split: str) -> list[Any]:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    items = list(items)
    random.Random(f"aworld-toy-split-{seed}").shuffle(items)
    return items[:n_train] if split == "train" else items[n_train:]


def _task(op: str, k: int, args: dict[str, int], answer: int) -> dict[str, Any]:
    name = "-".join(str(v) for v in args.values())
    return {
        "id": f"{op}-{k}-{name}",
        "prompt": PROMPTS[op][k].format(**args),
        "answer": str(answer),
        "tool": op,
        "reference": {"turns": [[{"name": op, "arguments": dict(args)}]], "pattern": r"(\d+)\s*$"},
    }


def tool_choice_tasks(
    split: str = "train",
    seed: int = 0,
    ops: Sequence[str] | None = None,
    pairs: Sequence[tuple[int, int]] | None = None,
    table_seed: int | None = None,
) -> list[dict[str, Any]]:
    """The tasks of one split (``"train"`` or ``"heldout"``; disjoint operand pairs and keys, drawn from ``seed``);
    the lookup answers come from the table of ``table_seed`` (default: ``seed``).

    With ``ops``/``pairs`` given: exactly those (one task per operation, wording and pair; no split), for tests that
    need a fixed, small task set.
    """
    if ops is not None or pairs is not None:
        chosen = [o for o in (ops or ("multiply",)) if o in OPS]
        return [_task(op, k, {"a": a, "b": b}, OPS[op](a, b)) for op in chosen
                for k in range(len(PROMPTS[op])) for a, b in (pairs or ((3, 4),))]  # fmt: skip
    all_pairs = [(a, b) for a in NUMBERS for b in NUMBERS]
    table = lookup_table(seed if table_seed is None else table_seed)
    tasks = []
    for n, op in enumerate(("add", "multiply")):
        for i, (a, b) in enumerate(_split(all_pairs, seed + n, 48, split)[: 24 if split == "train" else 16]):
            tasks.append(_task(op, i % 3, {"a": a, "b": b}, OPS[op](a, b)))
    for i, key in enumerate(_split(list(KEYS), seed, 12, split)):
        tasks.append(_task("lookup", i % 3, {"key": key}, table[key]))
    return tasks


def right_tool(ep: Any) -> dict[str, float]:
    """Episode reward hook: a right answer given without the task's own tool call (its tool on its numbers or key,
    as the question states them) scores nothing: the task score is taken back as ``no_tool``."""
    reference = (ep.task.metadata.get("reference") or {}).get("turns") or []
    if not reference or not ep.score:
        return {}
    (want,) = reference[0]
    used = any(call.get("name") == want["name"] and call.get("arguments") == want["arguments"]
               for turn in ep.turns for call in turn.get("tool_calls") or [])  # fmt: skip
    return {} if used else {"no_tool": -float(ep.score)}


HOOKS = "aworld_gym.trainers.toy:TOOL_CHOICE_HOOKS"


def _hooks() -> list[Any]:
    from aworld_gym.core.rewards import Hook, default_hooks

    return [*default_hooks(), Hook(right_tool, on="episode", name="no_tool")]


TOOL_CHOICE_HOOKS = _hooks()  # the env's reward: the default hooks and the right-tool rule


def tool_choice_env_kwargs(
    split: str = "train",
    seed: int = 0,
    max_turns: int = 3,
    ops: Sequence[str] | None = None,
    pairs: Sequence[tuple[int, int]] | None = None,
    table_seed: int | None = None,
) -> dict[str, Any]:
    """``gym.make("AWorld/MCP-v0", **kwargs)`` for the tool-choice environment: the ``split``'s tasks (see
    :func:`tool_choice_tasks`; ``ops``/``pairs`` pin a small fixed set), the in-process server (its lookup table
    drawn from ``table_seed``, default ``seed``), the right-tool rule."""
    table = seed if table_seed is None else table_seed
    return {
        "mcp_config": {"mcpServers": {"calc": ToyServer(table)}},
        "tasks": tool_choice_tasks(split, seed, ops, pairs, table),
        "allow_tools": list(TOOLS),
        "system_prompt": PREAMBLE,
        "tool_format": "compact",  # one line per tool: half the prompt of the full JSON schemas
        "max_turns": max_turns,
        "reward_hooks": [HOOKS],  # an import path: the kwargs stay JSON (the CLI's --env-kwargs)
    }


def learning_criterion(before: Sequence[bool], after: Sequence[bool], alpha: float = 0.01) -> tuple[bool, float]:
    """The pre-registered test of "it learned": successes (:func:`solved`) of independent episodes before and after
    training, compared by a one-sided Fisher exact test. Returns ``(passed, p)``: passed when ``p <= alpha``, so a
    run that did not learn passes with probability at most ``alpha`` (the test is exact and conservative)."""
    wins_b, wins_a = sum(map(bool, before)), sum(map(bool, after))
    n_b, n_a = len(before), len(after)
    wins, n = wins_a + wins_b, n_a + n_b
    # P(at least wins_a of the successes land in "after" | the margins), hypergeometric.
    total = math.comb(n, wins)
    p = sum(math.comb(n_a, x) * math.comb(n_b, wins - x) for x in range(wins_a, min(n_a, wins) + 1)) / total
    return p <= alpha, p


def demo_actions(task: dict[str, Any], wrong_tool: bool) -> list[str]:
    """The two model turns of a demonstration: a tool call (the task's tool, or a wrong one) and the answer (the
    called tool's result)."""
    (call,) = task["reference"]["turns"][0]
    op, args = call["name"], dict(call["arguments"])
    result = task.get("answer") or (lookup_table()[args["key"]] if op == "lookup" else OPS[op](args["a"], args["b"]))
    if wrong_tool:
        op = WRONG[op]
        if "key" in args:
            args = {"a": args["key"], "b": 0}
        result = OPS[op](args["a"], args["b"])
    text = json.dumps({"name": op, "arguments": args})
    return [f"<tool_call>\n{text}\n</tool_call>", f"<answer>{result}</answer>"]


def demonstrations(
    env: Any, chat: Any, wrong_rate: float = 0.5, copies: int = 4, seed: int = 0, budget: int = 256
) -> list[Any]:
    """Token episodes of demonstrations: ``copies`` per task of ``env`` (a tool-choice env), of which
    ``round(copies * wrong_rate)`` call a wrong tool (and answer with its result). The split is exact per task, so
    the demonstrations carry no hint of which tool a wording needs: that is left to be learned."""
    from aworld_gym.trainers.token_rollout import scripted_episode

    rng = random.Random(seed)
    n_wrong = round(copies * wrong_rate)
    out = []
    for task in tool_choice_tasks_of(env):
        wrong = [k < n_wrong for k in range(copies)]
        rng.shuffle(wrong)
        for w in wrong:
            actions = demo_actions(task, wrong_tool=w)
            out.append(scripted_episode(env, chat, actions, options={"task_id": task["id"]}, budget=budget))
    return out


def warm_start_demonstrations(chat: Any, tables: int = 4, copies: int = 4, wrong_rate: float = 0.5) -> list[Any]:
    """The warm start's demonstrations: :func:`demonstrations` of the train split, and of its lookup tasks again over
    ``tables - 1`` other lookup tables, so the values are copied from the tool's result rather than remembered (the
    held-out keys' values are never seen in training)."""
    import gymnasium as gym

    out = []
    for table in range(tables):
        kwargs = tool_choice_env_kwargs("train", table_seed=table)
        if table:
            kwargs["tasks"] = [t for t in kwargs["tasks"] if t["tool"] == "lookup"]
        env = gym.make("AWorld/MCP-v0", **kwargs)
        try:
            out += demonstrations(env, chat, wrong_rate=wrong_rate, copies=copies, seed=table)
        finally:
            env.close()
    return out


def tool_choice_tasks_of(env: Any) -> list[dict[str, Any]]:
    return [{"id": t.id, "answer": t.answer, "reference": t.metadata["reference"]} for t in env.unwrapped.tasks]


def warm_start(model: Any, episodes: list[Any], steps: int = 200, lr: float = 3e-3, batch_size: int = 16,
               seed: int = 0) -> list[float]:  # fmt: skip
    """Supervised fine-tuning on token episodes: cross-entropy on the model's tokens only (mask 1). Returns the
    loss per step."""
    import torch

    torch.manual_seed(seed)
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    losses = []
    for _ in range(steps):
        batch = rng.sample(episodes, min(batch_size, len(episodes)))
        seqs = [ep.tokens.prompt_ids + ep.tokens.completion_ids for ep in batch]
        width = max(len(s) for s in seqs)
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        attn = torch.zeros(len(batch), width, dtype=torch.long)
        for i, (ep, seq) in enumerate(zip(batch, seqs, strict=True)):
            ids[i, : len(seq)] = torch.tensor(seq)
            attn[i, : len(seq)] = 1
            start = len(ep.tokens.prompt_ids)
            for j, m in enumerate(ep.tokens.mask):
                if m:
                    labels[i, start + j] = seq[start + j]
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


class CallOnQuestion:
    """A menu action (:class:`~aworld_gym.trainers.rllib.MenuActions`): call ``tool`` on the numbers the question
    states (its first two for ``add``/``multiply``, the first as ``lookup``'s key; 0 where it has fewer)."""

    def __init__(self, tool: str) -> None:
        self.tool = tool

    def __call__(self, env: Any) -> str:
        import re

        nums = [int(x) for x in re.findall(r"\d+", env.task.prompt)] + [0, 0]
        args = {"key": nums[0]} if self.tool == "lookup" else {"a": nums[0], "b": nums[1]}
        return f"<tool_call>{json.dumps({'name': self.tool, 'arguments': args})}</tool_call>"


def answer_last_result(env: Any) -> str:
    """A menu action: answer with the last tool result the env showed (``none`` before any)."""
    for turn in reversed(env.turns):
        for result in turn.get("tool_results") or []:
            return f"<answer>{str(result.get('text', '')).strip()}</answer>"
    return "<answer>none</answer>"


# The tool-choice env as RLlib sees it: a call of each tool on the question's numbers, or an answer.
TOOL_MENU = [CallOnQuestion("add"), CallOnQuestion("multiply"), CallOnQuestion("lookup"), answer_last_result]


def sample_episodes(model: Any, tokenizer: Any, env_kwargs: dict[str, Any], episodes: int = 32, budget: int = 64,
                    temperature: float = 1.0, seed: int = 0) -> list[Any]:  # fmt: skip
    """``episodes`` token-mode episodes of ``model`` sampled on the env's tasks in turn (one batch per turn)."""
    import gymnasium as gym
    import torch

    from aworld_gym.trainers.token_rollout import ChatTokens, token_episodes
    from aworld_gym.trainers.trl import model_generate

    torch.manual_seed(seed)
    was_training, checkpointing = model.training, getattr(model, "is_gradient_checkpointing", False)
    model.eval()  # sampling from a model left in training mode with gradient checkpointing gives garbage
    if checkpointing:
        model.gradient_checkpointing_disable()
    try:
        probe = gym.make("AWorld/MCP-v0", **env_kwargs)
        tasks = probe.unwrapped.tasks
        probe.close()
        options = [{"task_id": tasks[i % len(tasks)].id} for i in range(episodes)]
        return token_episodes(lambda: gym.make("AWorld/MCP-v0", **env_kwargs), options, ChatTokens(tokenizer),
                              model_generate(model, tokenizer, temperature), budget)  # fmt: skip
    finally:
        model.train(was_training)
        if checkpointing:
            model.gradient_checkpointing_enable()


def solved(traj: Any) -> bool:
    """A success: the right answer, with the task's own tool call (status ok, nothing taken back by the rule)."""
    return traj.status == "ok" and traj.score is not None and "no_tool" not in traj.ledger.components


def evaluate(model: Any, tokenizer: Any, env_kwargs: dict[str, Any], episodes: int = 32, budget: int = 64,
             temperature: float = 1.0, seed: int = 0) -> float:  # fmt: skip
    """Mean env reward of ``model`` sampled on the env's tasks in turn (see :func:`sample_episodes`)."""
    eps = sample_episodes(model, tokenizer, env_kwargs, episodes, budget, temperature, seed)
    return sum(ep.reward for ep in eps) / len(eps)
