"""Faults for Browser-v0's resilience checks (``benchmarks/browser_scale.py`` and its test), and the processes a run
leaves behind, counted exactly.

The faults, each injected into one env's episode in flight (shared browser mode):

- ``renderer``: the Chromium renderer of the env's page is SIGKILLed. It is found by its page: the page allocates
  and touches 64 MB, and the renderer of the env's browser whose resident memory grew by that much is the one
  (pages of different envs are in different browser contexts, which never share a renderer process);
- ``browser``: the env's whole Chromium (its browser process) is SIGKILLed: every env on that browser loses its page;
- ``server``: the env's Playwright MCP server (Node) is SIGKILLed: every session on it is gone, and its browser;
- ``hang``: the page's script never yields again (a busy loop on its main thread): calls to it never answer.

Leftovers are counted exactly, wherever they were re-parented: a harness sets ``$AWORLD_GYM_RUN`` to a fresh value
before it starts anything, and every process it starts inherits it (the page server, Node, the browser process and
its crash handlers); Chromium's zygote children overwrite their environment with their title, but each names its
browser's profile folder, which lies in its server's private folder (or under the run's ``TMPDIR``).
:func:`run_processes` lists the live processes that carry the marker or name one of those folders.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import Any

from aworld_gym.base.errors import ConfigError
from aworld_gym.envs.browser.answers import result_json
from aworld_gym.envs.browser.playwright import processes_with
from aworld_gym.envs.browser.reference import BrowserReferencePolicy
from aworld_gym.mcp.transports.proctree import descendants

FAULTS = ("renderer", "browser", "server", "hang")
WIDE = frozenset({"browser", "server"})  # faults that reach every env on the same browser
RUN_MARKER = "AWORLD_GYM_RUN"
PROBE_MB = 64
_PROBE_JS = """() => {
  const probe = new Uint8Array(PROBE_MB * 1048576);
  for (let i = 0; i < probe.length; i += 4096) probe[i] = 1;
  window.__aworld_probe = probe;
  return {bytes: probe.length};
}""".replace("PROBE_MB", str(PROBE_MB))
# A script that never returns: sent without waiting for its answer (there is none), then inject() waits until it
# surely runs, so the agent's next call meets a page whose main thread never yields.
HANG_JS = "() => { for (;;) {} }"
HANG_WAIT_S = 2.0
_pending: set[asyncio.Future[Any]] = set()
_PAGE = os.sysconf("SC_PAGE_SIZE")


def cmdline(pid: int) -> str:
    """The command line of ``pid`` as one string (empty if it is gone). Chromium's zygote children rewrite theirs
    into one space-separated string, so arguments are looked for in the text."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").replace("\0", " ").strip()
    except OSError:
        return ""


def kind_of(pid: int) -> str:
    """``"chromium"``, ``"node"``, ``"python"`` (the page server) or ``"other"``, by the program's name."""
    args = cmdline(pid).split(" ", 1)
    name = Path(args[0]).name.lower()
    for kind, marks in (("chromium", ("chrom", "headless_shell")), ("node", ("node",)), ("python", ("python",))):
        if any(m in name for m in marks):
            return kind
    return "other"


def count_kinds(pids: Any) -> dict[str, int]:
    """How many of ``pids`` are of each :func:`kind_of`."""
    out = {"chromium": 0, "node": 0, "python": 0, "other": 0}
    for pid in pids:
        out[kind_of(pid)] += 1
    return out


def run_processes(run: str, folders: tuple[str, ...] = ()) -> dict[int, int]:
    """The live processes (other than this one) started under ``$AWORLD_GYM_RUN=run``, or naming one of ``folders``
    (the run's ``TMPDIR``, or its browsers' private folders, :func:`browser_folders`): {pid: start time}."""
    return processes_with(f"{RUN_MARKER}={run}".encode(), folders)


def browser_folders() -> tuple[str, ...]:
    """The private folders of every shared browser server of this process (each Chromium process names one)."""
    from aworld_gym.envs.browser.browsers import all_browsers

    return tuple(server.socket_dir + "/" for server in all_browsers())


def open_fds() -> int:
    """File descriptors open in this process."""
    return len(os.listdir("/proc/self/fd"))


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` in MiB (0 if it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE / 2**20
    except (OSError, IndexError, ValueError):
        return 0.0


def browser_processes(server: Any) -> tuple[int | None, list[int]]:
    """The browser process of a running Playwright MCP server and its renderers."""
    proc = getattr(server, "proc", None)
    if proc is None or proc.poll() is not None:
        return None, []
    browser, renderers = None, []
    for pid in descendants(proc.pid):
        args = cmdline(pid)
        if " --type=renderer" in args:
            renderers.append(pid)
        elif "chrom" in Path(args.split(" ", 1)[0]).name and " --type=" not in args:
            browser = pid
    return browser, renderers


def _server(env: Any) -> Any:
    server = env.local_server("browser")
    if server is None:
        raise ConfigError("faults are injected in shared browser mode (browser='shared')")
    return server


async def page_renderer(env: Any) -> int:
    """The pid of the renderer that runs ``env``'s page (see the module's docstring)."""
    _, renderers = await asyncio.to_thread(browser_processes, _server(env))
    before = {pid: rss_mb(pid) for pid in renderers}
    result_json(await env.hub.acall_internal("browser_evaluate", {"function": _PROBE_JS}))
    grown = sorted(((rss_mb(pid) - mb, pid) for pid, mb in before.items()), reverse=True)
    if not grown or grown[0][0] < 0.75 * PROBE_MB:
        raise RuntimeError(f"no renderer grew by {PROBE_MB} MB: {grown[:3]}")
    return grown[0][1]


async def inject(env: Any, kind: str) -> dict[str, Any]:
    """Inject the fault ``kind`` (one of :data:`FAULTS`) into ``env``'s episode; what was done, as a record."""
    server = _server(env)
    pid: int | None = None
    if kind == "renderer":
        pid = await page_renderer(env)
    elif kind == "browser":
        pid = (await asyncio.to_thread(browser_processes, server))[0]
    elif kind == "server":
        pid = server.proc.pid if server.proc is not None else None
    elif kind == "hang":
        call = asyncio.ensure_future(env.hub.acall_internal("browser_evaluate", {"function": HANG_JS}))
        _pending.add(call)
        call.add_done_callback(_forget)
        await asyncio.sleep(HANG_WAIT_S)
    else:
        raise ConfigError(f"fault must be one of {FAULTS}, not {kind!r}")
    if kind != "hang":
        if pid is None:
            raise RuntimeError(f"no process to kill for the fault {kind!r}")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return {"fault": kind, "pid": pid, "server": server.marker}


def _forget(call: asyncio.Future[Any]) -> None:
    """The hanging script's call ended (it times out, or its session is closed): its error is expected."""
    _pending.discard(call)
    if not call.cancelled():
        call.exception()


class FaultPolicy(BrowserReferencePolicy):
    """The reference policy, with faults armed per env: at the first turn of that env's next episode the fault is
    injected (and recorded in :attr:`injected`, and passed to ``on_fault``), then the policy acts as usual.

    Args:
        latency_s: as :class:`BrowserReferencePolicy`'s.
        on_fault: called with the env and the fault's record right after the injection.
    """

    def __init__(self, latency_s: float = 0.0, on_fault: Any = None) -> None:
        super().__init__(latency_s)
        self.armed: dict[int, str] = {}
        self.injected: list[dict[str, Any]] = []
        self.on_fault = on_fault

    def arm(self, env: Any, kind: str) -> None:
        """Inject ``kind`` at the first turn of ``env``'s next episode."""
        if kind not in FAULTS:
            raise ConfigError(f"fault must be one of {FAULTS}, not {kind!r}")
        self.armed[id(env.unwrapped)] = kind

    def disarm(self, env: Any) -> str | None:
        """Take back a fault that was not injected (the episode ended before its first turn); returns it."""
        return self.armed.pop(id(env.unwrapped), None)

    async def aact(self, env: Any, observation: str, info: dict[str, Any]) -> str:
        kind = self.armed.pop(id(env), None) if env.turn == 0 else None
        if kind is not None:
            record = await inject(env, kind)
            self.injected.append(record)
            if self.on_fault is not None:
                self.on_fault(env, record)
        return await super().aact(env, observation, info)
