"""The ``aworld-gym`` command."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def _rollout(args: argparse.Namespace) -> int:
    from aworld_gym.rollout.collect import collect
    from aworld_gym.rollout.policies import make_policy

    env_kwargs = json.loads(args.env_kwargs) if args.env_kwargs else {}
    if args.max_turns is not None:
        env_kwargs["max_episode_steps"] = args.max_turns
    out = args.out or Path("runs") / f"{args.env.split('/')[-1].lower()}-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    policy = make_policy(args.policy, args.env, latency_s=args.policy_latency)
    print(
        f"aworld-gym rollout: {args.env}, policy={args.policy}, {args.episodes} episodes, "
        f"concurrency {args.concurrency}, policy latency {args.policy_latency:g} s",
        flush=True,
    )
    summary = collect(
        args.env,
        lambda: make_policy(args.policy, args.env, latency_s=args.policy_latency),
        episodes=args.episodes,
        concurrency=args.concurrency,
        seed=args.seed,
        env_kwargs=env_kwargs,
        sink=out,
        task_order=args.task_order,
        progress=not args.no_progress,
    )
    del policy
    print(summary.render(), flush=True)
    if args.summary_json:
        Path(args.summary_json).write_text(json.dumps(summary.to_dict(), indent=2) + "\n")
    return 0 if summary.recorded == summary.episodes else 1


def _envs(_: argparse.Namespace) -> int:
    import aworld_gym

    for env_id in aworld_gym.ENV_IDS:
        print(env_id)
    return 0


def _serve_python(args: argparse.Namespace) -> int:
    from aworld_gym.sandbox.server import main as serve

    serve(
        ["--transport", "streamable-http", "--host", args.host, "--port", str(args.port), "--isolation", args.isolation]
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="aworld-gym", description="MCP tool environments for LLM-agent RL.")
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("rollout", help="collect episodes with a policy and write trajectories (JSONL)")
    r.add_argument("--env", required=True, help="environment id, e.g. AWorld/Code-v0")
    r.add_argument("--policy", default="reference", help="policy name (reference)")
    r.add_argument("--episodes", type=int, default=32)
    r.add_argument("--concurrency", type=int, default=8, help="episodes running at once")
    r.add_argument("--policy-latency", type=float, default=0.0, help="fixed seconds per policy turn")
    r.add_argument("--seed", type=int, default=0, help="episode i resets with seed+i")
    r.add_argument("--task-order", choices=["cycle", "sample"], default="cycle")
    r.add_argument("--max-turns", type=int, default=None, help="override the id's max_episode_steps")
    r.add_argument("--env-kwargs", default=None, help="JSON object passed to gym.make")
    r.add_argument("--out", default=None, help="trajectory JSONL path (default runs/<env>-<time>.jsonl)")
    r.add_argument("--summary-json", default=None, help="also write the summary as JSON here")
    r.add_argument("--no-progress", action="store_true")
    r.set_defaults(func=_rollout)
    e = sub.add_parser("envs", help="list the registered ids")
    e.set_defaults(func=_envs)
    s = sub.add_parser("serve-python", help="run the Python-execution MCP server for a whole node")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8940)
    s.add_argument("--isolation", default="auto", choices=["auto", "bwrap", "none"])
    s.set_defaults(func=_serve_python)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from aworld_gym.core.errors import AWorldGymError

        if isinstance(exc, AWorldGymError | ValueError):
            print(f"aworld-gym: error: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
