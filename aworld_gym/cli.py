"""The ``aworld-gym`` command."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any


def _env_id(args: argparse.Namespace) -> str:
    """The id ``--env`` names, once ``--import`` modules and a ``module:`` prefix are imported (they register it); an
    id that is not registered is Gymnasium's own error (with its "Did you mean")."""
    import gymnasium as gym

    import aworld_gym  # noqa: F401 - registers the built-in ids
    from aworld_gym.core.registry import resolve

    _import_all(args.imports)
    env_id = resolve(args.env)
    gym.spec(env_id)
    return env_id


def _import_all(modules: list[str]) -> None:
    import importlib

    for module in modules:
        importlib.import_module(module)


def make_policy_after(imports: tuple[str, ...], name: str, env_id: str, **kwargs: Any) -> Any:
    """``make_policy`` once ``imports`` are imported: a worker process (``--processes``, Ray) imports the modules that
    register the id and its reference policy before it asks for the policy (picklable: a module-level function)."""
    from aworld_gym.rollout.policies import make_policy

    _import_all(list(imports))
    return make_policy(name, env_id, **kwargs)


def _check_counts(args: argparse.Namespace) -> None:
    """Counts are checked before anything is made or written (no empty trajectory file for ``--episodes 0``)."""
    for flag, value, least in (("--episodes", args.episodes, 1), ("--concurrency", args.concurrency, 1),
                               ("--group-size", args.group_size, 1), ("--max-turns", args.max_turns, 1)):  # fmt: skip
        if value is not None and value < least:
            raise ValueError(f"{flag} must be at least {least}, got {value}")
    if args.policy_latency < 0:
        raise ValueError(f"--policy-latency must be >= 0, got {args.policy_latency:g}")
    if args.policy_timeout is not None and args.policy_timeout <= 0:
        raise ValueError(f"--policy-timeout must be > 0 seconds, got {args.policy_timeout:g}")


def own_command() -> str:
    """How to run this very ``aworld-gym`` again: its bare name when that is what the shell finds on PATH, else its
    path (``make run`` runs ``.venv/bin/aworld-gym`` from a shell whose PATH has none: a bare name there is
    "command not found")."""
    here = Path(sys.executable).parent / "aworld-gym"
    found = shutil.which("aworld-gym")
    if found is not None and here.exists() and Path(found).resolve() == here.resolve():
        return "aworld-gym"
    if not here.exists():
        return f"{shlex.quote(sys.executable)} -m aworld_gym.cli"
    relative = os.path.relpath(here)
    return shlex.quote(here.as_posix() if relative.startswith("..") else relative)


def no_episode_ran(summary: Any) -> str | None:
    """Why a run failed as a whole, in one line: every episode it recorded was void (an env that could not start,
    a refused model endpoint: infrastructure's fault, no episode ran); ``None`` when at least one ran."""
    if not summary.recorded or summary.void < summary.recorded:
        return None
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(summary.failures.items()))
    kind, error = next(iter(sorted(summary.first_errors.items())), ("", ""))
    reason = f"; first {kind}: {error}" if error else ""
    return f"no episode could run: all {summary.recorded} were void ({kinds}){reason}"


def _rollout(args: argparse.Namespace) -> int:
    import functools

    from aworld_gym.rollout.collect import collect
    from aworld_gym.rollout.sinks.screenshots import screenshots_folder

    _check_counts(args)
    env_kwargs = json.loads(args.env_kwargs) if args.env_kwargs else {}
    if not isinstance(env_kwargs, dict):
        raise ValueError("--env-kwargs must be a JSON object")
    env_id = _env_id(args)
    if args.max_turns is not None:
        env_kwargs["max_turns"] = args.max_turns
    out = args.out or Path("runs") / f"{env_id.split('/')[-1].lower()}-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    policy_kwargs = {"model": args.model, "base_url": args.base_url} if args.policy in ("openai", "hf") else {}
    factory = functools.partial(
        make_policy_after,
        (*args.imports, *([args.env.rpartition(":")[0]] if ":" in args.env else [])),
        args.policy,
        env_id,
        latency_s=args.policy_latency,
        **{k: v for k, v in policy_kwargs.items() if v},
    )
    # fail fast on a bad policy configuration; a scripted policy may name the tasks it knows (env_defaults)
    env_kwargs = {**getattr(factory(), "env_defaults", {}), **env_kwargs}
    engine = "ray" if (args.ray or args.ray_address) else "process" if args.processes else "async"
    # The runner keeps a PNG per step of an env that renders rgb_array frames (what --screenshots asks for) or
    # shows the model images (screenshot observation modes); other envs write nothing there.
    screenshots = screenshots_folder(out) if engine == "async" or args.screenshots else None
    if args.screenshots:
        env_kwargs.setdefault("render_mode", "rgb_array")
    print(
        f"aworld-gym rollout: {env_id}, policy={args.policy}, {args.episodes} episodes, group size {args.group_size}, "
        f"concurrency {args.concurrency} ({engine}), policy latency {args.policy_latency:g} s",
        flush=True,
    )
    summary = collect(
        env_id,
        factory,
        episodes=args.episodes,
        concurrency=args.concurrency,
        group_size=args.group_size,
        seed=args.seed,
        env_kwargs=env_kwargs,
        sink=out,
        resume=args.resume,
        task_order=args.task_order,
        engine=engine,
        ray_address=args.ray_address,
        policy_timeout_s=args.policy_timeout,
        progress=not args.no_progress,
        screenshots=screenshots,
    )
    print(summary.render(), flush=True)
    print(f"read the run: {own_command()} report {out} --html {Path(out).with_suffix('.html')}", flush=True)
    if args.summary_json:
        Path(args.summary_json).write_text(summary.to_json() + "\n", encoding="utf-8")
    failed = no_episode_ran(summary)
    if failed is not None:
        print(f"aworld-gym: error: {failed}", file=sys.stderr, flush=True)
        return 1
    return 0 if summary.recorded + summary.skipped == summary.episodes else 1


def _report(args: argparse.Namespace) -> int:
    from aworld_gym.report.stats import compare, summarize
    from aworld_gym.report.tables import render, render_comparison

    alarm = {
        "window": args.parse_window,
        "no_tool_call": args.no_tool_alarm,
        "parse_failures": args.parse_failure_alarm,
    }
    summaries = [summarize(run, by=args.by, alarm=alarm) for run in args.runs]
    print("\n\n".join(render(s) for s in summaries))
    comparison = compare(summaries) if len(summaries) > 1 else None
    if comparison is not None:
        print("\n" + render_comparison(comparison))
    if args.json:
        from aworld_gym.report.records import json_safe

        doc = json_safe({"runs": summaries, "comparison": comparison})  # NaN/inf as text: the JSON stays valid
        Path(args.json).write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
        print(f"\nwrote {args.json}")
    if args.html:
        from aworld_gym.report.html import build

        made = build(args.runs, args.html, by=args.by, max_mb=args.max_mb, alarm=alarm)
        b = made["bound"]
        print(f"wrote {made['out']} ({made['bytes'] / 2**20:.1f} MB; transcripts of {b['embedded']} of "
              f"{b['episodes']} episodes embedded{', a uniform sample' if b['sampled'] else ''})")  # fmt: skip
    return 0


def _envs(args: argparse.Namespace) -> int:
    import aworld_gym
    from aworld_gym.core import registry

    _import_all(args.imports)
    ids = [*aworld_gym.ENV_IDS, *sorted(registry.DECLARED - set(aworld_gym.ENV_IDS))]
    rows = [registry.describe(env_id) for env_id in ids]
    if args.probe:
        for row in rows:
            row["tools"] = _probe_tools(row["id"])
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(envs_table(rows))
    if not args.probe and any(row["tools"] is None for row in rows):
        print("\n?: tools known once the env is made: --probe makes each env (starting its servers) to list them")
    return 0


def _probe_tools(env_id: str) -> list[str] | str:
    """The tool names of ``env_id`` made with its default kwargs (its servers start), or why it could not be made."""
    import gymnasium as gym

    try:
        env = gym.make(env_id)
    except Exception as exc:  # noqa: BLE001 - shown in the table: an id that needs kwargs cannot be probed bare
        return f"(not made: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    try:
        return [
            tool["function"]["name"] if "function" in tool else str(tool.get("name")) for tool in env.unwrapped.tools
        ]
    finally:
        env.close()


def envs_table(rows: list[dict[str, Any]]) -> str:
    """The ids as an aligned table: id, turn limit, the kwargs gym.make needs, reference policy, tools."""
    head = ("id", "turns", "needs", "reference", "tools")

    def tools(value: Any) -> str:
        return "?" if value is None else value if isinstance(value, str) else ", ".join(value) or "-"

    body = [(r["id"], str(r["max_turns"] if r["max_turns"] is not None else "-"), ", ".join(r["needs"]) or "-",
             "yes" if r["reference_policy"] else "no", tools(r["tools"])) for r in rows]  # fmt: skip
    widths = [max(len(line[i]) for line in (head, *body)) for i in range(len(head) - 1)]
    return "\n".join("  ".join([*(c.ljust(w) for c, w in zip(line, widths, strict=False)), line[-1]]).rstrip()
                     for line in (head, *body))  # fmt: skip


def _serve_python(args: argparse.Namespace) -> int:
    from aworld_gym.sandbox.server import main as serve

    argv = ["--transport", "streamable-http", "--host", args.host, "--port", str(args.port)]
    serve([*argv, "--isolation", args.isolation, "--warm", args.warm])
    return 0


def _serve_env(args: argparse.Namespace) -> int:
    from aworld_gym.trainers.openenv import serve
    from aworld_gym.trainers.openenv_protocol import ClientTasks

    kwargs = json.loads(args.env_kwargs) if args.env_kwargs else None
    client_tasks = ClientTasks(args.allow_client_tasks, args.client_files_root)
    serve(_env_id(args), host=args.host, port=args.port, env_kwargs=kwargs, max_sessions=args.max_sessions,
          token=args.token, generate_token=args.generate_token, session_timeout=args.session_timeout, out=args.out,
          allowed_origins=args.allowed_origin, allowed_hosts=args.allowed_host, client_tasks=client_tasks,
          max_action_chars=args.max_action_chars, max_message_bytes=args.max_message_bytes,
          step_timeout_s=args.step_timeout or None)  # fmt: skip
    return 0


def _serve_model(args: argparse.Namespace) -> int:
    from aworld_gym.base.http_guard import server_token
    from aworld_gym.endpoint import HFBackend, TokenEndpoint

    token, generated = server_token(args.host, args.token, args.generate_token)
    kwargs = {"enable_thinking": False} if args.no_thinking else None
    endpoint = TokenEndpoint(HFBackend(args.model), model_name=args.name or Path(args.model).name,
                             max_tokens=args.max_tokens, temperature=args.temperature, chat_template_kwargs=kwargs,
                             token=token, out=args.out, max_body_bytes=args.max_message_bytes,
                             allowed_hosts=tuple(args.allowed_host), allowed_origins=tuple(args.allowed_origin))  # fmt: skip
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"serve-model: http://{shown}:{args.port}/v1 (an episode: POST /episodes, then its base_url or the header "
          f"X-AWorld-Episode; DELETE /episodes/<id> returns its calls){'; records: ' + args.out if args.out else ''}",
          flush=True)  # fmt: skip
    if generated:
        print(f"serve-model: every route needs the token: Authorization: Bearer {token}", flush=True)
    endpoint.serve(args.host, args.port)
    return 0


def _cache(args: argparse.Namespace) -> int:
    import time

    from aworld_gym.mcp.cache.store import open_store

    if args.action == "stats":
        stats = open_store(args.store, read_only=True).stats()
        if args.json:
            print(json.dumps(stats, indent=2))
            return 0
        print(f"{stats['path']}: {stats['calls']} calls; servers listed: {', '.join(stats['listed']) or '-'}")
        for server, row in stats["servers"].items():
            first, last = (time.strftime("%Y-%m-%d %H:%M", time.localtime(row[k])) for k in ("first", "last"))
            print(f"  {server}: {row['calls']} calls ({row['errors']} error results), {first} .. {last}, "
                  f"{row['latency_s']:.1f} s of tool time saved per replay")  # fmt: skip
        return 0
    if args.action == "export":
        if not args.out:
            raise ValueError("export needs --out FILE.jsonl")
        n = open_store(args.store, read_only=True).export(args.out)
        print(f"wrote {n} calls to {args.out}")
        return 0
    if args.action == "merge":
        if not args.other:
            raise ValueError("merge needs --from OTHER.sqlite")
        added = open_store(args.store).merge(open_store(args.other, read_only=True))
        print(f"added {added} calls from {args.other}")
        return 0
    if args.older_than is None and args.server is None:
        raise ValueError("prune needs --older-than DAYS and/or --server NAME")
    before = time.time() - args.older_than * 86400 if args.older_than is not None else None
    gone = open_store(args.store).prune(before=before, server=args.server)
    print(f"deleted {gone} calls")
    return 0


def _rescore(args: argparse.Namespace) -> int:
    import gymnasium as gym

    from aworld_gym.report.rescore import rescore

    _import_all(args.imports)  # e.g. a module that registers a scorer
    if (args.tasks is None) == (args.env is None):
        raise ValueError("rescore needs the run's tasks: --tasks FILE, or --env ID (its tasks)")
    if args.tasks is not None:
        tasks: Any = args.tasks
    else:
        env = gym.make(_env_id(args), **(json.loads(args.env_kwargs) if args.env_kwargs else {}))
        try:
            tasks = env.unwrapped.tasks
        finally:
            env.close()
    s = rescore(args.run, args.out, args.scorer, tasks)
    print(f"{s.records} records: {s.rescored} re-scored with {args.scorer}, {s.unscored} left as they were (void or "
          f"no answer); successes {s.successes_before} -> {s.successes_after}; wrote {args.out}")  # fmt: skip
    if s.missing_task:
        print(f"{len(s.missing_task)} records name a task the tasks lack (kept unscored), e.g. {s.missing_task[0]!r}")
    return 0


def _setup(args: argparse.Namespace) -> int:
    from aworld_gym.setup_tools import setup

    return setup([args.targets] if isinstance(args.targets, str) else args.targets, install=not args.no_install)


class DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """Help that shows each option's default, except where there is none to show (None, a flag's False, [])."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.required or action.default is None or action.default is False or action.default == []:
            return action.help
        return super()._get_help_string(action)


IMPORT_HELP = "import this module first (it registers its ids with aworld_gym.register); repeatable"
ENV_HELP = "environment id, e.g. AWorld/Code-v0, or Gymnasium's module:Id (the module is imported first)"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="aworld-gym", description="MCP tool environments for LLM-agent RL.")
    sub = ap.add_subparsers(dest="command", required=True)
    fmt = {"formatter_class": DefaultsHelp}  # every option's help shows its default
    r = sub.add_parser("rollout", help="collect episodes with a policy and write trajectories (JSONL)", **fmt)
    r.add_argument("--env", required=True, help=ENV_HELP)
    r.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE", help=IMPORT_HELP)
    r.add_argument(
        "--policy",
        default="reference",
        choices=["reference", "openai", "hf"],
        help="reference: the id's scripted solver; openai: an endpoint; hf: a local model",
    )
    r.add_argument("--model", default=None, help="model name (openai: else $LLM_MODEL_NAME) or path (hf)")
    r.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint (else $LLM_BASE_URL)")
    r.add_argument("--episodes", type=int, default=32, help="episodes in all (at least 1)")
    r.add_argument("--concurrency", type=int, default=8, help="episodes running at once")
    r.add_argument("--group-size", type=int, default=1, help="samples per task in a row (GRPO groups)")
    r.add_argument("--policy-latency", type=float, default=0.0, help="fixed seconds per policy turn")
    r.add_argument("--policy-timeout", type=float, default=None, help="seconds before a policy turn counts as hung")
    r.add_argument("--seed", type=int, default=0, help="episode i resets with seed+i")
    r.add_argument(
        "--task-order", choices=["cycle", "sample"], default="cycle", help="cycle through the tasks or draw them"
    )
    r.add_argument("--max-turns", type=int, default=None, help="override the id's turn limit")
    r.add_argument("--env-kwargs", default=None, help="JSON object passed to gym.make")
    r.add_argument("--out", default=None, help="trajectories: .jsonl or .parquet (default: runs/<env>-<time>.jsonl)")
    r.add_argument("--resume", action="store_true", help="skip the (task, sample) pairs already in --out")
    r.add_argument("--ray", action="store_true", help="run episodes on a pool of Ray actors")
    r.add_argument("--processes", action="store_true", help="run episodes in worker processes, one per CPU (no Ray)")
    r.add_argument("--ray-address", default=None, help="join this Ray cluster ('auto': the running one)")
    r.add_argument("--summary-json", default=None, help="also write the summary as JSON here")
    r.add_argument(
        "--screenshots",
        action="store_true",
        help="save a PNG per step (render_mode=rgb_array; envs with image observations always keep theirs)",
    )
    r.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    r.set_defaults(func=_rollout)
    p = sub.add_parser(
        "report", help="tables of one or more runs (JSONL or Parquet); --html: a trajectory viewer", **fmt
    )
    p.add_argument("runs", nargs="+", help="trajectory files (.jsonl or .parquet); several: compared side by side")
    p.add_argument("--by", default=None, help="also group by this task field (e.g. level; any task_meta key)")
    p.add_argument("--json", default=None, help="write the same numbers as JSON here")
    p.add_argument("--html", default=None, help="write a self-contained HTML report here")
    p.add_argument("--max-mb", type=float, default=40.0, help="transcripts embedded in the HTML, at most (MB)")
    p.add_argument("--parse-window", type=int, default=200, help="parse-health alarm: over the last N episodes")
    p.add_argument("--no-tool-alarm", type=float, default=0.95, help="alarm: share of the window with no tool call")
    p.add_argument("--parse-failure-alarm", type=float, default=0.2, help="alarm: share of turns failing to parse")
    p.set_defaults(func=_report)
    e = sub.add_parser("envs", help="the registered ids: the kwargs each needs, its tools, its reference policy", **fmt)
    e.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE", help=IMPORT_HELP)
    e.add_argument("--json", action="store_true", help="print the table as JSON")
    e.add_argument("--probe", action="store_true", help="make each env (its servers start) to list its real tools")
    e.set_defaults(func=_envs)
    q = sub.add_parser("rescore", help="score a saved run again with another scorer (or a judge): a new run", **fmt)
    q.add_argument("run", help="the run (.jsonl or .parquet)")
    q.add_argument("--scorer", required=True, help="exact, contains, another registered name, or module:function")
    q.add_argument("--out", required=True, help="the new run (.jsonl or .parquet)")
    q.add_argument("--tasks", default=None, help="the run's tasks (JSONL/JSON), for their reference answers")
    q.add_argument("--env", default=None, help="or the env id whose tasks the run used")
    q.add_argument("--env-kwargs", default=None, help="JSON object passed to gym.make with --env")
    q.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE", help=IMPORT_HELP)
    q.set_defaults(func=_rescore)
    m = sub.add_parser("serve-model", help="a token-recording OpenAI-compatible endpoint over a local model", **fmt)
    m.add_argument("model", help="a transformers model folder (its tokenizer and chat template are used)")
    m.add_argument("--host", default="127.0.0.1", help="bind address (loopback unless told otherwise)")
    m.add_argument("--port", type=int, default=8000)
    m.add_argument("--name", default=None, help="the model name /v1/models lists (default: the folder's name)")
    m.add_argument("--max-tokens", type=int, default=512, help="a completion's limit when a request gives none")
    m.add_argument("--temperature", type=float, default=1.0, help="when a request gives none")
    m.add_argument("--no-thinking", action="store_true", help="render with enable_thinking=False (Qwen3)")
    m.add_argument("--out", default=None, help="append every call's record (prompt and completion ids, logprobs) here")
    m.add_argument("--token", default=None, help="require Authorization: Bearer TOKEN on every route")
    m.add_argument("--generate-token", action="store_true", help="make a token (always, off loopback)")
    m.add_argument("--max-message-bytes", type=int, default=8 << 20, help="the largest request body accepted")
    m.add_argument("--allowed-host", action="append", default=[], help="a Host name accepted besides loopback")
    m.add_argument("--allowed-origin", action="append", default=[], help="a browser Origin accepted (none by default)")
    m.set_defaults(func=_serve_model)
    c = sub.add_parser("cache", help="the tool cache: stats, export, merge two, prune by age or server", **fmt)
    c.add_argument("action", choices=["stats", "export", "merge", "prune"])
    c.add_argument("store", help="the cache, as given to tool_cache=: an SQLite file or redis://host:port/db")
    c.add_argument("--json", action="store_true", help="stats: as JSON")
    c.add_argument("--out", default=None, help="export: the JSONL file to write")
    c.add_argument("--from", dest="other", default=None, help="merge: the cache whose calls are added")
    c.add_argument("--older-than", type=float, default=None, help="prune: calls recorded more than DAYS ago")
    c.add_argument("--server", default=None, help="prune: calls of this server (identity)")
    c.set_defaults(func=_cache)
    u = sub.add_parser(
        "setup", help="install the pinned Node servers into the user cache; check Chromium and bubblewrap", **fmt
    )
    u.add_argument("targets", nargs="*", default="all", choices=["browser", "code", "gaia", "all"],
                   help="what to set up (several may be named)")  # fmt: skip
    u.add_argument("--no-install", action="store_true", help="only check: install nothing")
    u.set_defaults(func=_setup)
    s = sub.add_parser("serve-python", help="run the Python-execution MCP server for a whole node", **fmt)
    s.add_argument("--host", default="127.0.0.1", help="address to bind")
    s.add_argument("--port", type=int, default=8940, help="port to bind")
    s.add_argument("--isolation", default="auto", choices=["auto", "bwrap", "none"], help="sandbox of each execution")
    s.add_argument("--warm", default="auto", choices=["auto", "on", "off"], help="executions forked from a warm zygote")
    s.set_defaults(func=_serve_python)
    v = sub.add_parser(
        "serve-env", help="serve an env over OpenEnv's HTTP/WebSocket protocol (one env per session)", **fmt
    )
    v.add_argument("env", help=ENV_HELP)
    v.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE", help=IMPORT_HELP)
    v.add_argument("--host", default="127.0.0.1", help="anything but loopback gets a token (generated, printed)")
    v.add_argument("--port", type=int, default=8000, help="port to bind")
    v.add_argument("--max-sessions", type=int, default=8, help="sessions (and envs) at once, POST /reset included")
    v.add_argument("--token", default=None, help="required from clients (else $AWORLD_GYM_SERVE_TOKEN)")
    v.add_argument("--generate-token", action="store_true", help="on loopback too: generate a token and print it")
    v.add_argument("--allowed-origin", action="append", default=[], help="a web Origin to accept (repeatable)")
    v.add_argument("--allowed-host", action="append", default=[], help="a Host name to accept (repeatable)")
    v.add_argument("--allow-client-tasks", action="store_true", help="accept a client's own task at reset")
    v.add_argument("--client-files-root", default=None, help="the one folder a client task's files may name")
    v.add_argument("--max-action-chars", type=int, default=256 * 1024, help="the longest action text a step takes")
    v.add_argument("--max-message-bytes", type=int, default=2 * 1024 * 1024, help="request body / WebSocket message")
    v.add_argument("--session-timeout", type=float, default=None, help="close a session idle this many seconds")
    v.add_argument("--step-timeout", type=float, default=600.0,
                   help="seconds one reset or step may run (0: no bound); past it the episode is void, its env dropped")  # fmt: skip
    v.add_argument("--env-kwargs", default=None, help="JSON object passed to gym.make")
    v.add_argument("--out", default=None, help="append every episode's trajectory record to this JSONL file")
    v.set_defaults(func=_serve_env)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        import gymnasium as gym

        from aworld_gym.base.errors import AWorldGymError

        # a user's mistake, said in one line (Gymnasium's unknown id keeps its "Did you mean"; a module that cannot
        # be imported names itself); anything else is a bug, with its traceback
        if isinstance(exc, AWorldGymError | ValueError | FileNotFoundError | ModuleNotFoundError | gym.error.Error):
            print(f"aworld-gym: error: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
