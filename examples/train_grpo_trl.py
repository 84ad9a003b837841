"""Train with TRL's GRPOTrainer on an AWorld environment.

Default (CPU, offline, about two minutes): builds the tiny Qwen3, warm-starts it on tool-choice demonstrations
(half of them call the wrong tool), then runs GRPO with aworld-gym's token-exact rollout function on the
tool-choice MCP environment, printing the mean reward before and after and plotting the training curve:

    python examples/train_grpo_trl.py --plot docs/grpo_tool_choice.png

On a real model and environment (see aworld_gym/trainers/recipes/qwen3_32b_grpo_trl.yaml for one 8-GPU node):

    accelerate launch --config_file deepspeed_zero3.yaml examples/train_grpo_trl.py \
        --model Qwen/Qwen3-32B --env AWorld/GAIA-v0 --use-vllm --vllm-mode server \
        --max-completion-length 8192 --num-generations 8 --steps 200
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="a checkpoint (default: the tiny offline Qwen3, warm-started)")
    ap.add_argument("--env", default="AWorld/MCP-v0", help="env id (default: the tool-choice MCP environment)")
    ap.add_argument("--env-kwargs", default=None, help="JSON kwargs for gym.make")
    ap.add_argument("--adapter", choices=["rollout_func", "environment_factory"], default="rollout_func")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--max-completion-length", type=int, default=64)
    ap.add_argument("--use-vllm", action="store_true")
    ap.add_argument("--vllm-mode", choices=["server", "colocate"], default="server")
    ap.add_argument("--output-dir", default="runs/grpo")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", default=None, help="write the reward curve (PNG) here")
    ap.add_argument("--recipe", default=None, help="a recipe YAML: its model/env/env_kwargs/grpo settings win")
    args = ap.parse_args()
    recipe: dict = {}
    if args.recipe:
        import yaml

        recipe = yaml.safe_load(Path(args.recipe).read_text())
        args.model = recipe.get("model", args.model)
        args.env = recipe.get("env", args.env)
        args.adapter = recipe.get("adapter", args.adapter)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from aworld_gym.trainers import trl as adapters
    from aworld_gym.trainers.toy import tool_choice_env_kwargs

    torch.manual_seed(args.seed)
    tiny = args.model is None
    env_kwargs = json.loads(args.env_kwargs) if args.env_kwargs else dict(recipe.get("env_kwargs") or {})
    if tiny and args.env == "AWorld/MCP-v0" and not env_kwargs:
        env_kwargs = tool_choice_env_kwargs()
    t0 = time.time()
    if tiny:
        model, tok = tiny_warm_start(Path(args.output_dir) / "tiny-qwen3", env_kwargs)
    else:
        tok = AutoTokenizer.from_pretrained(args.model)
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16)

    def mean_reward() -> float | None:
        if not (tiny and args.env == "AWorld/MCP-v0"):
            return None
        from aworld_gym.trainers.toy import evaluate

        return evaluate(model, tok, env_kwargs, episodes=64, budget=args.max_completion_length)

    before = mean_reward()
    settings = dict(
        output_dir=args.output_dir,
        per_device_train_batch_size=args.batch_size,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        max_steps=args.steps,
        learning_rate=args.lr,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        seed=args.seed,
        use_cpu=not torch.cuda.is_available(),
        bf16=torch.cuda.is_available(),
        use_vllm=args.use_vllm,
        vllm_mode=args.vllm_mode,
        max_tool_calling_iterations=8,
    )
    settings.update(recipe.get("grpo") or {})
    config = GRPOConfig(**settings)
    dataset = adapters.task_dataset(args.env, **env_kwargs)
    if args.adapter == "rollout_func":
        rollout = adapters.make_rollout_func(args.env, **env_kwargs)
        trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=[adapters.env_reward], args=config,
                              train_dataset=dataset, rollout_func=rollout)  # fmt: skip
    else:
        adapters.ensure_tool_parser(tok)
        trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=[], args=config, train_dataset=dataset,
                              environment_factory=adapters.environment_factory(args.env, **env_kwargs))  # fmt: skip
    trainer.train()
    after = mean_reward()
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    print(f"steps: {len(rewards)}  time: {time.time() - t0:.0f} s")
    print("reward per step:", " ".join(f"{r:.2f}" for r in rewards))
    if before is not None:
        print(f"mean reward of 64 sampled episodes: before {before:.3f}  after {after:.3f}")
    if args.plot:
        plot(rewards, before, after, args.plot)
        print(f"wrote {args.plot}")


def tiny_warm_start(folder: Path, env_kwargs: dict):
    """The tiny offline Qwen3, SFT'd for 80 steps on tool-choice demonstrations (half call the wrong tool)."""
    import gymnasium as gym
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aworld_gym.trainers.tiny_qwen3 import build_tiny_qwen3
    from aworld_gym.trainers.token_rollout import ChatTokens
    from aworld_gym.trainers.toy import demonstrations, warm_start

    path = build_tiny_qwen3(folder)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    env = gym.make("AWorld/MCP-v0", **env_kwargs)
    try:
        demos = demonstrations(env, ChatTokens(tok), wrong_rate=0.5, copies=8)
    finally:
        env.close()
    warm_start(model, demos, steps=80, lr=3e-3, batch_size=8)
    return model, tok


def plot(rewards: list[float], before: float | None, after: float | None, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=110)
    steps = list(range(1, len(rewards) + 1))
    ax.plot(steps, rewards, marker="o", ms=3, lw=1, label="batch mean reward (16 rollouts)")
    window = 5
    smooth = [sum(rewards[max(0, i - window + 1) : i + 1]) / len(rewards[max(0, i - window + 1) : i + 1])
              for i in range(len(rewards))]  # fmt: skip
    ax.plot(steps, smooth, lw=2, label=f"moving mean ({window} steps)")
    if before is not None and after is not None:
        ax.axhline(before, color="grey", ls="--", lw=1, label=f"eval before {before:.2f}")
        ax.axhline(after, color="green", ls="--", lw=1, label=f"eval after {after:.2f}")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("env reward")
    ax.set_title("Tiny Qwen3, GRPO on the tool-choice MCP env (CPU)")
    ax.set_ylim(-0.2, 1.05)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


if __name__ == "__main__":
    main()
