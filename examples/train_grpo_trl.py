"""Train with TRL's GRPOTrainer on an AWorld environment.

Default (CPU, offline, about five minutes, ten with --control): builds the tiny Qwen3, warm-starts it on the
tool-choice env's train split (per task, half of the demonstrations call a wrong tool), then runs 120 GRPO steps
with aworld-gym's token-exact rollout function on the train split, printing the success on 144 sampled held-out
episodes (other numbers, other keys) before and after with the learning criterion's p-value, and plotting the
training curve:

    python examples/train_grpo_trl.py --control --plot docs/grpo_tool_choice.png \
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
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch-size", type=int, default=32, help="rollouts per step (4 prompts x 8 generations)")
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--max-completion-length", type=int, default=64)
    ap.add_argument("--use-vllm", action="store_true")
    ap.add_argument("--vllm-mode", choices=["server", "colocate"], default="server")
    ap.add_argument("--output-dir", default="runs/grpo")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", default=None, help="write the reward curve (PNG) here")
    ap.add_argument("--json", default=None, help="write the numbers (curve, held-out before/after, p) here")
    ap.add_argument("--control", action="store_true", help="also the same run at learning rate 0 (the control)")
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

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from aworld_gym.fixtures.toy import tool_choice_env_kwargs
    from aworld_gym.trainers import trl as adapters

    torch.manual_seed(args.seed)
    tiny = args.model is None
    env_kwargs = json.loads(args.env_kwargs) if args.env_kwargs else dict(recipe.get("env_kwargs") or {})
    toy = tiny and args.env == "AWorld/MCP-v0" and not env_kwargs
    if toy:
        env_kwargs = tool_choice_env_kwargs("train")
    t0 = time.time()
    if tiny:
        model, tok = tiny_warm_start(Path(args.output_dir) / "tiny-qwen3", env_kwargs)
    else:
        tok = AutoTokenizer.from_pretrained(args.model)
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16)

    def held_out(seed: int) -> list[bool] | None:
        if not toy:
            return None
        from aworld_gym.fixtures.toy import sample_episodes, solved

        eps = sample_episodes(model, tok, tool_choice_env_kwargs("validation"), 144, args.max_completion_length, seed=seed)
        return [solved(ep) for ep in eps]

    start = {k: v.detach().clone() for k, v in model.state_dict().items()} if args.control else None

    def train(lr: float) -> dict:
        """One GRPO run from the warm start at learning rate ``lr``; held-out success before and after."""
        if start is not None:
            model.load_state_dict(start)
        before = held_out(1)
        settings = dict(
            output_dir=args.output_dir,
            per_device_train_batch_size=args.batch_size,
            num_generations=args.num_generations,
            max_completion_length=args.max_completion_length,
            max_steps=args.steps,
            learning_rate=lr,
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
        after = held_out(2)
        rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
        run: dict = {"lr": lr, "steps": len(rewards), "reward_per_step": rewards}
        if before is not None and after is not None:
            from aworld_gym.fixtures.toy import learning_criterion

            passed, p = learning_criterion(before, after)
            run.update(held_out_before=sum(before), held_out_after=sum(after), episodes=144, p=p, passed=passed)
        return run

    out = train(args.lr)
    print(f"steps: {out['steps']}  time: {time.time() - t0:.0f} s")
    print("reward per step:", " ".join(f"{r:.2f}" for r in out["reward_per_step"]))
    if args.control:
        out["control"] = train(0.0)  # the same run, learning rate 0: must not pass the criterion
    for name, run in [("trained", out), ("control (learning rate 0)", out.get("control"))]:
        if run and "p" in run:
            verdict = "learned" if run["passed"] else "no evidence of learning"
            print(f"{name}: held-out success (144 sampled episodes) before {run['held_out_before']}/144  after "
                  f"{run['held_out_after']}/144  one-sided Fisher p={run['p']:.2g}: {verdict} (criterion p<=0.01)")  # fmt: skip
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(stamp(out), indent=1))
    if args.plot:
        share = (out["held_out_before"] / 144, out["held_out_after"] / 144) if "p" in out else (None, None)
        plot(out["reward_per_step"], *share, args.plot, args.batch_size)
        print(f"wrote {args.plot}")


def tiny_warm_start(folder: Path, env_kwargs: dict):
    """The tiny offline Qwen3, SFT'd for 800 steps on the train split's demonstrations (per task, two call the
    right tool and two a wrong one: which tool a wording needs is left for GRPO to learn; the lookup tasks also over
    three other tables, so their values are copied from the tool, not remembered). With ``env_kwargs`` other than
    the tool-choice env's: two right and two wrong demonstrations per task of that env."""
    import gymnasium as gym
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aworld_gym.fixtures.tiny_qwen3 import build_tiny_qwen3
    from aworld_gym.fixtures.toy import demonstrations, tool_choice_env_kwargs, warm_start, warm_start_demonstrations
    from aworld_gym.rollout.tokens import ChatTokens

    path = build_tiny_qwen3(folder)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    if env_kwargs == tool_choice_env_kwargs("train"):
        demos = warm_start_demonstrations(ChatTokens(tok))
    else:
        env = gym.make("AWorld/MCP-v0", **env_kwargs)
        try:
            demos = demonstrations(env, ChatTokens(tok), wrong_rate=0.5, copies=4)
        finally:
            env.close()
    warm_start(model, demos, steps=800, lr=3e-3, batch_size=8)
    return model, tok


def plot(rewards: list[float], before: float | None, after: float | None, path: str, batch: int = 32) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=110)
    steps = list(range(1, len(rewards) + 1))
    ax.plot(steps, rewards, marker="o", ms=3, lw=1, label=f"batch mean reward ({batch} rollouts)")
    window = 5
    smooth = [sum(rewards[max(0, i - window + 1) : i + 1]) / len(rewards[max(0, i - window + 1) : i + 1])
              for i in range(len(rewards))]  # fmt: skip
    ax.plot(steps, smooth, lw=2, label=f"moving mean ({window} steps)")
    if before is not None and after is not None:
        ax.axhline(before, color="grey", ls="--", lw=1, label=f"held-out success before {before:.2f}")
        ax.axhline(after, color="green", ls="--", lw=1, label=f"held-out success after {after:.2f}")
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
