"""Chaos soak: thousands of MCP-v0 episodes over a hostile stdio server, one random fault per episode (see
tests/chaos.py: a 20 MB reply, a notification flood, a non-JSON line, a wrong reply id, a hang, the server exiting
mid-call, an error full of control characters, malformed content, or none). Prints what load was held, the faults
survived by kind, episodes lost and doubled, and the steady-state growth of file descriptors, threads, child
processes and RSS (from a third of the run to two thirds). Then Code-v0 episodes running hostile programs, GAIA-v0
episodes each making one hostile call before solving its task (tests/chaos_gaia.py), and one run mixing every fault
family (tests/chaos_cli.py: the ``aworld-gym rollout`` command on Ray, a model endpoint failing at random, Ray
actors SIGKILLed, the driver SIGKILLed and resumed). Writes JSON.

    python benchmarks/soak.py [--episodes 5000] [--concurrency 64] [--timeout 1.5] [--code-episodes 500]
                              [--gaia-episodes 500] [--mixed-episodes 2000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.provenance import stamp  # noqa: E402
from tests import chaos  # noqa: E402
from tests.chaos_cli import run_mixed  # noqa: E402
from tests.chaos_gaia import run_gaia  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=5000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=1.5, help="the hostile server's per-call timeout")
    ap.add_argument("--code-episodes", type=int, default=500, help="Code-v0 episodes with hostile programs (0: none)")
    ap.add_argument("--gaia-episodes", type=int, default=500, help="GAIA-v0 episodes after a hostile call (0: none)")
    ap.add_argument("--mixed-episodes", type=int, default=2000, help="episodes of the all-faults CLI run (0: none)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/soak.json"))
    args = ap.parse_args()
    r = chaos.run(args.episodes, args.concurrency, args.timeout)
    grew = chaos.growth(r)
    print(f"chaos soak: {r['records']} of {r['episodes']} episodes at concurrency {r['concurrency']} in "
          f"{r['wall_s']:.0f} s ({r['records'] / r['wall_s']:.1f} episodes/s)")  # fmt: skip
    print(f"{'fault':<10} {'injected':>8} {'tool result':>12}")
    for fault, (_, _, kind) in chaos.FAULTS.items():
        print(f"{fault:<10} {r['injected'].get(fault, 0):>8} {kind or 'ok':>12}")
    print(f"error kinds expected {r['kinds_expected']}")
    print(f"error kinds seen     {r['kinds_seen']}")
    print(f"ended by their timeout instead (load): {r['timed_out_instead']}; other mismatches: {len(r['mismatches'])}")
    print(f"terminations {r['terminations']}")
    print(f"lost {len(r['lost'])}, doubled {len(r['doubled'])}, processes left running {len(r['orphans'])}")
    mid = r["samples"]["one third"]
    print("steady-state growth (a third -> two thirds): "
          + ", ".join(f"{k} {grew[k]:+.1f} (of {mid[k]:.0f})" for k in grew))  # fmt: skip
    print(f"after the run: {r['samples']['end']}")
    r["growth"] = grew
    if args.code_episodes:
        c = chaos.run_code(args.code_episodes, 16)
        cg = chaos.growth(c)
        print(f"\nCode-v0 with hostile programs: {c['records']} of {c['episodes']} episodes at concurrency 16 in "
              f"{c['wall_s']:.0f} s; programs {c['injected']}; results not as expected {len(c['mismatches'])}; "
              f"lost {len(c['lost'])}, doubled {len(c['doubled'])}; scores {c['scores']}; processes left running "
              f"{len(c['orphans'])}")  # fmt: skip
        print("steady-state growth: " + ", ".join(f"{k} {cg[k]:+.1f}" for k in cg))
        r["code"] = {**c, "growth": cg}
    if args.gaia_episodes:
        g = run_gaia(args.gaia_episodes, 8)
        gg = chaos.growth(g)
        print(f"\nGAIA-v0 after a hostile call: {g['records']} of {g['episodes']} episodes at concurrency 8 in "
              f"{g['wall_s']:.0f} s; hostile calls {g['injected']}; results not as expected {len(g['mismatches'])}; "
              f"tasks left unsolved {len(g['unsolved'])}; lost {len(g['lost'])}, doubled {len(g['doubled'])}; "
              f"processes left running {len(g['orphans'])}")  # fmt: skip
        print("steady-state growth: " + ", ".join(f"{k} {gg[k]:+.1f}" for k in gg))
        r["gaia"] = {**g, "growth": gg}
    if args.mixed_episodes:
        with tempfile.TemporaryDirectory(prefix="aworld-soak-") as work:
            m = run_mixed(Path(work), args.mixed_episodes, concurrency=64, endpoint_faults=0.05, kill_every_s=15.0)
        inj = m["injected"]
        print(f"\nall fault families, one CLI run on Ray: {m['records']} of {m['episodes']} episodes at concurrency 64 "
              f"in {m['wall_s']:.0f} s (exit {m['returncode']})")  # fmt: skip
        print(f"  injected: tool faults {sum(inj['tool'].values())}, endpoint faults {inj['endpoint']}, Ray actors "
              f"killed {inj['actor_kills']}, driver killed {inj['driver_kills']} (after "
              f"{m['written_before_driver_kill']} records) and resumed")  # fmt: skip
        print(f"  terminations {m['terminations']}; episodes re-run after their actor was killed "
              f"{m['actor_reruns']}, recorded as env_crash with it {m['actor_crashes']}; "
              f"policy errors {len(m['policy_errors'])} (non-JSON replies injected {inj['endpoint'].get('garbage', 0)}: "
              f"not retried; the other endpoint faults are); tool results not as expected {len(m['mismatches'])}")  # fmt: skip
        print(f"  lost {len(m['lost'])}, doubled {len(m['doubled'])}, left running after the driver kill "
              f"{len(m['left_after_driver_kill'])}, after the run {len(m['orphans'])}")  # fmt: skip
        m["policy_errors"] = [e.strip().splitlines()[-1] for e in m["policy_errors"]]
        r["mixed"] = m
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(stamp(r), indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
