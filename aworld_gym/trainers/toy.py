"""A small MCP environment where the right tool call is learnable, and a warm start for the tiny Qwen3.

``AWorld/MCP-v0`` on a small in-process MCP server with two tools (``add``, ``multiply``) and tasks such as "What
is the product of 3 and 4?". The answer is a tool's output, so an episode scores 1 only when the model calls the
right tool and answers with its result. A briefly SFT'd tiny Qwen3 (:func:`warm_start` on demonstrations that
call the wrong tool half of the time) starts near 50%, and GRPO can raise it: the learning test and the example
of ``examples/train_grpo_trl.py``.
"""

from __future__ import annotations

import json
import random
from typing import Any

OPS = {"add": lambda a, b: a + b, "multiply": lambda a, b: a * b}
PREAMBLE = "Solve the task with the tools."


def build_toy_server() -> Any:
    """An in-process MCP server with two integer tools and terse descriptions (short prompts for tiny models)."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("calc", log_level="WARNING")

    @server.tool(description="Add a and b.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Multiply a and b.")
    def multiply(a: int, b: int) -> int:
        return a * b

    return server


PROMPTS = {
    "add": ("What is the sum of {a} and {b}?", "Add {a} and {b}.", "What do {a} and {b} make together?"),
    "multiply": ("What is the product of {a} and {b}?", "Multiply {a} by {b}.", "What is {a} times {b}?"),
}


def tool_choice_tasks(
    ops: tuple[str, ...] = ("multiply",), pairs: tuple[tuple[int, int], ...] = ((3, 4),)
) -> list[dict[str, Any]]:
    """One task per (operation, wording, number pair); the answer is the result of the operation's tool."""
    tasks = []
    for op in ops:
        fn = OPS[op]
        for k, template in enumerate(PROMPTS[op]):
            for a, b in pairs:
                tasks.append(
                    {
                        "id": f"{op}-{k}-{a}-{b}",
                        "prompt": template.format(a=a, b=b),
                        "answer": str(fn(a, b)),
                        "reference": {
                            "turns": [[{"name": op, "arguments": {"a": a, "b": b}}]],
                            "pattern": r"(\d+)\s*$",
                        },
                    }
                )
    return tasks


def tool_choice_env_kwargs(
    ops: tuple[str, ...] = ("multiply",), pairs: tuple[tuple[int, int], ...] = ((3, 4),), max_turns: int = 3
) -> dict[str, Any]:
    """``gym.make("AWorld/MCP-v0", **kwargs)`` for the tool-choice environment (in-process demo server)."""
    return {
        "mcp_config": {"mcpServers": {"calc": build_toy_server}},
        "tasks": tool_choice_tasks(ops, pairs),
        "allow_tools": ["add", "multiply"],
        "system_prompt": PREAMBLE,
        "max_turns": max_turns,
    }


def demo_actions(task: dict[str, Any], wrong_tool: bool) -> list[str]:
    """The two model turns of a demonstration: a tool call (the task's tool, or the other one) and the answer."""
    (call,) = task["reference"]["turns"][0]
    op = call["name"]
    if wrong_tool:
        op = next(o for o in OPS if o != op)
    a, b = call["arguments"]["a"], call["arguments"]["b"]
    call = json.dumps({"name": op, "arguments": {"a": a, "b": b}})
    return [f"<tool_call>\n{call}\n</tool_call>", f"<answer>{OPS[op](a, b)}</answer>"]


def demonstrations(
    env: Any, chat: Any, wrong_rate: float = 0.5, copies: int = 4, seed: int = 0, budget: int = 256
) -> list[Any]:
    """Token episodes of demonstrations on every task of ``env`` (a tool-choice env), ``wrong_rate`` of them
    calling the other tool (and answering with its result)."""
    from aworld_gym.trainers.token_rollout import scripted_episode

    rng = random.Random(seed)
    out = []
    for _ in range(copies):
        for task in tool_choice_tasks_of(env):
            actions = demo_actions(task, wrong_tool=rng.random() < wrong_rate)
            out.append(scripted_episode(env, chat, actions, options={"task_id": task["id"]}, budget=budget))
    return out


def tool_choice_tasks_of(env: Any) -> list[dict[str, Any]]:
    return [{"id": t.id, "reference": t.metadata["reference"]} for t in env.unwrapped.tasks]


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


def evaluate(model: Any, tokenizer: Any, env_kwargs: dict[str, Any], episodes: int = 32, budget: int = 64,
             temperature: float = 1.0, seed: int = 0) -> float:  # fmt: skip
    """Mean env reward of ``model`` sampled on the first ``episodes`` tasks (one batch per turn)."""
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
        eps = token_episodes(lambda: gym.make("AWorld/MCP-v0", **env_kwargs), options, ChatTokens(tokenizer),
                             model_generate(model, tokenizer, temperature), budget)  # fmt: skip
    finally:
        model.train(was_training)
        if checkpointing:
            model.gradient_checkpointing_enable()
    return sum(ep.reward for ep in eps) / len(eps)
