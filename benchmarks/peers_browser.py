"""BrowserGym 0.14.3 and AWorld/Browser-v0 side by side on the same MiniWoB++ tasks, seeds and task pages.

Rows (each framework in a subprocess of its own, its venv's Python, so its process tree is measured alone):

* ``browsergym / own-browser``: ``browsergym/miniwob.<task>`` envs (``browsergym-core`` and ``browsergym-miniwob``
  0.14.3, a venv under ``benchmarks/.work/peers_browser/venv`` made on first use; ``--no-install``: never), one
  thread per env (Playwright's sync API needs one Playwright instance, so one Node driver, per thread). Chromium is
  the system one through BrowserGym's own option ``pw_chromium_kwargs={"executable_path": ...}``. BrowserGym
  launches a new browser at every reset (its design), so each env holds one browser. Its task pages are the
  ``miniwob`` package's HTML files in our ``.venv``, served by a plain HTTP server thread inside its process
  (``MINIWOB_URL``). MiniWoB++ has no ``cheat()`` in BrowserGym, so the solution is our reference policy's actions
  expressed in BrowserGym's action space: each CSS selector resolved to the element's ``bid``, then
  ``click("bid")``, ``fill("bid", text)`` or ``select_option("bid", value)`` through ``env.step``.
* ``aworld-gym / own``: ``AWorld/Browser-v0`` with ``browser="own"`` (a Playwright MCP server and a Chromium per
  env), the reference policy, envs stepping concurrently on one event loop (as ``benchmarks/browser.py``).
* ``aworld-gym / shared``: the same with one Playwright MCP server and one Chromium for the process.

Same tasks and seeds: episode ``e`` of env ``k`` (of ``n``) runs ``TASKS[(e n + k) % len(TASKS)]`` with seed ``100 k + e``.
The page's generator seed is the one our env draws (``np_random.integers(2**31)`` after ``reset(seed)``); the
BrowserGym task is given that page seed, and the instructions of both are compared to show it is the same instance.
Two clocks (``benchmarks/clocks.py``): the whole run (``episodes_per_s_whole``) is the worker process from its start
(imports, browsers, envs) to its exit (envs closed), less ``paused_s`` (the worker waiting while its memory is read);
the window (``episodes_per_s``, as before) starts once the envs exist, before the first reset, and stops after the
last episode: it leaves out ``startup_s`` (making the envs and their browsers) and ``teardown_s`` (closing them). PSS (psutil
``memory_full_info().pss``) is summed over the worker's process tree after the last episode, every env still
holding its page. Processes are counted then, and every process seen in the tree is looked for again after the
worker exits (orphans). Load averages are recorded at the start and end of each row. Prints a table, writes JSON.

    .venv/bin/python benchmarks/peers_browser.py [--envs 8] [--episodes 24] [--no-install]
    .venv/bin/python benchmarks/peers_browser.py --table benchmarks/results/peers_browser.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks.clocks is the standard library only: every venv's worker imports it
from benchmarks.clocks import CELL_HEAD, Clocks, cell, now  # noqa: E402

WORK = ROOT / "benchmarks/.work/peers_browser"
VENV = WORK / "venv"
REQUIREMENTS = ["browsergym-core==0.14.3", "browsergym-miniwob==0.14.3", "psutil"]
CHROMIUM = "/usr/bin/chromium"
# The reference policy's tasks (aworld_gym/envs/browser/reference.py), in a fixed order.
TASKS = ["click-button", "click-button-sequence", "click-link", "click-checkboxes", "click-option",
         "click-collapsible", "click-dialog", "click-tab", "click-test", "click-test-2", "choose-list",
         "enter-password", "enter-text", "enter-text-2", "focus-text", "focus-text-2", "login-user"]  # fmt: skip


def plan(n_envs: int, episodes: int, tasks: list[str]) -> list[list[tuple[str, int]]]:
    """Per env, its (task, seed) episodes: ``episodes`` in all, dealt round-robin."""
    per = [episodes // n_envs + (1 if k < episodes % n_envs else 0) for k in range(n_envs)]
    return [[(tasks[(e * n_envs + k) % len(tasks)], 100 * k + e) for e in range(per[k])] for k in range(n_envs)]


def quantile(xs: list[float], q: float) -> float | None:
    return round(sorted(xs)[int(q * (len(xs) - 1))], 3) if xs else None


# ----- the driver (our .venv) --------------------------------------------------------------------------------------


def install(no_install: bool) -> str | None:
    """Make BrowserGym's venv (once); ``None`` when ready, else why not."""
    stamp = VENV / ".installed"
    if stamp.exists() and stamp.read_text() == json.dumps(REQUIREMENTS):
        return None
    if no_install:
        return f"BrowserGym's venv {VENV} is not there and --no-install was given"
    WORK.mkdir(parents=True, exist_ok=True)
    log = WORK / "install.log"
    print(f"installing {' '.join(REQUIREMENTS)} into {VENV} ...", flush=True)
    with log.open("w") as f:
        base = "/usr/bin/python3.11" if Path("/usr/bin/python3.11").exists() else sys.executable
        for step in ([base, "-m", "venv", str(VENV)], [str(VENV / "bin/python"), "-m", "pip", "install", "-q",
                                                      *REQUIREMENTS]):  # fmt: skip
            if subprocess.run(step, stdout=f, stderr=subprocess.STDOUT).returncode != 0:
                return f"install failed ({' '.join(step[2:5])}), see {log}"
    stamp.write_text(json.dumps(REQUIREMENTS))
    return None


def tree_pids(pid: int) -> dict[int, float]:
    """pid -> create_time for ``pid`` and every process below it."""
    import psutil

    out = {}
    try:
        root = psutil.Process(pid)
        for p in [root, *root.children(recursive=True)]:
            try:
                out[p.pid] = p.create_time()
            except psutil.Error:
                continue
    except psutil.Error:
        pass
    return out


def pss_mb(pids: dict[int, float]) -> tuple[float, int]:
    import psutil

    total, n = 0, 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_full_info().pss
            n += 1
        except psutil.Error:
            continue
    return total / 2**20, n


def browser_procs() -> int:
    """Chromium and Node processes on the whole machine (others' too: context for the exact orphan count)."""
    import psutil

    n = 0
    for p in psutil.process_iter(["name"]):
        name = (p.info.get("name") or "").lower()
        n += any(k in name for k in ("chrom", "headless_shell", "node"))
    return n


def run_row(framework: str, mode: str, python: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One framework/mode: its worker subprocess, measured from outside."""
    import psutil

    row: dict[str, Any] = {"framework": framework, "mode": mode, "envs": spec["envs"]}
    run_dir = WORK / f"{framework}-{mode}"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "spec.json").write_text(json.dumps({**spec, "mode": mode}))
    from benchmarks.provenance import OtherWork

    row["load_start"] = [round(x, 2) for x in os.getloadavg()]
    other_work = OtherWork()
    row["browser_procs_machine_before"] = browser_procs()
    stderr = (run_dir / "stderr.log").open("w")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started = now()  # the whole run: the worker's start (imports, browsers, envs) to its exit
    proc = subprocess.Popen([python, __file__, "--worker", framework, str(run_dir / "spec.json")], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)  # fmt: skip
    seen: dict[int, float] = {}
    stop = threading.Event()

    def sampler() -> None:  # every process of the tree, for the orphan check
        while not stop.is_set():
            seen.update(tree_pids(proc.pid))
            stop.wait(0.5)

    threading.Thread(target=sampler, daemon=True).start()
    result: dict[str, Any] = {}
    try:
        assert proc.stdout is not None and proc.stdin is not None
        for line in proc.stdout:
            msg = json.loads(line)
            if msg["event"] == "created":
                row["processes_after_create"] = len(tree_pids(proc.pid))
            elif msg["event"] == "measure":  # the episodes are done, every env still holds its page
                pids = tree_pids(proc.pid)
                seen.update(pids)
                pss, n = pss_mb(pids)
                row.update(processes=n, pss_mb_total=round(pss, 1), pss_mb_per_env=round(pss / spec["envs"], 1))
                proc.stdin.write("go\n")
                proc.stdin.flush()
            elif msg["event"] == "result":
                result = msg["result"]
        proc.wait(timeout=120)
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stderr.close()
    ended = now()
    time.sleep(2.0)
    orphans = []
    for pid, created in seen.items():
        try:
            if psutil.Process(pid).create_time() == created:
                orphans.append(pid)
        except psutil.Error:
            continue
    row["load_end"] = [round(x, 2) for x in os.getloadavg()]
    row.update(other_work.stop())  # the CPU other processes used during the row (busy: over a quarter of a CPU)
    row["browser_procs_machine_after"] = browser_procs()
    row["processes_seen"] = len(seen)
    row["orphans"] = len(orphans)
    if not result:
        tail = (run_dir / "stderr.log").read_text(errors="replace").strip().splitlines()[-3:]
        row["error"] = f"worker exited {proc.returncode}: {' | '.join(tail)[:400]}"
        return row
    eps = [e for e in result["episodes"] if "failed" not in e]
    clocks = Clocks.from_marks(started, result["window_start"], result["window_end"], ended,
                               paused_in_teardown_s=result["paused_s"])  # fmt: skip
    row.update({
        "episodes": len(eps),
        "failed": len(result["episodes"]) - len(eps),
        "failures": [f"{e['task']} seed {e['seed']}: {e['failed']}" for e in result["episodes"] if "failed" in e],
        **clocks.fields(len(eps), digits=3),
        "wall_s": round(clocks.window_s, 2),
        "reset_s_p50": quantile([e["reset_s"] for e in eps], 0.5),
        "reset_s_p90": quantile([e["reset_s"] for e in eps], 0.9),
        "step_s_p50": quantile([s for e in eps for s in e["steps_s"]], 0.5),
        "solved": sum(1 for e in eps if e["raw_reward"] is not None and e["raw_reward"] > 0),
        "episode_records": result["episodes"],
        "versions": result["versions"],
        "worker_errors": result.get("errors", []),
        "action_errors": sum(len(e.get("action_errors", [])) for e in eps),
        "quiet_machine": not row["busy"],
    })  # fmt: skip
    return row


def agreement(rows: list[dict[str, Any]]) -> None:
    """Each aworld-gym row against BrowserGym: same raw reward (and same instruction) per task and seed."""
    bg = next((r for r in rows if r["framework"] == "browsergym" and "episode_records" in r), None)
    if bg is None:
        return
    ref = {(e["task"], e["seed"]): e for e in bg["episode_records"] if "failed" not in e}
    for r in rows:
        if r is bg or "episode_records" not in r:
            continue
        pairs = [(e, ref[(e["task"], e["seed"])]) for e in r["episode_records"]
                 if (e["task"], e["seed"]) in ref and "failed" not in e]  # fmt: skip
        r["reward_agree_with_browsergym"] = f"{sum(a['raw_reward'] == b['raw_reward'] for a, b in pairs)}/{len(pairs)}"
        r["instruction_agree_with_browsergym"] = (
            f"{sum(a['utterance'] == b['utterance'] for a, b in pairs)}/{len(pairs)}"
        )
        clean = [(a, b) for a, b in pairs if not b.get("action_errors")]  # no BrowserGym action timed out
        r["reward_agree_where_browsergym_actions_ran"] = (
            f"{sum(a['raw_reward'] == b['raw_reward'] for a, b in clean)}/{len(clean)}"
        )
        r["disagreements"] = [{"task": a["task"], "seed": a["seed"], "ours": a["raw_reward"], "browsergym": b["raw_reward"],
                               "utterances": [a["utterance"], b["utterance"]],
                               "browsergym_action_errors": b.get("action_errors", [])}
                              for a, b in pairs if a["raw_reward"] != b["raw_reward"] or a["utterance"] != b["utterance"]]  # fmt: skip


COLS = [("framework", "framework", 10), ("mode", "mode", 11), ("envs", "envs", 4), ("episodes", "eps", 4), ("failed", "fail", 4),
        ("episodes_per_s_whole", "eps/s whole", 11), ("episodes_per_s", "eps/s window", 12),
        ("clocks", CELL_HEAD, 38), ("reset_s_p50", "reset p50", 9), ("reset_s_p90", "p90", 6),
        ("step_s_p50", "step p50", 8), ("pss_mb_per_env", "PSS/env MB", 10), ("processes", "procs", 5),
        ("solved", "solved", 6), ("reward_agree_with_browsergym", "agree", 6), ("orphans", "orphans", 7),
        ("load_start", "load start", 10), ("load_end", "load end", 8), ("other_cpus", "other CPUs", 10)]  # fmt: skip


def print_table(out: dict[str, Any]) -> None:
    print("  ".join(f"{h:>{w}}" for _, h, w in COLS))
    for r in out["rows"]:
        r = {**r, "clocks": cell(r)}
        cells = []
        for key, _, w in COLS:
            v = r.get(key, "")
            v = v[0] if key.startswith("load") and isinstance(v, list) else v
            cells.append(f"{v if v is not None else '-'!s:>{w}}")
        print("  ".join(cells))
        if "error" in r:
            print(f"    error: {r['error']}")
    a = out.get("browsergym_action_set") or {}
    if "chars" in a:
        print(
            f"BrowserGym's action-set description (HighLevelActionSet({a['subsets']}).describe()): {a['chars']} chars"
        )
    print(f"machine quiet (other processes under a quarter of a CPU during every row): {out['machine']['quiet']}")


def describe_action_set(python: str) -> dict[str, Any]:
    """BrowserGym's action-set prompt, measured in its venv."""
    run = subprocess.run([python, __file__, "--describe-action-set"], capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        return {"error": run.stderr.strip().splitlines()[-1:]}
    measured = json.loads(run.stdout)
    measured.pop("text")  # benchmarks/prompt_size.py measures it again in this venv, with its tokens
    return measured


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", type=int, default=8, help="concurrent envs in every row")
    ap.add_argument("--episodes", type=int, default=24, help="episodes per row, dealt round-robin to the envs")
    ap.add_argument("--tasks", nargs="+", default=TASKS)
    ap.add_argument(
        "--rows", nargs="+", default=["browsergym", "own", "shared"], choices=["browsergym", "own", "shared"]
    )
    ap.add_argument("--no-install", action="store_true", help="never create BrowserGym's venv")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/peers_browser.json"))
    ap.add_argument("--table", metavar="JSON", help="reprint the table of a results file and exit")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--describe-action-set", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.describe_action_set:
        return bg_describe()
    if args.worker:
        return {"browsergym": bg_worker, "aworld-gym": aworld_worker}[args.worker[0]](Path(args.worker[1]))
    if args.table:
        return print_table(json.loads(Path(args.table).read_text()))
    unknown = set(args.tasks) - set(TASKS)
    if unknown:
        raise SystemExit(f"no scripted solution for {sorted(unknown)}; pick from {TASKS}")
    sys.path.insert(0, str(ROOT))
    from benchmarks.provenance import stamp  # its load average at the start is taken when it is imported: here

    html = miniwob_html()
    spec = {"envs": args.envs, "plan": plan(args.envs, args.episodes, args.tasks), "miniwob_html": str(html),
            "chromium": CHROMIUM}  # fmt: skip
    rows: list[dict[str, Any]] = []
    action_set: dict[str, Any] = {"error": "not measured"}
    why = install(args.no_install)
    for name in args.rows:
        if name == "browsergym":
            if why:
                rows.append({"framework": "browsergym", "mode": "own-browser", "envs": args.envs, "error": why})
                continue
            action_set = describe_action_set(str(VENV / "bin/python"))
            rows.append(run_row("browsergym", "own-browser", str(VENV / "bin/python"), spec))
        else:
            rows.append(run_row("aworld-gym", name, sys.executable, spec))
        print(f"done: {rows[-1]['framework']} {rows[-1]['mode']}", flush=True)
    agreement(rows)
    busy = [f"{r['framework']} {r['mode']} ({r['other_cpus']:.2f} CPUs)" for r in rows if r.get("busy")]
    out = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "quiet": not busy,
                    "note": "" if not busy else
                    f"NOT a quiet machine: other processes used over a quarter of a CPU during {', '.join(busy)}; "
                    "rerun on a quiet machine before quoting throughput or latency"},
        "settings": {"envs": args.envs, "episodes": args.episodes, "tasks": args.tasks, "chromium": CHROMIUM,
                     "browsergym": "its defaults: pre_observation_delay 0.5 s, a 500 ms timeout per action, 5 s per page load; "
                                   "a new task browser per reset plus a chat-window browser per env (its design)",
                     "aworld-gym": "settle_ms 150 (its default)"},
        "browsergym_action_set": action_set,
        "rows": rows,
    }  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(stamp(out), indent=1) + "\n")
    print_table(out)
    print(f"wrote {args.out}")


def miniwob_html() -> Path:
    sys.path.insert(0, str(ROOT))
    from aworld_gym.envs.browser.tasks import miniwob_html_dir

    return miniwob_html_dir()


# ----- workers -----------------------------------------------------------------------------------------------------


def _emit(event: str, **kw: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **kw}) + "\n")
    sys.stdout.flush()


def _wait_go() -> float:
    """Wait while the driver reads the process tree's memory; the seconds waited (``paused_s``: in neither clock)."""
    t = time.monotonic()
    _emit("measure")
    sys.stdin.readline()
    return time.monotonic() - t


def aworld_worker(spec_path: Path) -> None:
    """Our env in ``spec['mode']``: the reference policy, the envs stepping concurrently."""
    import asyncio

    sys.path.insert(0, str(ROOT))
    import gymnasium as gym

    import aworld_gym
    from aworld_gym.envs.browser.reference import BrowserReferencePolicy

    spec = json.loads(spec_path.read_text())
    tasks = sorted({t for env_plan in spec["plan"] for t, _ in env_plan})

    async def run() -> dict[str, Any]:
        envs = [aworld_gym.async_face(await asyncio.to_thread(gym.make, "AWorld/Browser-v0", tasks=tasks, browser=spec["mode"]))
                for _ in range(spec["envs"])]  # fmt: skip
        _emit("created")
        policy = BrowserReferencePolicy()
        records: list[dict[str, Any]] = []

        async def slot(k: int) -> None:
            env = envs[k].unwrapped
            for task, seed in spec["plan"][k]:
                try:
                    records.append(await one(env, task, seed))
                except Exception as exc:  # noqa: BLE001  (a failed episode is a record)
                    records.append({"task": task, "seed": seed, "failed": repr(exc)[:300]})

        async def one(env: Any, task: str, seed: int) -> dict[str, Any]:
            t = time.perf_counter()
            await env.areset(seed=seed, options={"task_id": task})
            rec: dict[str, Any] = {"task": task, "seed": seed, "utterance": env.utterance,
                                   "reset_s": time.perf_counter() - t, "steps_s": []}  # fmt: skip
            done, info = False, {}
            while not done:
                action = policy.decide(env)
                t = time.perf_counter()
                _, _, terminated, truncated, info = await env.astep(action)
                rec["steps_s"].append(time.perf_counter() - t)
                done = terminated or truncated
            raw = (info.get("task_state") or {}).get("raw_reward")
            rec["raw_reward"] = None if raw is None else float(raw)
            return rec

        window_start = time.monotonic()  # the window's marks: time.monotonic, the driver's clock too
        try:
            await asyncio.gather(*(slot(k) for k in range(len(envs))))
            window_end = time.monotonic()
            paused = await asyncio.to_thread(_wait_go)
        finally:
            for e in envs:
                await e.unwrapped.aclose()
        return {"episodes": records, "window_start": window_start, "window_end": window_end, "paused_s": paused}

    result = asyncio.run(run())
    from importlib.metadata import version

    result["versions"] = {"aworld-gym": version("aworld-gym"), "gymnasium": version("gymnasium")}
    _emit("result", result=result)


def bg_describe() -> None:
    """BrowserGym's action-set prompt: the default (``HighLevelActionSet()``, what ``BrowserEnv`` and so its MiniWoB++
    envs map actions with), with its text; and, for reference, shorter variants a user may pick."""
    from importlib.metadata import version

    from browsergym.core.action.highlevel import HighLevelActionSet

    action_set = HighLevelActionSet()
    text = action_set.describe()
    variants = {
        "describe(with_long_description=False, with_examples=False)": len(
            action_set.describe(with_long_description=False, with_examples=False)
        ),
        "HighLevelActionSet(['miniwob_all']).describe()": len(HighLevelActionSet(["miniwob_all"]).describe()),
        "HighLevelActionSet(['bid']).describe()": len(HighLevelActionSet(["bid"]).describe()),
    }
    out = {"call": "HighLevelActionSet().describe()", "subsets": HighLevelActionSet.__init__.__defaults__[0],
           "actions": len(action_set.action_set), "chars": len(text), "variants_chars": variants,
           "browsergym-core": version("browsergym-core"), "text": text}  # fmt: skip
    print(json.dumps(out))


def bg_worker(spec_path: Path) -> None:
    """BrowserGym: one thread per env, each with its own Playwright (the sync API is per thread)."""
    import functools
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    spec = json.loads(spec_path.read_text())
    handler = functools.partial(SimpleHTTPRequestHandler, directory=spec["miniwob_html"])
    handler.func.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    os.environ["MINIWOB_URL"] = f"http://127.0.0.1:{httpd.server_address[1]}/miniwob/"

    import browsergym.core.chat as bg_chat
    import browsergym.core.env as bg_env
    import browsergym.miniwob  # noqa: F401  (registers browsergym/miniwob.*)
    import gymnasium as gym
    import playwright.sync_api
    from browsergym.miniwob.base import AbstractMiniwobTask
    from gymnasium.utils.seeding import np_random

    local = threading.local()

    def thread_playwright() -> Any:  # BrowserGym keeps one global Playwright; the sync API needs one per thread
        if getattr(local, "pw", None) is None:
            local.pw = playwright.sync_api.sync_playwright().start()
        return local.pw

    bg_env._get_global_playwright = thread_playwright
    bg_chat._get_global_playwright = thread_playwright
    # BrowserGym's chat window (a second browser per env, part of its design) launches without its
    # pw_chromium_kwargs: default every launch of this process to the system Chromium.
    original_launch = playwright.sync_api.BrowserType.launch

    def launch(self: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("executable_path", spec["chromium"])
        return original_launch(self, *args, **kwargs)

    playwright.sync_api.BrowserType.launch = launch

    class PageSeed:  # the page seed our env draws for this reset seed, in place of BrowserGym's own draw
        def __init__(self, seed: int) -> None:
            self.seed = int(np_random(seed)[0].integers(2**31))

        def randint(self, *_: Any) -> int:
            return self.seed

    original_setup = AbstractMiniwobTask.setup

    def setup(self: Any, page: Any) -> Any:
        self.random = PageSeed(local.seed)
        return original_setup(self, page)

    AbstractMiniwobTask.setup = setup
    sys.path.insert(0, str(ROOT))
    from aworld_gym.envs.browser.reference import SOLVERS  # pure Python: the reference solutions' (tool, args)

    def make(task: str) -> Any:
        return gym.make(f"browsergym/miniwob.{task}", headless=True,
                        pw_chromium_kwargs={"executable_path": spec["chromium"]})  # fmt: skip

    def to_action(env: Any, name: str, arguments: dict[str, Any]) -> str:
        bid = env.unwrapped.page.locator(arguments["target"]).first.get_attribute("bid", timeout=5000)
        if name == "browser_click":
            return f"click({json.dumps(bid)})"
        if name == "browser_type":
            return f"fill({json.dumps(bid)}, {json.dumps(arguments['text'])})"
        if name == "browser_select_option":
            return f"select_option({json.dumps(bid)}, {json.dumps(arguments['values'][0])})"
        raise ValueError(name)

    records: list[dict[str, Any]] = []
    ready = threading.Barrier(spec["envs"] + 1)
    start = threading.Event()
    errors: list[str] = []
    envs: list[Any] = [None] * spec["envs"]
    finished = threading.Barrier(spec["envs"] + 1)
    release = threading.Event()

    def slot(k: int) -> None:
        try:
            thread_playwright()
            envs[k] = make(spec["plan"][k][0][0]) if spec["plan"][k] else None
        except Exception as exc:  # noqa: BLE001
            errors.append(f"env {k}: {exc!r}")
        ready.wait()
        start.wait()
        for i, (task, seed) in enumerate(spec["plan"][k]):
            try:
                if i and task != spec["plan"][k][i - 1][0]:  # a BrowserGym env is made for one task
                    envs[k].close()
                    envs[k] = make(task)
                env = envs[k]
                local.seed = seed
                t = time.perf_counter()
                _, info = env.reset(seed=seed)
                rec: dict[str, Any] = {"task": task, "seed": seed, "utterance": env.unwrapped.task._get_goal(),
                                       "reset_s": time.perf_counter() - t, "steps_s": [], "action_errors": []}  # fmt: skip
                calls = SOLVERS[task](rec["utterance"])
                raw = None
                for name, arguments in calls:
                    t = time.perf_counter()
                    action = to_action(env, name, arguments)
                    _, _, terminated, truncated, info = env.step(action)
                    rec["steps_s"].append(time.perf_counter() - t)
                    if env.unwrapped.last_action_error:
                        rec["action_errors"].append(env.unwrapped.last_action_error[:200])
                    raw = (info.get("task_info") or {}).get("RAW_REWARD_GLOBAL")
                    if terminated or truncated:
                        break
                rec["raw_reward"] = None if raw is None else float(raw)
                records.append(rec)
            except Exception as exc:  # noqa: BLE001  (a failed episode is a record; the env is made afresh)
                errors.append(f"env {k} {task} seed {seed}: {exc!r}"[:400])
                records.append({"task": task, "seed": seed, "failed": repr(exc)[:300]})
                with contextlib.suppress(Exception):
                    envs[k].close()
                try:
                    envs[k] = make(task)
                except Exception as exc2:  # noqa: BLE001
                    errors.append(f"env {k}: {exc2!r}"[:400])
                    break
        finished.wait()
        release.wait()
        if envs[k] is not None:
            envs[k].close()
        if getattr(local, "pw", None) is not None:
            local.pw.stop()

    threads = [threading.Thread(target=slot, args=(k,)) for k in range(spec["envs"])]
    for t in threads:
        t.start()
    ready.wait()
    _emit("created")
    window_start = time.monotonic()  # the window's marks: time.monotonic, the driver's clock too
    start.set()
    finished.wait()
    window_end = time.monotonic()
    paused = _wait_go()
    release.set()
    for t in threads:
        t.join()
    httpd.shutdown()
    if errors:
        print("\n".join(errors), file=sys.stderr)
    from importlib.metadata import version

    versions = {p: version(p) for p in ("browsergym-core", "browsergym-miniwob", "playwright", "gymnasium")}
    _emit("result", result={"episodes": records, "window_start": window_start, "window_end": window_end,
                            "paused_s": paused, "versions": versions, "errors": errors})  # fmt: skip


if __name__ == "__main__":
    main()
