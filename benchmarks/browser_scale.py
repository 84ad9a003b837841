"""AWorld/Browser-v0 at scale: 8 -> 32 -> 64 -> 128 concurrent envs (shared browser mode, a browser per
``--contexts-per-browser`` envs), then faults at 64 envs, then (``--long``) memory over thousands of episodes.

Rows, each in a worker subprocess of its own (``aworld_gym.envs.browser.fleet.Fleet``: the envs on one event loop,
each episode through the rollout driver with the reference policy, round-robin over its 17 tasks):

* ``ramp``: ``--episodes-per-env`` episodes per env. Once they are done, every env still holding its page, the
  worker's whole process tree (the driver, the page server, Node, Chromium and its helpers) is measured from outside:
  PSS summed (shared pages split between the processes that map them) and processes counted.
* ``faults``: the same, with ``--faults-each`` of each fault injected at the first turn of planned episodes spread
  over the run (``aworld_gym.envs.browser.faults``): a renderer SIGKILLed, a page that hangs, a whole browser
  SIGKILLed, the Playwright MCP server SIGKILLed. Every episode a fault reaches (its own, and for a browser or
  server every episode in flight on it) must end ``void`` or solved (in reset when it struck: recovered), never
  ``failed``; ``--retry-void`` re-runs void episodes (never with their fault).
* ``long``: ``--long`` episodes at ``--long-envs`` envs (with a fault every ``--long-fault-every`` episodes, kinds
  in turn), PSS sampled every ``--sample-every`` episodes: memory is flat when the last quarter's mean is within 5%
  of the second quarter's.

Every row: episodes/s on two clocks (``benchmarks/clocks.py``): over the whole worker process
(``episodes_per_s_whole``: from its start, imports, browsers and envs included, to its exit, its envs closed, less
``paused_s``, the benchmark's own PSS reading and a one-second settle before counting descriptors) and over the window
(``episodes_per_s``: from the first episode to the last; it leaves out ``startup_s``, env and browser creation, and
``teardown_s``, closing them); reset and step
(env time) p50/p90, success, the worker's open file descriptors before the envs and after they closed, Chromium and
Node processes on the machine before and after, and orphans counted exactly: the worker runs with
``$AWORLD_GYM_RUN`` set to a fresh value, which every process it starts inherits, and with ``TMPDIR`` a fresh folder,
which every Chromium process names (its profile folder is there; zygote children overwrite their environment);
two seconds after the worker exited, each live process carrying the one or naming the other is an orphan (then
killed). Prints a table, writes JSON with provenance.

    .venv/bin/python benchmarks/browser_scale.py                       # 8 32 64 128, faults at 64 (~15 min)
    .venv/bin/python benchmarks/browser_scale.py --envs --fault-envs 0 --long 2000      # the long run alone
    .venv/bin/python benchmarks/browser_scale.py --envs 8 --fault-envs 8 --faults-each 1   # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from aworld_gym.envs.browser.faults import FAULTS, RUN_MARKER, count_kinds, open_fds, run_processes  # noqa: E402
from aworld_gym.envs.browser.reference import REFERENCE_TASKS  # noqa: E402
from aworld_gym.mcp.transports.proctree import kill  # noqa: E402
from benchmarks.clocks import CELL_HEAD, Clocks, cell, now  # noqa: E402

TASKS = list(REFERENCE_TASKS)
TARGET = {"envs": 128, "pss_mb_per_env": 90.0}


def quantile(xs: list[float], q: float) -> float | None:
    return round(sorted(xs)[int(q * (len(xs) - 1))], 3) if xs else None


def pss_mb(pids: Any) -> float:
    """PSS in MiB summed over ``pids``."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
                    break
        except OSError:
            continue
    return total / 1024


def machine_counts() -> dict[str, int]:
    """Chromium and Node processes on the whole machine (others' too: context for the exact orphan count)."""
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    counts = count_kinds(pids)
    return {"chromium": counts["chromium"], "node": counts["node"]}


# ----- the parent: one worker per row, measured from outside ---------------------------------------------------------
def run_row(spec: dict[str, Any], work: Path) -> dict[str, Any]:
    from benchmarks.provenance import OtherWork

    run = secrets.token_hex(6)
    # Short: the browsers' Unix sockets are made under it. Chromium 156 failed every launch under the 27 characters
    # of /tmp/awg-scale-<12 hex> ("Target page, context or browser has been closed"); 22 still launched.
    tmp = Path(tempfile.mkdtemp(prefix="awgs-", dir="/tmp"))  # 18 characters, mode 0700
    ours = (str(tmp) + "/",)
    row: dict[str, Any] = {"row": spec["row"], "envs": spec["envs"], "machine_before": machine_counts(),
                           "load_start": [round(x, 2) for x in os.getloadavg()]}  # fmt: skip
    other = OtherWork()
    spec_path = work / f"{spec['row']}-{spec['envs']}.json"
    spec_path.write_text(json.dumps(spec))
    log = (work / f"{spec['row']}-{spec['envs']}.log").open("w")
    env = {**os.environ, RUN_MARKER: run, "TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1"}
    started = now()  # the whole run: the worker's start (imports, browsers, envs) to its exit
    proc = subprocess.Popen([sys.executable, __file__, "--worker", str(spec_path)], cwd=ROOT, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)  # fmt: skip
    result: dict[str, Any] = {}
    samples: list[dict[str, Any]] = []
    try:
        assert proc.stdout is not None and proc.stdin is not None
        for line in proc.stdout:
            msg = json.loads(line)
            pids = [proc.pid, *run_processes(run, ours)]
            if msg["event"] == "created":
                row.update(browsers=msg["browsers"], make_s=msg["make_s"], processes_after_create=len(pids))
            elif msg["event"] == "sample":
                samples.append({"episodes": msg["episodes"], "pss_mb": round(pss_mb(pids), 1), "processes": len(pids)})
            elif msg["event"] == "measure":  # the episodes are done; every env still holds its page
                total, driver = pss_mb(pids), pss_mb([proc.pid])
                row.update(processes=len(pids), process_kinds=count_kinds(pids), pss_mb_total=round(total, 1),
                           pss_mb_driver=round(driver, 1), pss_mb_per_env=round(total / spec["envs"], 1))  # fmt: skip
                proc.stdin.write("go\n")
                proc.stdin.flush()
            elif msg["event"] == "result":
                result = msg
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    ended = now()
    time.sleep(2.0)
    left = run_processes(run, ours)
    row.update(orphans=len(left), orphan_kinds=count_kinds(left), machine_after=machine_counts())
    kill(left)
    shutil.rmtree(tmp, ignore_errors=True)
    row["load_end"] = [round(x, 2) for x in os.getloadavg()]
    row.update(other.stop())
    if samples:
        row["samples"] = samples
    if not result:
        tail = (work / f"{spec['row']}-{spec['envs']}.log").read_text(errors="replace").strip().splitlines()[-3:]
        row["error"] = f"worker exited {proc.returncode}: {' | '.join(tail)[:400]}"
        return row
    summarize(row, result, started, ended)
    return row


def summarize(row: dict[str, Any], result: dict[str, Any], started: float, ended: float) -> None:
    eps = result["episodes"]
    clocks = Clocks.from_marks(started, result["window_start"], result["window_end"], ended,
                               paused_in_teardown_s=result["paused_s"])  # fmt: skip
    steps = [s for e in eps for s in e["steps_s"]]
    resets = [e["reset_s"] for e in eps if e["reset_s"] is not None]
    by = {s: sum(1 for e in eps if e["status"] == s) for s in ("ok", "failed", "void")}
    row.update(episodes=len(eps), solved=sum(1 for e in eps if e["status"] == "ok" and e["score"] == 1.0),
               void=by["void"], failed=by["failed"], retried=sum(1 for e in eps if e["attempts"] > 1),
               **clocks.fields(len(eps), digits=2), wall_s=round(clocks.window_s, 1),
               reset_s_p50=quantile(resets, 0.5), reset_s_p90=quantile(resets, 0.9),
               step_s_p50=quantile(steps, 0.5), step_s_p90=quantile(steps, 0.9),
               fds_before=result["fds_before"], fds_after=result["fds_after"],
               fds_leaked=result["fds_after"] - result["fds_before"] - result["server_logs"],
               env_replaced=result["replaced"], admission=result.get("admission"), server_starts=result["server_starts"],
               processes_reaped=result["reaped"], failures=[e for e in eps if e["status"] == "failed"][:10],
               voids=[e for e in eps if e["status"] == "void"][:20])  # fmt: skip
    if result["injected"]:
        hit = [e for e in eps if e["hit_by"] or e["fault"]]
        row["faults"] = {
            "injected": result["injected"],
            "carried": {k: [e["first_status"] for e in eps if e["fault"] == k] for k in FAULTS},
            "hit": len(hit),
            "hit_status": {s: sum(1 for e in hit if e["status"] == s) for s in ("ok", "void", "failed")},
            "hit_first_status": {s: sum(1 for e in hit if e["first_status"] == s) for s in ("ok", "void", "failed")},
            "never_scored_0": all(e["status"] != "failed" for e in hit),
        }
    if row.get("samples"):
        pss = [s["pss_mb"] for s in row["samples"]]
        q = max(1, len(pss) // 4)
        second, last = pss[q : 2 * q] or pss[:1], pss[-q:]
        growth = (sum(last) / len(last)) / (sum(second) / len(second)) - 1
        row["pss_growth_pct"] = round(100 * growth, 1)
        row["memory_flat"] = abs(growth) < 0.05


COLS = [("row", "row", 6), ("envs", "envs", 4), ("browsers", "brws", 4), ("episodes", "eps", 5), ("solved", "solved", 6),
        ("void", "void", 4), ("failed", "fail", 4), ("episodes_per_s_whole", "eps/s whole", 11),
        ("episodes_per_s", "eps/s window", 12), ("clocks", CELL_HEAD, 38), ("reset_s_p50", "reset p50", 9),
        ("reset_s_p90", "p90", 6), ("step_s_p50", "step p50", 8), ("step_s_p90", "p90", 6),
        ("pss_mb_per_env", "PSS/env MB", 10), ("processes", "procs", 5), ("orphans", "orphans", 7),
        ("fds_leaked", "fd leak", 7), ("other_cpus", "other CPUs", 10)]  # fmt: skip


def print_table(out: dict[str, Any]) -> None:
    print("  ".join(f"{h:>{w}}" for _, h, w in COLS))
    for r in out["rows"]:
        r = {**r, "clocks": cell(r)}
        print("  ".join(f"{r.get(k) if r.get(k) is not None else '-'!s:>{w}}" for k, _, w in COLS))
        if "error" in r:
            print(f"    error: {r['error']}")
        if "faults" in r:
            f = r["faults"]
            print(f"    faults: carried {f['carried']}; {f['hit']} episodes reached, ended {f['hit_status']} "
                  f"(first attempt {f['hit_first_status']}); never scored 0: {f['never_scored_0']}")  # fmt: skip
        if "pss_growth_pct" in r:
            print(f"    memory over {r['episodes']} episodes: {r['pss_growth_pct']:+}% (flat: {r['memory_flat']})")
    for line in out.get("verdicts", []):
        print(line)


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        if r["row"] == "ramp" and r["envs"] == TARGET["envs"] and "episodes" in r:
            met = r["solved"] == r["episodes"] and r["pss_mb_per_env"] <= TARGET["pss_mb_per_env"] and not r["orphans"]
            out.append(f"target {TARGET['envs']} envs: all solved {r['solved']}/{r['episodes']}, PSS/env "
                       f"{r['pss_mb_per_env']} MB (<= {TARGET['pss_mb_per_env']}), orphans {r['orphans']} -> "
                       f"{'met' if met else 'NOT met'}")  # fmt: skip
        if r["row"] == "faults" and "faults" in r:
            met = r["faults"]["never_scored_0"] and not r["failed"] and not r["orphans"]
            out.append(f"faults at {r['envs']} envs: never scored 0, no failed episode, no orphan -> "
                       f"{'met' if met else 'NOT met'}")  # fmt: skip
    return out


def fault_plan(n: int, per_env: int, each: int) -> dict[int, str]:
    """``each`` of every fault, spread over the episodes after the first round and before the last."""
    kinds = [k for _ in range(each) for k in FAULTS]
    first, last = n, max(n + 1, n * (per_env - 1))
    step = (last - first) / len(kinds)
    return {first + int(i * step): kind for i, kind in enumerate(kinds)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", type=int, nargs="*", default=[8, 32, 64, 128], help="ramp rows (none: no ramp)")
    ap.add_argument("--episodes-per-env", type=int, default=2)
    ap.add_argument("--fault-envs", type=int, default=64, help="envs of the fault row (0: no fault row)")
    ap.add_argument("--faults-each", type=int, default=2, help="how many of each fault the fault row injects")
    ap.add_argument("--fault-episodes-per-env", type=int, default=3)
    ap.add_argument("--long", type=int, default=0, help="episodes of the long row (0: none)")
    ap.add_argument("--long-envs", type=int, default=64)
    ap.add_argument("--long-fault-every", type=int, default=100, help="a fault every N episodes (0: none)")
    ap.add_argument("--sample-every", type=int, default=100)
    ap.add_argument("--contexts-per-browser", type=int, default=None)
    ap.add_argument("--active-browsers", type=int, default=None, help="envs driving a browser at once (None: 4/CPU)")
    ap.add_argument("--tool-timeout", type=float, default=30.0)
    ap.add_argument("--retry-void", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/browser_scale.json"))
    ap.add_argument("--table", metavar="JSON", help="reprint the table of a results file and exit")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return asyncio.run(worker(json.loads(Path(args.worker).read_text())))
    if args.table:
        return print_table(json.loads(Path(args.table).read_text()))
    from benchmarks.provenance import stamp  # its load average at the start is taken when it is imported: here

    work = ROOT / "benchmarks/.work/browser_scale"
    work.mkdir(parents=True, exist_ok=True)
    common = {"contexts_per_browser": args.contexts_per_browser, "active_browsers": args.active_browsers,
              "tool_timeout": args.tool_timeout,
              "retry_void": args.retry_void, "faults": {}, "sample_every": 0}  # fmt: skip
    specs = [{**common, "row": "ramp", "envs": n, "per_env": args.episodes_per_env} for n in args.envs]
    if args.fault_envs:
        per = max(3, args.fault_episodes_per_env)
        faults = fault_plan(args.fault_envs, per, args.faults_each)
        specs.append({**common, "row": "faults", "envs": args.fault_envs, "per_env": per, "faults": faults})
    if args.long:
        per = math.ceil(args.long / args.long_envs)
        every = args.long_fault_every
        faults = (
            {i: FAULTS[(i // every) % len(FAULTS)] for i in range(every, per * args.long_envs, every)} if every else {}
        )
        specs.append({**common, "row": "long", "envs": args.long_envs, "per_env": per, "faults": faults,
                      "sample_every": args.sample_every})  # fmt: skip
    rows = []
    for spec in specs:
        rows.append(run_row(spec, work))
        print(f"done: {spec['row']} at {spec['envs']} envs", flush=True)
    busy = [f"{r['row']} {r['envs']}" for r in rows if r.get("busy")]
    out = {"machine": {"cpus": os.cpu_count(), "quiet": not busy,
                       "note": f"NOT quiet during {', '.join(busy)}: rerun before quoting rates" if busy else ""},
           "settings": {k: v for k, v in vars(args).items() if k not in ("worker", "table", "out")},
           "rows": rows, "verdicts": verdicts(rows)}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(stamp(out), indent=1) + "\n")
    print_table(out)
    print(f"wrote {args.out}")


# ----- the worker ----------------------------------------------------------------------------------------------------
def _emit(event: str, **kw: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **kw}) + "\n")
    sys.stdout.flush()


async def worker(spec: dict[str, Any]) -> None:
    import aworld_gym  # noqa: F401
    from aworld_gym.envs.browser.browsers import all_browsers
    from aworld_gym.envs.browser.fleet import Fleet, plan_episodes

    fds_before = open_fds()
    kwargs: dict[str, Any] = {"tasks": TASKS, "tool_timeout": spec["tool_timeout"]}
    if spec["contexts_per_browser"]:
        kwargs["contexts_per_browser"] = spec["contexts_per_browser"]
    if spec.get("active_browsers"):
        kwargs["active_browsers"] = spec["active_browsers"]
    done = 0

    def on_episode(_: Any) -> None:
        nonlocal done
        done += 1
        if spec["sample_every"] and done % spec["sample_every"] == 0:
            _emit("sample", episodes=done)

    fleet = Fleet(spec["envs"], kwargs, retry_void=spec["retry_void"], on_episode=on_episode)
    t0 = time.perf_counter()
    await fleet.open()
    _emit("created", browsers=len(fleet.browsers()), make_s=round(time.perf_counter() - t0, 1))
    faults = {int(k): v for k, v in spec["faults"].items()}
    plan = plan_episodes(spec["envs"], spec["per_env"], TASKS, faults=faults)
    window_start = now()
    episodes = await fleet.run(plan)
    window_end = now()
    await asyncio.to_thread(lambda: (_emit("measure"), sys.stdin.readline()))  # the parent reads PSS meanwhile
    paused = now() - window_end
    gate = fleet.envs[0].unwrapped.admission if fleet.envs else None
    admission = {"limit": gate.limit, "admitted": gate.admitted, "waited": gate.queued} if gate else None
    await fleet.close()
    settle = now()
    await asyncio.sleep(1.0)  # the closed processes' descriptors settle before they are counted
    paused += now() - settle
    browsers = all_browsers()  # each keeps its log file open until exit (as the page server does: + 1)
    _emit("result", episodes=[e.to_dict() for e in episodes], injected=fleet.policy.injected,
          window_start=window_start, window_end=window_end, paused_s=paused,
          fds_before=fds_before, fds_after=open_fds(), server_logs=len(browsers) + 1,
          replaced=fleet.replaced, admission=admission, server_starts=[b.starts for b in browsers],
          reaped=sum(b.reaped for b in browsers))  # fmt: skip


if __name__ == "__main__":
    main()
