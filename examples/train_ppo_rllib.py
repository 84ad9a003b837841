"""Train with RLlib's PPO on the tool-choice env: the frozen experiment of aworld_gym/fixtures/rllib_learning.py.

On CPU, offline, about five minutes on 2 cores: for each seed of its recipe, PPO (new API stack, local Ray) over a
menu of tool calls on the train split, with its two controls (rewards shuffled among episode chunks at the same
learning rate; learning rate 0, every weight asserted unchanged), each judged on 144 sampled episodes of the test
split by the pre-registered criterion; then the JSON, with the recipe, the kernels and the provenance:

    RAY_AUTH_MODE=disabled python examples/train_ppo_rllib.py --json benchmarks/results/rllib_tool_choice.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None, help="write the numbers (and provenance) here")
    ap.add_argument("--split", default=None, help="the evaluation split (default: the recipe's)")
    args = ap.parse_args()
    from aworld_gym.fixtures.learning import kernels, pin_kernels

    pin_kernels()  # before torch loads (nothing above imported it)
    stamp = None
    if args.json:  # the JSON says where its numbers come from (benchmarks/provenance.py: its clocks start here)
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from benchmarks.provenance import stamp
    import ray

    from aworld_gym.fixtures import rllib_learning as rl
    from aworld_gym.trainers.rllib import register_all

    ray.init(address="local", include_dashboard=False, num_cpus=2, ignore_reinit_error=True)
    try:
        register_all()
        out = rl.experiment(split=args.split, log=lambda s: print(s, flush=True))
    finally:
        ray.shutdown()
    out.update(recipe=rl.RECIPE, lr0_iterations=rl.LR0_ITERATIONS, kernels=kernels(),
               criterion=f"one-sided Fisher exact, p <= {rl.RECIPE['alpha']}")  # fmt: skip
    print("every trained run passed, no control did" if out["passed"] else "FAILED")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(stamp(out), indent=1))


if __name__ == "__main__":
    main()
