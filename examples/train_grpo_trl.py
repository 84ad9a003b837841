"""Train with TRL's GRPOTrainer on an AWorld environment.

Default (CPU, offline, about five minutes): the frozen experiment of aworld_gym/fixtures/learning.py, one seed: builds
the tiny Qwen3, warm-starts it on the tool-choice env's train split (per task, half of the demonstrations call a
wrong tool), runs 120 GRPO steps with aworld-gym's token-exact rollout function on the train split, and prints the
success on 144 sampled episodes of the test split (operands, keys and wordings never trained on) before and after,
with the pre-registered criterion's p-value. ``--evidence`` runs the whole procedure (three seeds, each with its
shuffled-reward and learning-rate-0 controls; about 25 minutes) and writes the JSON and the curves:

    python examples/train_grpo_trl.py --evidence --plot docs/grpo_tool_choice.png \
        --json benchmarks/results/grpo_tool_choice.json

On a real model and environment (see aworld_gym/trainers/recipes/qwen3_32b_grpo_trl.yaml for one 8-GPU node):

    accelerate launch --config_file deepspeed_zero3.yaml examples/train_grpo_trl.py \
        --model Qwen/Qwen3-32B --env AWorld/GAIA-v0 --use-vllm --vllm-mode server \
        --max-completion-length 8192 --num-generations 8 --steps 200
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="a checkpoint (default: the tiny offline Qwen3, warm-started)")
    ap.add_argument("--env", default="AWorld/MCP-v0", help="env id (default: the tool-choice MCP environment)")
    ap.add_argument("--env-kwargs", default=None, help="JSON kwargs for gym.make")
    ap.add_argument("--adapter", choices=["rollout_func", "environment_factory"], default="rollout_func")
    ap.add_argument("--steps", type=int, default=120, help="GRPO steps (a model or env of your own)")
    ap.add_argument("--lr", type=float, default=1e-3, help="learning rate (a model or env of your own)")
    ap.add_argument("--batch-size", type=int, default=32, help="rollouts per step (4 prompts x 8 generations)")
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--max-completion-length", type=int, default=64)
    ap.add_argument("--use-vllm", action="store_true")
    ap.add_argument("--vllm-mode", choices=["server", "colocate"], default="server")
    ap.add_argument("--output-dir", default="runs/grpo")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--evidence",
        action="store_true",
        help="the tool-choice env: every seed of the frozen recipe, each with both controls",
    )
    ap.add_argument("--split", default=None, help="the tool-choice env's evaluation split (default: the recipe's)")
    ap.add_argument("--plot", default=None, help="write the reward curves (PNG) here")
    ap.add_argument("--json", default=None, help="write the numbers (curves, before/after, p, provenance) here")
    ap.add_argument("--recipe", default=None, help="a recipe YAML: its model/env/env_kwargs/grpo settings win")
    args = ap.parse_args()
    stamp = None
    if args.json:  # the JSON says where its numbers come from (benchmarks/provenance.py: its clocks start here)
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from benchmarks.provenance import stamp
    recipe: dict = {}
    if args.recipe:
        import yaml

        recipe = yaml.safe_load(Path(args.recipe).read_text())
        args.model = recipe.get("model", args.model)
        args.env = recipe.get("env", args.env)
        args.adapter = recipe.get("adapter", args.adapter)
    if args.model is None and args.env == "AWorld/MCP-v0" and not args.env_kwargs and not recipe:
        out = tool_choice(args)
    else:
        out = your_own(args, recipe)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(stamp(out), indent=1))
    if args.plot:
        plot(out, args.plot, args.batch_size)
        print(f"wrote {args.plot}")


def tool_choice(args: argparse.Namespace) -> dict:
    """The frozen experiment of aworld_gym/fixtures/learning.py (its recipe, criterion, controls and kernels)."""
    from aworld_gym.fixtures import learning

    learning.pin_kernels()  # before torch loads (nothing above imported it)
    t0 = time.time()
    warm = learning.warm_model(Path(args.output_dir) / "tiny-qwen3")
    seeds, runs = (None, learning.RUNS) if args.evidence else ([args.seed], ("trained",))
    out = learning.experiment(warm, Path(args.output_dir), seeds=seeds, runs=runs, split=args.split)
    out.update(recipe=learning.RECIPE, lr0_steps=learning.LR0_STEPS, recipe_frozen_at=learning.frozen_at(),
               kernels=learning.kernels(), criterion=f"one-sided Fisher exact, p <= {learning.RECIPE['alpha']}")  # fmt: skip
    print(
        f"time: {time.time() - t0:.0f} s; {'every trained run passed, no control did' if out['passed'] else 'FAILED'}"
    )
    return out


def your_own(args: argparse.Namespace, recipe: dict) -> dict:
    """GRPO on a model or env of your own (no held-out criterion: the reward per step)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from aworld_gym.trainers import trl as adapters

    torch.manual_seed(args.seed)
    env_kwargs = json.loads(args.env_kwargs) if args.env_kwargs else dict(recipe.get("env_kwargs") or {})
    t0 = time.time()
    if args.model is None:
        model, tok = tiny_warm_start(Path(args.output_dir) / "tiny-qwen3", args.env, env_kwargs)
    else:
        tok = AutoTokenizer.from_pretrained(args.model)
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16)
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
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    print(f"steps: {len(rewards)}  time: {time.time() - t0:.0f} s")
    print("reward per step:", " ".join(f"{r:.2f}" for r in rewards))
    return {
        "lr": args.lr,
        "steps": len(rewards),
        "seeds": [{"seed": args.seed, "trained": {"reward_per_step": rewards}}],
    }


def tiny_warm_start(folder: Path, env_id: str, env_kwargs: dict):
    """The tiny offline Qwen3, SFT'd for 800 steps on two right and two wrong demonstrations per task of the env."""
    import gymnasium as gym
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aworld_gym.fixtures.tiny_qwen3 import build_tiny_qwen3
    from aworld_gym.fixtures.toy import demonstrations, warm_start
    from aworld_gym.rollout.tokens import ChatTokens

    path = build_tiny_qwen3(folder)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    env = gym.make(env_id, **env_kwargs)
    try:
        demos = demonstrations(env, ChatTokens(tok), wrong_rate=0.5, copies=4)
    finally:
        env.close()
    warm_start(model, demos, steps=800, lr=3e-3, batch_size=8)
    return model, tok


def plot(out: dict, path: str, batch: int = 32) -> None:
    """The batch mean reward per GRPO step of every seed's runs (the shuffled control's curve is the env's reward
    of its rollouts, which it trained on shuffled); before/after success on the evaluation split in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.4), dpi=110)
    styles = {"trained": "-", "shuffled": ":", "lr0": "--"}
    for row in out["seeds"]:
        for run, style in styles.items():
            rewards = (row.get(run) or {}).get("reward_per_step")
            if not rewards:
                continue
            window = 5
            smooth = [sum(rewards[max(0, i - window + 1) : i + 1]) / len(rewards[max(0, i - window + 1) : i + 1])
                      for i in range(len(rewards))]  # fmt: skip
            after = row[run].get("after")
            label = f"seed {row['seed']} {run}" + (
                f": {out['before']} -> {after}/{out['episodes']}" if after is not None else ""
            )
            ax.plot(range(1, len(rewards) + 1), smooth, style, lw=1.5, label=label)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel(f"train reward ({batch} rollouts, 5-step mean)", fontsize=8)
    ax.set_title(f"Tiny Qwen3, GRPO on the tool-choice MCP env (CPU); {out.get('split', '')} split success")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=6, loc="upper left", ncol=2)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


if __name__ == "__main__":
    main()
