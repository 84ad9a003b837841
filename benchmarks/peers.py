"""Peers side by side: one tool-using workload run by aworld-gym, by AWorld's own runtime and by verifiers.

The workload: "What is A + B?" episodes (unique A, B per episode). Each episode is 2 model calls and 1 tool call:

* a stand-in OpenAI-compatible chat server on 127.0.0.1 (in this process, aiohttp) with a fixed latency per request.
  The first request of an episode gets a tool call ``add(A, B)`` (an OpenAI native tool call when the request lists
  ``tools``, else Qwen3/Hermes ``<tool_call>`` text); the request that carries the tool result gets the answer, the
  number read from that result. It counts requests per episode (2 expected: more is reported) and checks that the tool
  result it sees is A + B;
* a stdio MCP server with one tool, ``add(a, b)`` (written into the work folder and run by each framework with its own
  venv's ``mcp``: FastMCP on mcp 1.x, MCPServer on 2.x). Every server process logs its start and its calls, so the
  number of server processes and tool calls is exact.

Each framework runs in a subprocess of its own (its venv's Python), so its peak RSS (summed over its process tree,
sampled with psutil) and the processes it spawns are measured alone.

Two clocks per row (``benchmarks/clocks.py``), each read the same way for every framework (``time.monotonic``, one
clock for every process on Linux):

* the **whole run** (``whole_s``, ``episodes_per_s_whole``): the worker subprocess from the driver's ``Popen`` (before
  the framework's imports, its servers and envs) to the driver reaping it (its last record written, its servers
  closed, the process gone): what a user waits for;
* the **window** (``window_s``, also ``wall_s``; ``episodes_per_s``): from the stand-in's first model request of the
  run (the first episode's first model call; each framework's imports and set-up, and its first env or agent with
  that one's add server, come before it) to when the framework's run call has returned. It leaves out ``startup_s``
  (with one stdio server per env, every server started before the first request) and ``teardown_s`` (from the run
  call's return to the worker's exit); ``startup_s + window_s + teardown_s = whole_s``.

Where each worker's own ``begin`` sits differs (aworld-gym: before ``stream()`` makes its probe env;
AWorld: before its first ``Agent``; verifiers: before ``run_eval`` loads its taskset), which is why the clock is read at
the stand-in; the JSON says where each row's clock starts and ends (``clock_start``, ``clock_end``) and keeps the
worker-side wall too (``worker_wall_s``). CPU time is the subprocess tree's (``wait4``) after the worker's ``begin``.
Every row records ``os.getloadavg()`` at its start and its end (informational: a row's own processes raise the load,
and the next row starts in the tail of the last one's) and the CPU time that *other* processes used while it ran: the
machine's busy CPU time (``/proc/stat``) minus the row's own (the worker's process tree, ``wait4``, and this process,
which runs the stand-in). A row whose other work averaged more than a quarter of one CPU is marked BUSY.

Levels: concurrency 1, 16, 64 with the latency, plus latency 0 at concurrency 16 (framework overhead per episode);
N = 4 x concurrency episodes. ``--budget-s`` (default 1800 s, far above the longest level measured, about 285 s) plans
fewer episodes for a level only when a peer's previous level says it would take longer (the row says "planned
(budget)"), and stops a worker at 1.2 x the budget. A stopped row is TRUNCATED in the table: its rate and speedup cells
say so, and the episodes the stand-in had seen a request for but that had not finished are counted (``in_flight_at_stop``;
the rate counting them is an upper bound). A level whose process tree would pass ``--max-rss-gb`` (extrapolated) is
skipped; the table says so.

* aworld-gym, two rows: its DEFAULT config, what a user gets (``aworld_gym.rollout.stream.stream`` with
  ``OpenAIPolicy(tool_mode="native")`` on ``AWorld/MCP-v0``, one stdio server per env), and the opt-in POOLED config
  (the same with ``"pool": 2`` in the server entry; only when the installed ``mcp_config`` parser accepts it).
* AWorld 0.3.2 (venv under the work folder; a fresh ``AWORLD_MEMORY_ROOT`` per run), two rows:

  - "Agent+Task per episode": a fresh ``Agent(mcp_servers=["calc"], mcp_config=...)`` and ``Task`` per episode,
    ``Runners.run_task(task)``, under a semaphore of the concurrency (the agent makes its own ``Sandbox``, so each
    episode starts and closes its own add server);
  - "Runners.run_task(list of C), shared Sandbox": AWorld's own route for many tasks. ``Runners.run_task`` accepts a
    list (``aworld/runner.py``: ``Union[Task, List[Task]]`` -> ``exec_tasks`` -> ``execute_runner``), and the default
    ``RunConfig`` (``engine_name`` local, ``reuse_process=True``) runs the list in ``LocalRuntime.execute`` with one
    ``asyncio.gather`` and no limit of its own, so the tasks go in lists of C, one list after another (each list waits
    for its slowest episode). The server is shared the way its config allows: one ``Sandbox(mcp_servers=["calc"],
    mcp_config=..., reuse=True)`` passed to every episode's ``Agent(sandbox=...)`` (``aworld/core/agent/base.py`` takes
    the servers and config from it; with ``reuse`` its ``McpServers`` caches the connected server instances, so the
    episodes' tool calls go to one add server). ``sync_run``/``run`` take one input and one agent or swarm, so they are
    not a route for several tasks.
* verifiers 0.4.0 (venv under the work folder): ``run_eval`` on a taskset package written into the work folder (its
  tasks' tool server is a stdio MCP server behind verifiers' own stdio bridge, ``HarborMCPToolset``), played by the
  bundled chat program (``null`` harness) in the ``subprocess`` runtime; ``uv`` installed in that venv.

    python benchmarks/peers.py [--quick] [--levels 1,16,64,16@0] [--latency 1.0] [--frameworks aworld-gym,aworld,verifiers]
                               [--budget-s 1800] [--max-rss-gb 12] [--no-install] [--out benchmarks/results/peers.json]
    python benchmarks/peers.py --table benchmarks/results/peers.json    # print an earlier run's table again

The venvs are made on first use (``--no-install``: never); a peer that cannot be installed or run is a table row
saying why. Never part of ``make test``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "benchmarks" / ".work" / "peers"
MODEL = "stand-in"
QUESTION = re.compile(r"What is (-?\d+) \+ (-?\d+)\?")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
PEERS = {  # framework -> (venv folder under WORK, pip requirements)
    "aworld": ("venv-aworld", ["aworld==0.3.2", "pydantic<2.12", "psutil"]),  # mcp~=1.10's FastMCP needs pydantic<2.12
    "verifiers": ("venv-verifiers", ["verifiers==0.4.0", "uv", "psutil"]),
}

ADD_SERVER = '''"""A stdio MCP server with one tool, add(a, b); logs its start and each call to the file named by argv[1]."""
import os
import sys

try:
    from mcp.server.fastmcp import FastMCP as Server  # mcp 1.x
except ImportError:
    from mcp.server.mcpserver import MCPServer as Server  # mcp 2.x

LOG = sys.argv[1] if len(sys.argv) > 1 else None


def log(line: str) -> None:
    if LOG:
        with open(LOG, "a") as f:
            f.write(line + "\\n")


log(f"start {os.getpid()}")
server = Server("add")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first integer.
        b: the second integer.
    """
    log(f"call {os.getpid()} {a} {b}")
    return a + b


if __name__ == "__main__":
    server.run()
'''

TASKSET = '''"""peers_add_v1: "What is A + B?" tasks; their add tool is a stdio MCP server behind verifiers' own stdio bridge."""
import json

import verifiers.v1 as vf
from verifiers.v1.tasksets.harbor.toolset import HarborMCPConfig, HarborMCPToolset


class AddData(vf.TaskData):
    answer: int


class AddTaskConfig(vf.TaskConfig):
    server_command: list[str] = []


class AddTask(vf.Task[AddData, vf.State, AddTaskConfig]):
    @vf.reward
    async def correct(self, trace: vf.Trace) -> float:
        return float(str(self.data.answer) in (trace.last_reply or ""))

    @classmethod
    def toolsets(cls, config: AddTaskConfig) -> list[vf.Toolset]:
        command, *args = config.server_command
        server = {"name": "calc", "transport": "stdio", "command": command, "args": args}
        return [HarborMCPToolset(HarborMCPConfig(colocated=True, server=server))]


class AddConfig(vf.TasksetConfig):
    tasks_file: str = ""
    task: AddTaskConfig = AddTaskConfig()


class AddTaskset(vf.Taskset[AddTask, AddConfig]):
    def load(self) -> list[AddTask]:
        with open(self.config.tasks_file) as f:
            rows = json.load(f)
        return [AddTask(AddData(idx=i, id=r["id"], prompt=r["question"], answer=r["answer"]), self.config.task)
                for i, r in enumerate(rows)]


__all__ = ["AddTaskset"]
'''


# ----- the stand-in chat server ------------------------------------------------------------------------------------
def _text(content: Any) -> str:
    """The text of a message content (a string or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def _tool_result(messages: list[dict[str, Any]]) -> str | None:
    """The last tool result in a conversation: a ``tool`` message, or ``<tool_response>`` text in a user turn."""
    for m in reversed(messages):
        text = _text(m.get("content"))
        if m.get("role") == "tool":
            return text
        if m.get("role") == "user" and "<tool_response>" in text:
            return text.split("<tool_response>")[-1].split("</tool_response>")[0]
    return None


@dataclass
class Counts:
    """What the stand-in saw during one run."""

    requests: int = 0
    streamed: int = 0
    native: int = 0  # requests that listed tools
    unmatched: int = 0  # requests with no "What is A + B?" in them
    per_episode: dict[str, int] = field(default_factory=dict)
    tool_results_ok: int = 0
    tool_results_bad: list[str] = field(default_factory=list)
    paths: dict[str, int] = field(default_factory=dict)
    first_request_at: float | None = None  # time.monotonic() of the run's first request: where every clock starts
    in_flight: int = 0  # requests arrived and not answered yet
    peak_in_flight: int = 0
    injected: dict[str, int] = field(default_factory=dict)  # faults answered instead of a reply, by kind
    timeline: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # episode -> (arrived, replied)


class StandIn:
    """An OpenAI-compatible ``/v1/chat/completions`` stand-in on 127.0.0.1, run on its own thread and event loop.

    It counts the requests in flight (``counts.in_flight``, ``counts.peak_in_flight``). ``faults`` maps a kind to the
    share of requests answered with it at once instead of a reply (seeded): ``"429"`` (rate limited) or ``"reset"``
    (the connection reset, nothing answered); counted in ``counts.injected``. ``backlog``: the listening socket's.
    """

    def __init__(self, latency_s: float = 1.0, faults: dict[str, float] | None = None, backlog: int = 1024) -> None:
        import random

        self.latency_s = latency_s
        self.faults = dict(faults or {})
        self.backlog = backlog
        self._rng = random.Random(0)
        self.counts = Counts()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.port = 0

    def __enter__(self) -> StandIn:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the stand-in chat server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def reset(self, latency_s: float) -> Counts:
        """Start a new run: new counters (returned), the given latency."""
        self.latency_s, self.counts = latency_s, Counts()
        return self.counts

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        from aiohttp import web

        self._stop = asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/models", self._models)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=self.backlog)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    async def _models(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "peers"}]})

    async def _chat(self, request: Any) -> Any:
        c = self.counts
        c.in_flight += 1
        c.peak_in_flight = max(c.peak_in_flight, c.in_flight)
        try:
            return await self._answer(request, c)
        finally:
            c.in_flight -= 1

    def _fault(self) -> str | None:
        draw = self._rng.random()
        for kind, share in self.faults.items():
            if draw < share:
                return kind
            draw -= share
        return None

    async def _answer(self, request: Any, c: Counts) -> Any:
        from aiohttp import web

        arrived = time.monotonic()
        body = await request.json()
        if c.first_request_at is None:
            c.first_request_at = arrived
        c.requests += 1
        c.paths[request.path] = c.paths.get(request.path, 0) + 1
        fault = self._fault()
        if fault is not None:
            c.injected[fault] = c.injected.get(fault, 0) + 1
            if fault == "429":
                return web.json_response({"error": {"message": "rate limited (injected)"}}, status=429)
            sock = request.transport.get_extra_info("socket")  # reset: RST at once, nothing answered
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            request.transport.abort()
            raise asyncio.CancelledError  # aiohttp's way out of a handler whose connection is gone
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        messages = body.get("messages") or []
        tools = body.get("tools") or []
        c.native += bool(tools)
        match = next((m for msg in messages if (m := QUESTION.search(_text(msg.get("content"))))), None)
        message: dict[str, Any]
        key = None
        if match is None:
            c.unmatched += 1
            message, finish = {"role": "assistant", "content": "<answer>unknown</answer>"}, "stop"
        else:
            a, b = int(match.group(1)), int(match.group(2))
            key = f"{a}+{b}"
            c.per_episode[key] = c.per_episode.get(key, 0) + 1
            result = _tool_result(messages)
            if result is None:
                message, finish = self._tool_call(a, b, tools), "tool_calls" if tools else "stop"
            else:
                numbers = NUMBER.findall(result)
                value = numbers[0] if numbers else "unknown"
                if numbers and float(value) == a + b:
                    c.tool_results_ok += 1
                elif len(c.tool_results_bad) < 5:
                    c.tool_results_bad.append(result[:200])
                value = str(int(float(value))) if numbers and float(value).is_integer() else value
                message, finish = {"role": "assistant", "content": f"<answer>{value}</answer>"}, "stop"
        if body.get("stream"):
            c.streamed += 1
            response = await self._stream(request, body, message, finish)
        else:
            response = web.json_response(_completion(message, finish))
        if key is not None:
            c.timeline.setdefault(key, []).append((arrived, time.monotonic()))
        return response

    @staticmethod
    def _tool_call(a: int, b: int, tools: list[dict[str, Any]]) -> dict[str, Any]:
        args = {"a": a, "b": b}
        if not tools:
            call = json.dumps({"name": "add", "arguments": args})
            return {"role": "assistant", "content": f"<tool_call>\n{call}\n</tool_call>"}
        names = [t.get("function", {}).get("name", "") for t in tools]
        adds = [n for n in names if n == "add" or n.endswith("__add")]  # several add servers: one per episode, by a
        name = adds[a % len(adds)] if adds else next((n for n in names if n.endswith("add")), names[0])
        call_id = f"call_{a}_{b}_{time.monotonic_ns() % 10**9}"
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}  # fmt: skip

    async def _stream(self, request: Any, body: dict[str, Any], message: dict[str, Any], finish: str) -> Any:
        from aiohttp import web

        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        base = {"id": "chatcmpl-peers", "object": "chat.completion.chunk", "created": int(time.time()), "model": MODEL}
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
        chunks = [{**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                  {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}]  # fmt: skip
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**base, "choices": [], "usage": _USAGE})
        for chunk in chunks:
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


_USAGE = {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}


def _completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {"id": "chatcmpl-peers", "object": "chat.completion", "created": int(time.time()), "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": _USAGE}  # fmt: skip


# ----- measuring a process tree ------------------------------------------------------------------------------------
class TreeSampler(threading.Thread):
    """Samples a process and its descendants: summed RSS, processes alive, every process seen."""

    def __init__(self, pid: int, cmdline: str, interval_s: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.pid, self.cmdline, self.interval_s = pid, cmdline, interval_s
        self.peak_rss = self.rss = 0
        self.peak_procs = 0
        self.seen: dict[tuple[int, float], str] = {}  # (pid, create time) -> command line
        self._halt = threading.Event()

    def run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self._halt.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                break
            rss = 0
            for p in procs:
                try:
                    rss += p.memory_info().rss
                    key = (p.pid, p.create_time())
                    if self.seen.get(key, "") in ("", self.cmdline):  # a fork not yet exec'd reads as its parent
                        self.seen[key] = " ".join(p.cmdline())[:300]
                except psutil.Error:
                    continue
            self.rss, self.peak_rss, self.peak_procs = rss, max(self.peak_rss, rss), max(self.peak_procs, len(procs))
            self._halt.wait(self.interval_s)

    def stop(self) -> None:
        self._halt.set()
        self.join(5)

    def leftovers(self) -> list[Any]:
        """Processes seen in the tree that are still alive (orphans the framework left behind)."""
        import psutil

        alive = []
        for pid, created in self.seen:
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(pid)
                if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
        return alive


def _kill(procs: list[Any]) -> None:
    import psutil

    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(procs, timeout=5)


# ----- the driver --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Runner:
    """One row family of the table: a framework (and variant) and the Python that runs its worker."""

    name: str  # the table's label
    worker: str  # aworld-gym, aworld, verifiers
    python: str
    options: dict[str, Any] = field(default_factory=dict)


def tasks_for(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` questions with unique operands (unique within and across runs of one invocation, by ``seed``)."""
    out = []
    for i in range(n):
        a, b = 1000 * seed + i, 7 * i + 3
        out.append({"id": f"add-{seed}-{i}", "question": f"What is {a} + {b}?", "a": a, "b": b, "answer": a + b})
    return out


def install(framework: str, log: Path) -> str | None:
    """Make the framework's venv under the work folder (once); ``None`` when ready, else why not."""
    folder, requirements = PEERS[framework]
    venv = WORK / folder
    python = venv / "bin" / "python"
    stamp = venv / ".peers-installed"
    if stamp.exists() and stamp.read_text() == json.dumps(requirements):
        return None
    base = shutil.which("python3.11") or sys.executable
    print(f"installing {framework} into {venv} ({' '.join(requirements)}) ...", flush=True)
    with log.open("w") as f:
        steps = [[base, "-m", "venv", str(venv)], [str(python), "-m", "pip", "install", "-q", *requirements]]
        for step in steps:
            if subprocess.run(step, stdout=f, stderr=subprocess.STDOUT).returncode != 0:
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                return f"install failed ({' '.join(step[2:5])}): {' | '.join(tail)[:300]}"
    stamp.write_text(json.dumps(requirements))
    return None


def run_level(runner: Runner, stand_in: StandIn, tasks: list[dict[str, Any]], concurrency: int, latency: float,
              deadline_s: float, max_rss: float, run_dir: Path) -> dict[str, Any]:  # fmt: skip
    """One framework at one level: its worker subprocess, measured from outside."""
    import psutil

    run_dir.mkdir(parents=True, exist_ok=True)
    server_log = run_dir / "servers.log"
    server_log.write_text("")
    spec = {"base_url": stand_in.base_url, "model": MODEL, "tasks": tasks, "concurrency": concurrency,
            "server": [runner.python, str(WORK / "add_server.py"), str(server_log)], "deadline_s": deadline_s,
            "run_dir": str(run_dir), "out": str(run_dir / "result.json"), **runner.options}  # fmt: skip
    (run_dir / "spec.json").write_text(json.dumps(spec))
    counts = stand_in.reset(latency)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "LLM_API_KEY": "EMPTY", "PEERS_API_KEY": "EMPTY"}
    env["PATH"] = f"{Path(runner.python).parent}:{env.get('PATH', '')}"
    if runner.worker == "verifiers":  # its caches (uv script envs, runtime folders) stay in the work folder
        env["HOME"] = str(WORK / "home-verifiers")
        Path(env["HOME"]).mkdir(parents=True, exist_ok=True)
    cmd = [runner.python, str(Path(__file__).resolve()), "--worker", runner.worker, str(run_dir / "spec.json")]
    hard_timeout = deadline_s * 1.5 + 300  # the worker stops itself at the deadline; this is the backstop
    load_start = os.getloadavg()
    from benchmarks.clocks import Clocks, missing
    from benchmarks.provenance import OtherWork

    other_work = OtherWork()
    t0 = time.monotonic()
    with (run_dir / "worker.log").open("w") as log:
        proc = subprocess.Popen(cmd, cwd=run_dir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    sampler = TreeSampler(proc.pid, " ".join(cmd)[:300])
    sampler.start()
    status, rusage, timed_out, stopped, t_term = 0, None, False, None, 0.0
    while True:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        now = time.monotonic()
        if stopped is None and sampler.rss > max_rss:  # the machine is shared: stop before it runs out of memory
            stopped, t_term = f"stopped: its process tree passed {max_rss / 2**30:g} GB", now
            proc.send_signal(signal.SIGTERM)  # the worker writes what it has, then exits
        if now - t0 > hard_timeout or (stopped and now - t_term > 20):
            timed_out = stopped is None
            with contextlib.suppress(psutil.Error):
                _kill([psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)])
            _, status, rusage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.05)
    t_exit = time.monotonic()  # the worker reaped: its last record written, its servers closed, its process gone
    proc.returncode = os.waitstatus_to_exitcode(status)
    process_wall = t_exit - t0
    load_end = os.getloadavg()
    other = other_work.stop()
    sampler.stop()
    left = sampler.leftovers()
    _kill(left)
    result: dict[str, Any] = {}
    with contextlib.suppress(OSError, json.JSONDecodeError):
        result = json.loads((run_dir / "result.json").read_text())
    lines = server_log.read_text().splitlines()
    called = {x.split()[1] for x in lines if x.startswith("call ")}
    answers = result.get("answers") or {}
    expected = {t["id"]: t["answer"] for t in tasks}
    correct = sum(1 for tid, ans in answers.items() if tid in expected and _number(ans) == expected[tid])
    done = int(result.get("episodes") or 0)
    per_ep = counts.per_episode
    first = counts.first_request_at
    # the two clocks (benchmarks/clocks.py): the whole worker process, and the window from the first model request
    ended = result.get("t_end")
    clocks = Clocks.from_marks(t0, first, min(ended, t_exit), t_exit) if first is not None and ended else None
    timing = clocks.fields(done) if clocks else missing()
    wall = timing["window_s"]
    by_key = {f"{t['a']}+{t['b']}": t["id"] for t in tasks}  # the stand-in's episode key -> task id
    in_flight = sum(1 for key, tid in by_key.items() if key in per_ep and tid not in answers)
    row: dict[str, Any] = {
        "framework": runner.name, "concurrency": concurrency, "latency_s": latency, "episodes_planned": len(tasks),
        "episodes": done, "correct": correct, **timing, "wall_s": wall, "clock_start": CLOCK_START,
        "clock_end": result.get("clock_end"),
        # cut short (deadline, memory guard, crash): the rate of the finished episodes is not the framework's rate;
        # the episodes the stand-in had seen a request for but that did not finish were in flight at the stop
        "truncated": done < len(tasks), "in_flight_at_stop": in_flight if done < len(tasks) else 0,
        "episodes_per_s_counting_in_flight": (done + in_flight) / wall if done < len(tasks) and wall else None,
        "load_start": [round(x, 2) for x in load_start], "load_end": [round(x, 2) for x in load_end],
        **other,
        "process_wall_s": process_wall,
        "worker_wall_s": result.get("worker_wall_s"), "worker_clock_begin": result.get("clock_begin"),
        "model_requests": counts.requests, "model_requests_expected": 2 * done,
        "episodes_over_2_requests": sum(1 for v in per_ep.values() if v > 2),
        "extra_model_requests": sum(v - 2 for v in per_ep.values() if v > 2),
        "episodes_under_2_requests": sum(1 for v in per_ep.values() if v < 2),
        "max_requests_per_episode": max(per_ep.values(), default=0), "unmatched_requests": counts.unmatched,
        "native_tool_requests": counts.native, "streamed_requests": counts.streamed,
        "tool_results_ok": counts.tool_results_ok, "tool_results_bad": counts.tool_results_bad,
        "server_processes": sum(1 for x in lines if x.startswith("start ")),
        "tool_calls": sum(1 for x in lines if x.startswith("call ")),
        "servers_without_calls": sum(1 for x in lines if x.startswith("start ") and x.split()[1] not in called),
        "processes_seen": len(sampler.seen), "peak_processes": sampler.peak_procs,
        "process_kinds": _kinds(sampler.seen.values()),
        "peak_rss_mb": sampler.peak_rss / 2**20, "leftover_processes": len(left),
        "cpu_s": rusage.ru_utime + rusage.ru_stime if rusage else None,  # the worker and its waited-for descendants
        "returncode": proc.returncode, "timed_out": timed_out, "errors": result.get("errors") or {},
        "error": result.get("error"), "notes": ([stopped] if stopped else []) + (result.get("notes") or []),
    }  # fmt: skip
    if wall and counts.timeline:  # where the C x wall slot-seconds went, seen from the stand-in
        from benchmarks.breakdown import breakdown

        row["breakdown"] = breakdown(counts.timeline, concurrency, first, result["t_end"], latency)
    if row["cpu_s"] is not None and done:  # start-up (imports, set-up before the first episode) left out
        row["cpu_ms_per_episode"] = 1000 * (row["cpu_s"] - float(result.get("cpu_at_begin_s") or 0.0)) / done
    if not result:
        tail = (run_dir / "worker.log").read_text(errors="replace").strip().splitlines()[-4:]
        why = stopped or ("timed out" if timed_out else f"exit {proc.returncode}")
        row["error"] = f"{why}; " + " | ".join(tail)[-400:]
    return row


CLOCK_START = (
    "the stand-in's first model request of the run (the first episode's first model call: the framework's "
    "imports and set-up, its first env or agent and that one's add server, are before it)"
)
CLOCKS = {
    "whole": "the worker subprocess, from the driver's Popen (before the framework's imports, servers and envs) to "
    "the driver reaping it (its last record written, its servers closed, the process gone): whole_s, "
    "episodes_per_s_whole; the same for every framework",
    "window": f"from {CLOCK_START} to the worker's clock_end: window_s (= wall_s), episodes_per_s",
    "window_leaves_out": "startup_s (the worker's start, imports, set-up and the servers started before the first "
    "model request: with one server per env, all of them) and teardown_s (from clock_end to the worker's exit)",
}


def _kinds(cmdlines: Any) -> dict[str, int]:
    """Processes seen, by kind: the program and its module or script (``python -m x``, ``python add_server.py``)."""
    out: dict[str, int] = {}
    for line in cmdlines:
        argv = line.split()
        if not argv:
            continue
        kind = Path(argv[0]).name
        if "-m" in argv[1:3]:
            kind += " -m " + argv[argv.index("-m") + 1]
        elif len(argv) > 1 and argv[1].endswith(".py"):
            kind += " " + Path(argv[1]).name + (" " + argv[2] if argv[1].endswith("peers.py") and len(argv) > 2 else "")
        out[kind] = out.get(kind, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _number(text: Any) -> float | None:
    if text is None:
        return None
    m = re.search(r"<answer>\s*(-?\d+(?:\.\d+)?)\s*</answer>", str(text)) or NUMBER.search(str(text))
    return float(m.group(1) if m.groups() else m.group(0)) if m else None


def plan_episodes(concurrency: int, quick: bool, budget_s: float, prev: dict[str, Any] | None) -> tuple[int, bool]:
    """Episodes for a level: 4 x concurrency (2 x in --quick); fewer when even a linear speedup over the runner's
    previous level would take longer than the budget (a multiple of the concurrency, at least one wave)."""
    n = (2 if quick else 4) * concurrency
    if prev and prev.get("episodes_per_s"):
        rate = prev["episodes_per_s"] * max(1.0, concurrency / prev["concurrency"])
        if n / rate > budget_s:
            return max(concurrency, int(budget_s * rate) // concurrency * concurrency), True
    return n, False


def rss_estimate(concurrency: int, measured: list[dict[str, Any]]) -> float | None:
    """The runner's peak RSS at ``concurrency``, extrapolated linearly from its two highest concurrencies measured."""
    points = sorted({r["concurrency"]: r["peak_rss_mb"] for r in measured if r.get("peak_rss_mb")}.items())
    if not points or points[-1][0] >= concurrency:
        return None
    if len(points) == 1:
        return points[0][1] * concurrency / points[0][0]
    (c1, m1), (c2, m2) = points[-2:]
    return m2 + (m2 - m1) / (c2 - c1) * (concurrency - c2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latency", type=float, default=1.0, help="stand-in seconds per model request")
    ap.add_argument("--levels", default=None, help="comma list of C or C@latency (default 1,16,64,16@0)")
    ap.add_argument("--quick", action="store_true", help="concurrency 1 and 4, 2 x C episodes: a fast check")
    ap.add_argument("--frameworks", default="aworld-gym,aworld,verifiers", help="comma list of the peers to run")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=1800.0,
        help="seconds one peer may take at one level (fewer episodes planned above it; stopped at 1.2 x)",
    )
    ap.add_argument("--max-rss-gb", type=float, default=12.0, help="a peer's process tree may not pass this (GB)")
    ap.add_argument("--no-install", action="store_true", help="never create the peers' venvs")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/peers.json"), help="JSON path")
    ap.add_argument("--table", metavar="JSON", default=None, help="only print the table of an earlier run's JSON")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from benchmarks.provenance import (  # its load average at the start is taken when it is imported: here
        OtherWork,
        stamp,
    )

    if args.table:
        print(render_table(json.loads(Path(args.table).read_text())["rows"]))
        return
    default = "1,4" if args.quick else "1,16,64,16@0"
    levels = []
    for item in (args.levels or default).split(","):
        conc, _, lat = item.partition("@")
        levels.append((int(conc), float(lat) if lat else args.latency))
    wanted = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "add_server.py").write_text(ADD_SERVER)
    pkg = WORK / "tasksets" / "peers_add_v1"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(TASKSET)
    runners, broken = build_runners(wanted, args.no_install)
    rows: list[dict[str, Any]] = [
        {"framework": name, "concurrency": c, "latency_s": lat, "episodes": 0, "error": why}
        for name, why in broken.items()
        for c, lat in levels
    ]
    base: dict[tuple[str, float], float] = {}
    t_all = time.perf_counter()
    run_stamp = time.strftime("%Y%m%d-%H%M%S")
    with StandIn(args.latency) as stand_in:
        for li, (conc, lat) in enumerate(levels):
            for runner in runners:
                mine = [r for r in rows if r["framework"] == runner.name and r.get("episodes")]
                est = rss_estimate(conc, mine)
                if est is not None and est > args.max_rss_gb * 1024:
                    seen = ", ".join(f"C={r['concurrency']}: {r['peak_rss_mb'] / 1024:.1f} GB" for r in mine[-2:])
                    why = (f"skipped: about {est / 1024:.0f} GB of RSS expected (extrapolated from {seen}), over "
                           f"--max-rss-gb {args.max_rss_gb:g}")  # fmt: skip
                    rows.append({"framework": runner.name, "concurrency": conc, "latency_s": lat, "episodes": 0,
                                 "error": why})  # fmt: skip
                    print(f"{runner.name}: concurrency {conc}: {why}", flush=True)
                    continue
                prev = next((r for r in reversed(mine) if r["latency_s"] == lat), None)
                n, reduced = plan_episodes(conc, args.quick, args.budget_s, prev)
                tasks = tasks_for(n, seed=1 + li * 10 + runners.index(runner))
                slug = re.sub(r"[^A-Za-z0-9]+", "-", runner.name).strip("-")
                run_dir = WORK / "runs" / run_stamp / f"{slug}-c{conc}-l{lat:g}"
                print(f"{runner.name}: concurrency {conc}, latency {lat:g} s, {n} episodes ...", flush=True)
                row = run_level(runner, stand_in, tasks, conc, lat, args.budget_s * 1.2, args.max_rss_gb * 2**30,
                                run_dir)  # fmt: skip
                row["reduced"] = reduced
                if row["episodes_per_s"] and conc == 1:
                    base[(runner.name, lat)] = row["episodes_per_s"]
                rows.append(row)
                print("   " + summary_line(row), flush=True)
    for r in rows:
        seq = base.get((r["framework"], r.get("latency_s")))
        r["speedup"] = r["episodes_per_s"] / seq if seq and r.get("episodes_per_s") else None
    total = time.perf_counter() - t_all
    print(f"\npeers side by side: {args.latency:g} s per model request, N = {2 if args.quick else 4} x concurrency "
          f"({platform.machine()}, {os.cpu_count()} CPUs; {total / 60:.1f} min); whole run: {CLOCKS['whole']}; "
          f"window: {CLOCKS['window']}; "
          f"BUSY: other processes used over {OtherWork.BUSY_CPUS:g} CPUs during the row")  # fmt: skip
    print(render_table(rows))
    result = {"benchmark": "peers", "latency_s": args.latency, "levels": levels, "quick": args.quick,
              "budget_s": args.budget_s, "max_rss_gb": args.max_rss_gb, "command": " ".join(sys.argv), "cpus": os.cpu_count(), "total_s": total, "versions": versions(runners),
              "pool_supported": GYM_POOLED in [r.name for r in runners],
              "clock_start": CLOCK_START, "clocks": CLOCKS, "busy_other_cpus": OtherWork.BUSY_CPUS, "rows": rows}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(stamp(result), indent=2) + "\n")
    print(f"wrote {args.out}")


def build_runners(wanted: list[str], no_install: bool) -> tuple[list[Runner], dict[str, str]]:
    """The runners to measure, and the peers that cannot run here with the reason."""
    runners: list[Runner] = []
    broken: dict[str, str] = {}
    if "aworld-gym" in wanted:
        runners.append(Runner(GYM_DEFAULT, "aworld-gym", sys.executable))
        if pool_supported():
            runners.append(Runner(GYM_POOLED, "aworld-gym", sys.executable, {"pool": 2}))
        else:
            print('aworld-gym: the installed mcp_config parser has no "pool" option: one row only')
    for name in ("aworld", "verifiers"):
        if name not in wanted:
            continue
        folder, _ = PEERS[name]
        python = WORK / folder / "bin" / "python"
        if no_install and not python.exists():
            broken[name] = f"not installed ({python} missing; run without --no-install)"
            continue
        why = None if no_install else install(name, WORK / f"{name}-install.log")
        if why:
            broken[name] = why
            continue
        # cwd: importing aworld makes a logs/ folder in the working directory
        probe = subprocess.run([str(python), "-c", f"import {name}"], capture_output=True, text=True, cwd=WORK)
        if probe.returncode != 0:
            broken[name] = f"import {name} fails: {probe.stderr.strip().splitlines()[-1][:200]}"
            continue
        if name == "aworld":
            runners.append(Runner(AWORLD_PER_EPISODE, name, str(python)))
            runners.append(Runner(AWORLD_RUNNERS, name, str(python), {"route": "runners"}))
        else:
            runners.append(Runner(name, name, str(python)))
    return runners, broken


# the table's labels: aworld-gym's default config (what a user gets) and its opt-in pooled config are separate rows,
# and so are AWorld's two routes
GYM_DEFAULT = "aworld-gym default (1 server per env)"
GYM_POOLED = 'aworld-gym opt-in "pool": 2'
AWORLD_PER_EPISODE = "aworld: Agent+Task per episode"
AWORLD_RUNNERS = "aworld: Runners.run_task(list of C), shared Sandbox"


def pool_supported() -> bool:
    """Whether the installed aworld-gym accepts ``"pool"`` in a stdio server entry."""
    sys.path.insert(0, str(ROOT))
    try:
        from aworld_gym.mcp.config import parse_mcp_config

        spec = parse_mcp_config({"mcpServers": {"s": {"command": "python", "args": [], "pool": 2}}})[0]
        return getattr(spec, "pool", None) == 2
    except Exception:  # noqa: BLE001 - an older parser refuses the key: no pool row
        return False


def versions(runners: list[Runner]) -> dict[str, str]:
    out = {}
    for r in runners:
        dist = r.worker  # the distribution has the worker's name
        code = f"import importlib.metadata as m; print(m.version({dist!r}), m.version('mcp'))"
        p = subprocess.run([r.python, "-c", code], capture_output=True, text=True, cwd=WORK)
        out[r.name] = p.stdout.strip().replace(" ", " (mcp ") + ")" if p.returncode == 0 else "?"
    return out


def summary_line(r: dict[str, Any]) -> str:
    if r.get("error") and not r.get("episodes"):
        return f"FAILED: {r['error']}"
    whole = r.get("episodes_per_s_whole")
    return (f"{r['episodes']}/{r['episodes_planned']} episodes, "
            f"{'-' if whole is None else f'{whole:.2f}'} eps/s whole run, {r['episodes_per_s']:.2f} in the window"
            f"{' (TRUNCATED)' if r.get('truncated') else ''}, correct {r['correct']}/{r['episodes']}, "
            f"{r['model_requests']} model requests, {r['server_processes']} servers, "
            f"peak RSS {r['peak_rss_mb']:.0f} MB, wall {r['process_wall_s']:.1f} s, "
            f"load {_load(r)}{' BUSY' if r.get('busy') else ''}")  # fmt: skip


def _load(r: dict[str, Any]) -> str:
    """The 1-min load average at the row's start and end, and the CPUs other processes used during it."""
    if not r.get("load_start"):
        return "-"
    other = f", other {r['other_cpus']:.2f} CPUs" if r.get("other_cpus") is not None else ""
    return f"{r['load_start'][0]:.1f}/{r['load_end'][0]:.1f}{other}"


def render_table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table; a truncated row's rate and speedup say so in their cells, a busy row in its own."""
    from benchmarks.breakdown import render as render_breakdown
    from benchmarks.clocks import CELL_HEAD, cell

    head = ("| framework | C | latency s | episodes | eps/s whole run | eps/s window | speedup (window) | "
            f"{CELL_HEAD} | correct | model requests | servers | processes seen | peak RSS MB | CPU ms/episode | "
            "load 1-min start/end, other CPUs | "
            "C x window, % (model · stand-in · turn · ramp · between · drain · close) | notes |")  # fmt: skip
    out = [head, "|" + "---|" * 18]
    for r in rows:
        if r.get("error") and not r.get("episodes"):
            out.append(f"| {r['framework']} | {r['concurrency']} | {r['latency_s']:g} | 0 | - | - | - | - | - | - | "
                       f"- | - | - | - | - | - | - | not run: {r['error']} |")  # fmt: skip
            continue
        notes = []
        if r.get("reduced"):
            notes.append(f"{r['episodes_planned']} episodes planned (budget), not the level's full N")
        truncated = r.get("truncated", r["episodes"] < r["episodes_planned"])
        if truncated:
            flight = r.get("in_flight_at_stop")
            notes.append(f"TRUNCATED: {r['episodes_planned'] - r['episodes']} of {r['episodes_planned']} episodes "
                         f"not done" + (f", {flight} of them in flight at the stop" if flight is not None else ""))  # fmt: skip
        if r.get("episodes_over_2_requests"):  # more than 2 requests for one episode: the framework repeated a call
            extra = r.get("extra_model_requests", r["model_requests"] - r["model_requests_expected"])
            notes.append(f"{extra} extra model requests ({r['episodes_over_2_requests']} episodes over 2, max "
                         f"{r['max_requests_per_episode']})")  # fmt: skip
        if r.get("servers_without_calls"):
            notes.append(f"{r['servers_without_calls']} of {r['server_processes']} servers never called")
        if r.get("tool_calls", r["episodes"]) > r["episodes"] and not r.get("notes"):
            notes.append(f"{r['tool_calls']} tool calls for {r['episodes']} episodes")
        if r["tool_results_bad"]:
            notes.append(f"bad tool results: {r['tool_results_bad'][:1]}")
        if r.get("errors"):
            notes.append(f"{len(r['errors'])} episode errors, e.g. {next(iter(r['errors'].values()))[:120]}")
        if r.get("leftover_processes"):
            notes.append(f"{r['leftover_processes']} processes left running")
        notes += r.get("notes") or []
        rate = f"{r['episodes_per_s']:.2f}"
        whole = f"{r['episodes_per_s_whole']:.2f}" if r.get("episodes_per_s_whole") is not None else "-"
        speed = f"{r['speedup']:.1f}" if r.get("speedup") else "-"
        if truncated:  # never a bare rate for a cut run: the finished episodes' rate, and with those in flight
            upper = r.get("episodes_per_s_counting_in_flight")
            rate += " TRUNCATED" + (f" (<= {upper:.2f} counting in-flight)" if upper else "")
            whole += " TRUNCATED" if whole != "-" else ""
            speed += " TRUNCATED" if r.get("speedup") else ""
        cpu = f"{r['cpu_ms_per_episode']:.0f}" if r.get("cpu_ms_per_episode") else "-"
        load = _load(r) + (" BUSY" if r.get("busy") else "")
        out.append(f"| {r['framework']} | {r['concurrency']} | {r['latency_s']:g} | {r['episodes']} | "
                   f"{whole} | {rate} | {speed} | {cell(r)} | {r['correct']}/{r['episodes']} | "
                   f"{r['model_requests']} ({r['model_requests_expected']}) | {r['server_processes']} | "
                   f"{r['processes_seen']} | {r['peak_rss_mb']:.0f} | {cpu} | {load} | "
                   f"{render_breakdown(r.get('breakdown'))} | {'; '.join(notes)} |")  # fmt: skip
    return "\n".join(out)


# ----- workers: each runs in its framework's own venv --------------------------------------------------------------
class Clock:
    """Start-up and episode timing of a worker, and its result file."""

    def __init__(self, spec: dict[str, Any]) -> None:
        # time.monotonic() is CLOCK_MONOTONIC on Linux, one clock for every process: the driver subtracts the
        # stand-in's first-request time from this worker's end time
        self.spec, self.t_start = spec, time.monotonic()
        self.t_first: float | None = None
        self.t_end: float | None = None  # set by a worker whose run ends before its clean-up (else: at write)
        self.answers: dict[str, Any] = {}
        self.errors: dict[str, str] = {}
        self.notes: list[str] = []
        self.cpu_at_begin = 0.0
        self.deadline = float("inf")
        self.partial: Any = None  # a callable that gathers answers a framework keeps elsewhere (verifiers)
        self.begin_what = ""  # where this worker calls begin() (its deadline and CPU count start there)
        self.end_what = ""  # where the episode clock ends

    def begin(self) -> None:
        import resource

        self.t_first = time.monotonic()
        self.deadline = self.t_first + float(self.spec["deadline_s"])
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu_at_begin = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    def late(self) -> bool:
        return time.monotonic() > self.deadline

    def write(self, error: str | None = None) -> None:
        end = self.t_end or time.monotonic()
        first = self.t_first or end
        out = {"episodes": len(self.answers), "worker_wall_s": end - first, "worker_setup_s": first - self.t_start,
               "t_begin": first, "t_end": end, "cpu_at_begin_s": self.cpu_at_begin, "clock_begin": self.begin_what,
               "clock_end": self.end_what,
               "answers": self.answers, "errors": self.errors, "notes": self.notes, "error": error}  # fmt: skip
        Path(self.spec["out"]).write_text(json.dumps(out))


def worker_aworld_gym(spec: dict[str, Any], clock: Clock) -> None:
    sys.path.insert(0, str(ROOT))
    from aworld_gym.rollout.engines import AsyncEngine
    from aworld_gym.rollout.policies.openai_policy import OpenAIPolicy
    from aworld_gym.rollout.stream import stream

    command, *args = spec["server"]
    entry: dict[str, Any] = {"command": command, "args": args}
    if spec.get("pool"):
        entry["pool"] = spec["pool"]
    tasks = [{"id": t["id"], "prompt": t["question"], "answer": str(t["answer"])} for t in spec["tasks"]]
    conc = spec["concurrency"]
    policy = OpenAIPolicy(model=spec["model"], base_url=spec["base_url"], api_key="EMPTY", tool_mode="native",
                          max_concurrency=max(64, conc))  # fmt: skip
    env_kwargs = {"mcp_config": {"mcpServers": {"calc": entry}}, "tasks": tasks}
    clock.begin_what = "before stream() makes its probe env"
    clock.end_what = "the stream closed: every env and add server closed"
    clock.begin()
    records = stream("AWorld/MCP-v0", policy, episodes=len(tasks), engine=AsyncEngine(concurrency=conc),
                     env_kwargs=env_kwargs)  # fmt: skip
    try:
        for rec in records:
            clock.answers[rec["task_id"]] = rec.get("answer")
            if rec.get("termination") != "answer":
                clock.errors[rec["task_id"]] = str(rec.get("termination"))
            if clock.late():
                clock.notes.append("stopped at the deadline")
                break
    finally:
        records.close()


def worker_aworld(spec: dict[str, Any], clock: Clock) -> None:
    memory = Path(spec["run_dir"]) / "aworld-memory"
    os.environ["AWORLD_MEMORY_ROOT"] = str(memory)  # a fresh memory store for each run (read when the store is made)
    from aworld.agents.llm_agent import Agent
    from aworld.config.conf import AgentConfig
    from aworld.core.agent.swarm import Swarm
    from aworld.core.task import Task
    from aworld.runner import Runners

    command, *args = spec["server"]
    mcp_config = {"mcpServers": {"calc": {"type": "stdio", "command": command, "args": args}}}
    conf = AgentConfig(llm_provider="openai", llm_model_name=spec["model"], llm_base_url=spec["base_url"],
                       llm_api_key="EMPTY", llm_temperature=0.0)  # fmt: skip
    sandbox = None
    if spec.get("route") == "runners":  # one Sandbox (reuse=True, its default) shared by every episode's agent
        from aworld.sandbox import Sandbox

        sandbox = Sandbox(mcp_servers=["calc"], mcp_config=mcp_config, reuse=True)

    def make_task(t: dict[str, Any]) -> Task:
        if sandbox is not None:
            agent = Agent(name="adder", conf=conf, system_prompt="Use the add tool to answer.", mcp_servers=["calc"],
                          sandbox=sandbox)  # fmt: skip
        else:
            agent = Agent(name="adder", conf=conf, system_prompt="Use the add tool to answer.",
                          mcp_servers=["calc"], mcp_config=mcp_config)  # fmt: skip
        agent.task = t["question"]  # as Runners.run does it
        swarm = Swarm(agent)
        return Task(input=t["question"], swarm=swarm, event_driven=swarm.event_driven)

    def record(t: dict[str, Any], resp: Any) -> None:
        clock.answers[t["id"]] = resp.answer if resp is not None else None
        if resp is None:
            clock.errors[t["id"]] = "no response for the task"
        elif not resp.success:
            clock.errors[t["id"]] = str(resp.msg)[:300]

    sem = asyncio.Semaphore(spec["concurrency"])

    async def episode(t: dict[str, Any]) -> None:
        async with sem:
            if clock.late():
                if "stopped at the deadline" not in clock.notes:
                    clock.notes.append("stopped at the deadline")
                return
            task = make_task(t)
            try:
                record(t, (await Runners.run_task(task)).get(task.id))
            except Exception as exc:  # noqa: BLE001 - a failed episode is data
                clock.answers[t["id"]] = None
                clock.errors[t["id"]] = f"{type(exc).__name__}: {exc}"[:300]

    async def waves() -> None:
        # Runners.run_task(list) runs the list with asyncio.gather (LocalRuntime, reuse_process=True): no limit of
        # its own, so lists of C tasks go one after another (each wave waits for its slowest episode)
        todo, conc = spec["tasks"], spec["concurrency"]
        for i in range(0, len(todo), conc):
            if clock.late():
                clock.notes.append("stopped at the deadline")
                return
            batch = todo[i : i + conc]
            tasks = [make_task(t) for t in batch]
            try:
                results = await Runners.run_task(tasks)
            except Exception as exc:  # noqa: BLE001 - a failed wave is data
                for t in batch:
                    clock.answers[t["id"]] = None
                    clock.errors[t["id"]] = f"{type(exc).__name__}: {exc}"[:300]
                continue
            for t, task in zip(batch, tasks, strict=True):
                record(t, results.get(task.id))

    async def run() -> None:
        clock.begin()
        if spec.get("route") == "runners":
            await waves()
        else:
            await asyncio.gather(*(episode(t) for t in spec["tasks"]))
        clock.t_end = time.monotonic()

    clock.begin_what = "before the first Agent is made" + (" (the shared Sandbox is made before)" if sandbox else "")
    clock.end_what = "the last Runners.run_task returned" + (
        " (the shared Sandbox's add server still open)" if sandbox else " (each episode closed its own add server)"
    )
    asyncio.run(run())


def worker_verifiers(spec: dict[str, Any], clock: Clock) -> None:
    sys.path.insert(0, str(WORK / "tasksets"))
    # The per-rollout tool servers (python -m ...) import the task class too: they inherit this environment.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(WORK / "tasksets"), os.environ.get("PYTHONPATH")) if p)
    tasks_file = Path(spec["run_dir"]) / "tasks.json"
    tasks_file.write_text(json.dumps(spec["tasks"]))
    outputs = Path(spec["run_dir"]) / "outputs"
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    config = EvalConfig.model_validate({
        "env": {"taskset": {"id": "peers_add_v1", "tasks_file": str(tasks_file),
                            "task": {"server_command": spec["server"]}},
                "agent": {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}}},
        "model": spec["model"], "client": {"type": "eval", "base_url": spec["base_url"], "api_key_var": "PEERS_API_KEY"},
        "max_concurrent": spec["concurrency"], "rich": None, "push": False, "output_dir": str(outputs),
    })  # fmt: skip
    clock.partial = lambda: _verifiers_answers(outputs, clock)

    async def run() -> None:
        job = asyncio.ensure_future(run_eval(config))
        done, _ = await asyncio.wait({job}, timeout=max(0.0, clock.deadline - time.monotonic()))
        if not done:  # the episodes finished so far are in its traces.jsonl
            clock.notes.append("stopped at the deadline")
            job.cancel()
            with contextlib.suppress(BaseException):
                await job
        else:
            job.result()

    clock.begin_what = "before run_eval (it loads the taskset, then runs)"
    clock.end_what = "run_eval returned (its rollouts, bridges and servers closed)"
    clock.begin()
    asyncio.run(run())
    clock.t_end = time.monotonic()
    _verifiers_answers(outputs, clock)


def _verifiers_answers(outputs: Path, clock: Clock) -> None:
    """Answers and errors from the episodes run_eval wrote (``traces.jsonl``, one episode a line)."""
    for path in outputs.glob("*/traces.jsonl"):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError, KeyError, IndexError, TypeError):
                ep = json.loads(line)
                tid = ep["task"]["data"]["id"]
                nodes = ep["traces"][-1]["nodes"] if ep.get("traces") else []
                replies = [n["message"] for n in nodes if (n.get("message") or {}).get("role") == "assistant"]
                clock.answers[tid] = _text(replies[-1].get("content")) if replies else None
                errors = ep.get("errors") or (ep["traces"][-1].get("errors") if ep.get("traces") else None)
                if errors or not ep.get("ok"):
                    clock.errors[tid] = str(errors)[:300]


WORKERS = {"aworld-gym": worker_aworld_gym, "aworld": worker_aworld, "verifiers": worker_verifiers}


def worker_main(name: str, spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    clock = Clock(spec)

    def stop(signum: int, frame: Any) -> None:  # the driver's memory guard: keep what is done, then leave
        with contextlib.suppress(Exception):
            if clock.partial is not None:
                clock.partial()
        clock.notes.append("stopped by the driver")
        clock.write()
        os._exit(3)

    signal.signal(signal.SIGTERM, stop)
    try:
        WORKERS[name](spec, clock)
    except BaseException as exc:  # noqa: BLE001 - reported in the row, not a crash of the benchmark
        import traceback

        traceback.print_exc()
        clock.write(f"{type(exc).__name__}: {exc}"[:500])
        raise SystemExit(1) from None
    clock.write()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2], sys.argv[3])
    else:
        main()
