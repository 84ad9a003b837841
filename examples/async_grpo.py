"""Asynchronous GRPO: train on each GRPO group as soon as it is complete, while later groups are still being generated.

The sampler (an ``HFPolicy`` holding its own copy of the weights) generates episodes of the tool-choice MCP env on a
background event loop through ``stream_groups``; the learner consumes complete groups (all G samples of one task),
computes group-relative advantages and takes a clipped policy-gradient step on the sampled token ids (importance
ratio against the sampler's logprobs), and pushes its weights to the sampler every ``--sync-every`` steps. Every
sample is tagged with the weights version that produced it; a group older than ``--max-staleness`` learner steps is
dropped (or down-weighted with ``--stale down-weight``). The staleness seen is logged.

CPU, offline, about a minute:

    python examples/async_grpo.py --steps 20
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def live_members(group: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The members a learner trains on: not void (an infrastructure failure has loss weight 0, and its reward 0 says
    nothing about the model)."""
    return [r for r in group if r.get("weight", 1.0) > 0]


def samples_of(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A record's sampled turns, and the reply cut at ``max_new_tokens`` (``cut_sampled``: never stepped, so not a
    turn) as one more: it is trained on with the episode's reward like the others."""
    samples = [t["sampled"] for t in record["turns"] if t.get("sampled")]
    return samples + ([record["cut_sampled"]] if record.get("cut_sampled") else [])


def group_loss(learner: Any, group: list[dict[str, Any]], clip: float = 0.2) -> Any:
    """The clipped policy-gradient loss of one group: advantage = reward minus the group mean (over the std).

    Void members are left out of the mean and the loss (:func:`live_members`). The log-ratio is clamped to +-20
    before ``exp`` (as verl does): an overflowed ratio gives a finite clipped loss but a NaN gradient, which would
    poison the weights and then the sampler. A group whose rewards are all equal gives a loss of 0 (no signal; the
    step is still taken, as TRL's GRPO does). ``None``: nothing to train on (no live member with a sample)."""
    import torch

    live = live_members(group)
    if not live:
        return None
    rewards = [float(r["reward"]) for r in live]
    mean = statistics.fmean(rewards)
    std = statistics.pstdev(rewards) or 1.0
    terms = []
    for record, reward in zip(live, rewards, strict=True):
        adv = (reward - mean) / std
        for s in samples_of(record):
            if not s.get("token_ids") or not s.get("prompt_ids"):
                continue
            prompt, ids = s["prompt_ids"], s["token_ids"]
            seq = torch.tensor([prompt + ids])
            logits = learner(input_ids=seq).logits[0, len(prompt) - 1 : -1].float()
            new = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0]
            ratio = torch.exp((new - torch.tensor(s["logprobs"])).clamp(-20.0, 20.0))
            terms.append(-torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv).mean())
    if not terms:
        return None
    return torch.stack(terms).mean()


def run(
    steps: int = 20,
    group_size: int = 4,
    concurrency: int = 8,
    max_staleness: int = 2,
    stale: str = "drop",
    sync_every: int = 1,
    lr: float = 2e-3,
    model_dir: str | None = None,
    seed: int = 0,
    log: Any = print,
) -> dict[str, Any]:
    """Train for ``steps`` learner steps; returns what happened (losses, staleness, groups, dropped, weights moved)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aworld_gym.fixtures.toy import tool_choice_env_kwargs
    from aworld_gym.rollout.engines import AsyncEngine
    from aworld_gym.rollout.policies.hf_policy import HFPolicy
    from aworld_gym.rollout.stream import stream_groups

    torch.manual_seed(seed)
    if model_dir is None:
        model_dir = str(_warm_tiny_qwen3(Path(tempfile.mkdtemp(prefix="aworld-async-grpo-"))))
    tok = AutoTokenizer.from_pretrained(model_dir)
    learner = AutoModelForCausalLM.from_pretrained(model_dir)
    start = {k: v.detach().clone() for k, v in learner.state_dict().items()}
    sampler = HFPolicy(model=copy.deepcopy(learner), tokenizer=tok, max_new_tokens=40, temperature=1.0)
    opt = torch.optim.AdamW(learner.parameters(), lr=lr)
    env_kwargs = tool_choice_env_kwargs(ops=("add", "multiply"), pairs=((3, 4), (2, 5)))
    version, losses, staleness, groups, dropped, rewards, nonfinite, void = 0, [], [], [], 0, [], 0, 0
    # A safety bound, not a budget: the stream is closed once the steps are done. How many groups that takes depends
    # on timing (a group that arrives too stale is dropped), so the bound is generous: 4 groups per step ran out
    # once on a loaded machine (13 of 16 groups dropped or with nothing to train on).
    episodes = group_size * steps * 25
    t0 = time.perf_counter()
    with stream_groups("AWorld/MCP-v0", sampler, episodes=episodes, group_size=group_size, env_kwargs=env_kwargs,
                       engine=AsyncEngine(concurrency), task_order="sample", seed=seed) as it:  # fmt: skip
        for group in it:
            live = live_members(group)  # the staleness of what is trained on: live members' samples, cut replies too
            versions = [s["model_version"] for r in live for s in samples_of(r) if s.get("model_version") is not None]
            age = version - min(versions) if versions else 0
            staleness.append(age)
            groups.append([r["task_id"] for r in group])
            void += len(group) - len(live)
            rewards.append(statistics.fmean(float(r["reward"]) for r in live) if live else float("nan"))
            weight = 1.0
            if age > max_staleness:
                if stale == "drop":
                    dropped += 1
                    continue
                weight = 0.5 ** (age - max_staleness)
            learner.train()
            loss = group_loss(learner, group)
            if loss is None:
                continue
            opt.zero_grad()
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(learner.parameters(), 1.0)
            if not torch.isfinite(loss) or not torch.isfinite(norm):  # never step on NaN: skip the group, say so
                nonfinite += 1
                log(json.dumps({"skipped": "non-finite loss or gradient", "staleness": age}))
                continue
            # down-weight a stale group by the step size: Adam undoes a scaled loss, and clipping a scaled gradient
            for g in opt.param_groups:
                g["lr"] = lr * weight
            opt.step()
            version += 1
            losses.append(loss.item())
            if version % sync_every == 0:
                sampler.load_weights({k: v.detach().clone() for k, v in learner.state_dict().items()}, version)
            log(json.dumps({"step": version, "loss": round(losses[-1], 4), "staleness": age,
                            "mean_reward": round(rewards[-1], 3), "task": groups[-1][0]}))  # fmt: skip
            if version >= steps:
                break
    moved = sum(not torch.equal(start[k], v) for k, v in learner.state_dict().items())
    return {"losses": losses, "staleness": staleness, "groups": groups, "dropped": dropped, "rewards": rewards,
            "nonfinite": nonfinite, "void": void, "weights_changed": moved, "steps": version,
            "wall_s": time.perf_counter() - t0}  # fmt: skip


def _warm_tiny_qwen3(folder: Path) -> Path:
    """The tiny offline Qwen3, briefly SFT'd on tool-choice demonstrations (half of them call the wrong tool)."""
    import gymnasium as gym
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aworld_gym.fixtures.tiny_qwen3 import build_tiny_qwen3
    from aworld_gym.fixtures.toy import demonstrations, tool_choice_env_kwargs, warm_start
    from aworld_gym.rollout.tokens import ChatTokens

    path = build_tiny_qwen3(folder / "tiny")
    tok, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)
    env = gym.make("AWorld/MCP-v0", **tool_choice_env_kwargs(ops=("add", "multiply"), pairs=((3, 4), (2, 5))))
    try:
        eps = demonstrations(env, ChatTokens(tok), wrong_rate=0.5, copies=4)
    finally:
        env.close()
    warm_start(model, eps, steps=60, lr=3e-3, batch_size=8)
    out = folder / "warm"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-staleness", type=int, default=2)
    ap.add_argument("--stale", choices=["drop", "down-weight"], default="drop")
    ap.add_argument("--sync-every", type=int, default=1)
    ap.add_argument("--model", default=None, help="a checkpoint folder (default: the warm-started tiny Qwen3)")
    args = ap.parse_args()
    out = run(args.steps, args.group_size, args.concurrency, args.max_staleness, args.stale, args.sync_every,
              model_dir=args.model)  # fmt: skip
    print(json.dumps({k: out[k] for k in ("steps", "dropped", "void", "nonfinite", "weights_changed", "wall_s")}))
    print(f"staleness seen: {dict(sorted(__import__('collections').Counter(out['staleness']).items()))}")


if __name__ == "__main__":
    main()
