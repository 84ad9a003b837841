"""The official Playwright MCP server (``@playwright/mcp`` from npm) on the system Chromium.

``shared``: a server over streamable HTTP on a private Unix socket; it runs one headless Chromium and gives every
MCP session (every env) its own isolated browser context (:mod:`~aworld_gym.envs.browser.browsers` starts more of
them when one has as many contexts as it may hold). ``own``: a stdio server with its own Chromium per env. Either
way the browser may only request the task site's origin (``--allowed-origins``), keeps its profile in memory
(``--isolated``) and writes its output files to a private temporary folder.

Every process a shared server starts is found wherever it was re-parented: Node, the browser process and its
crash handlers carry the server's marker in their environment, and every Chromium helper (zygotes, renderers: they
overwrite their environment with their title) names the browser's profile folder, which Playwright makes in the
server's private ``TMPDIR``. So what a SIGKILLed browser or server leaves behind is killed at the reset after a crash
(:meth:`PlaywrightServer.reap_orphans`) and whenever the server stops, and a killed server's profile folders go
with its private folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from aworld_gym.base import scratch
from aworld_gym.base.errors import ConfigError
from aworld_gym.base.node import find_node_file, missing_message
from aworld_gym.envs.browser.keeper import Keeper
from aworld_gym.mcp.transports.proctree import descendants, kill, stat
from aworld_gym.mcp.transports.shared import SharedServer, shared_instance

PLAYWRIGHT_MCP_SETTING = "AWORLD_GYM_PLAYWRIGHT_MCP"  # names cli.js explicitly
VIEWPORT = "640x480"
LISTEN_UNIX = Path(__file__).with_name("listen_unix.js")
BROWSER_MARKER = "AWORLD_GYM_BROWSER"  # in the environment of every process a shared server starts: its own value
# Playwright MCP pings each HTTP client every 3 s and closes the session of one that has not answered within
# $PLAYWRIGHT_MCP_PING_TIMEOUT_MS (5 s by default): a driver stepping 128 envs on 2 cores can be that late, and a
# closed session is a lost episode. Ours answer within this (the server dies with the driver: listen_unix.js).
PING_TIMEOUT_MS = "60000"
REAP_EVERY_S = 1.0  # reap_orphans scans /proc (every process's environment): at most this often per server


def chromium_path() -> str:
    """The system Chromium (``$AWORLD_GYM_CHROMIUM`` wins); never a browser downloaded by Playwright."""
    given = os.environ.get("AWORLD_GYM_CHROMIUM")
    if given:
        if not Path(given).is_file():
            raise ConfigError(f"AWORLD_GYM_CHROMIUM={given!r} does not exist")
        return given
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise ConfigError("no Chromium found: apt-get install chromium (or set AWORLD_GYM_CHROMIUM)")


def playwright_mcp_cli() -> str:
    """``cli.js`` of ``@playwright/mcp``: ``$AWORLD_GYM_PLAYWRIGHT_MCP``, else the checkout's or the current folder's
    ``node_modules``, else the user cache that ``aworld-gym setup browser`` fills (:mod:`aworld_gym.base.node`)."""
    try:
        found = find_node_file("@playwright/mcp", "cli.js", PLAYWRIGHT_MCP_SETTING)
    except FileNotFoundError as exc:
        raise ConfigError(str(exc)) from None
    if found is None:
        raise ConfigError(missing_message("@playwright/mcp", PLAYWRIGHT_MCP_SETTING))
    return str(found)


def node_path() -> str:
    found = shutil.which("node")
    if found is None:
        raise ConfigError("Node.js is needed for the Playwright MCP server: apt-get install -y nodejs npm")
    return found


def node_args() -> list[str]:
    """V8 flags for the Playwright MCP server's Node (``$AWORLD_GYM_NODE_ARGS`` replaces them)."""
    given = os.environ.get("AWORLD_GYM_NODE_ARGS")
    return given.split() if given is not None else list(NODE_ARGS)


# Chromium features a headless task page does not need. The WebUI omnibox popups: Chromium starts one
# chrome://omnibox-popup.top-chrome renderer per browser context (about 44 MB each) for an address bar nobody
# sees. Chromium keeps only the last --disable-features switch, and ours comes after Playwright's, so it
# repeats the features Playwright disables (playwright-core's chromiumSwitches.ts) before adding ours.
PLAYWRIGHT_DISABLED = ("AvoidUnnecessaryBeforeUnloadCheckSync", "DestroyProfileOnBrowserClose", "DialMediaRouteProvider",
                       "GlobalMediaControls", "HttpsUpgrades", "LensOverlay", "MediaRouter", "PaintHolding",
                       "ThirdPartyStoragePartitioning", "BlockOriginHeaderModificationOnRedirect", "Translate",
                       "AutoDeElevate", "OptimizationHints", "NetworkTimeServiceQuerying", "AimEnabled")  # fmt: skip
OURS_DISABLED = ("WebUIOmniboxPopup", "WebUIOmniboxFullPopup", "WebUIOmniboxAimPopup")
# The same holds for --enable-features: Playwright's CDPScreenshotNewSurface is repeated. The network service runs
# inside the browser process (one process less per browser, ~38 MB in own mode), and a headless task page needs
# no GPU process (WebGL pages then fail: $AWORLD_GYM_CHROMIUM_ARGS cannot undo this; edit CHROMIUM_ARGS).
CHROMIUM_ARGS = (
    "--disable-features=" + ",".join((*PLAYWRIGHT_DISABLED, *OURS_DISABLED)),
    "--enable-features=CDPScreenshotNewSurface,NetworkServiceInProcess2",
    "--disable-gpu",
    "--disable-software-rasterizer",
)
# Node's young generation kept at 1 MB semi-spaces and V8 tuned for size: ~30 MB less per Playwright MCP server,
# no slower on these pages (benchmarks/browser.py).
NODE_ARGS = ("--max-semi-space-size=1", "--optimize-for-size")


def processes_with(marker: bytes | None, folders: tuple[str, ...] = ()) -> dict[int, int]:
    """Live processes (other than this one) whose environment holds ``marker`` (``NAME=value``) or whose command
    line names one of ``folders``: {pid: start time}."""
    found: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmdline = f.read()  # read once: a second f.read() gives b"" (the second folder never matched)
            hit = any(folder.encode() in cmdline for folder in folders)
            if not hit and marker:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    hit = marker in f.read().split(b"\0")
        except OSError:
            continue
        info = stat(int(entry.name)) if hit else None
        if info is not None:
            found[info.pid] = info.start
    return found


def launch_config(output_dir: str) -> str:
    """A Playwright MCP config file (in ``output_dir``) that adds :data:`CHROMIUM_ARGS` (and the switches in
    ``$AWORLD_GYM_CHROMIUM_ARGS``, space-separated) to Chromium's launch."""
    args = [*CHROMIUM_ARGS, *os.environ.get("AWORLD_GYM_CHROMIUM_ARGS", "").split()]
    path = Path(output_dir) / "aworld-playwright-config.json"
    path.write_text(json.dumps({"browser": {"launchOptions": {"args": args}}}))
    return str(path)


def server_args(origin: str | None, settle_ms: int, output_dir: str, snapshot_mode: str = "none") -> list[str]:
    """The Playwright MCP flags every mode uses (``origin``: the only origin the browser may request; ``None``:
    any, for a browser behind a proxy that decides)."""
    return [
        playwright_mcp_cli(),
        "--config",
        launch_config(output_dir),
        "--headless",
        "--isolated",
        "--no-sandbox",  # Chromium's own sandbox needs user namespaces that containers often lack
        "--executable-path",
        chromium_path(),
        *(["--allowed-origins", origin] if origin else []),
        "--output-dir",
        output_dir,
        "--snapshot-mode",
        snapshot_mode,  # "none": actions answer briefly; the browser env adds the task area's snapshot itself
        "--codegen",
        "none",
        "--caps",
        "vision",  # browser_mouse_wheel (scrolling by an amount); the env exposes no coordinate click
        "--timeout-settle",
        str(settle_ms),
        "--viewport-size",
        VIEWPORT,
        "--no-webmcp",
    ]


class PlaywrightServer(SharedServer):
    """One Playwright MCP server (and one Chromium) for every env of this process; a context per session."""

    snapshot_mode = "none"
    proxy: str | None = None

    def __init__(self, origin: str | None, settle_ms: int) -> None:
        self.origin = origin
        self.settle_ms = settle_ms
        self.output_dir: str | None = None
        # Playwright MCP has no authentication: it listens on a Unix socket (0600, in a 0700 folder) instead of a
        # port, so only this user's processes can drive the browser (listen_unix.js, preloaded into node).
        self.socket_dir = str(scratch.make_dir("aworld-playwright-sock-"))
        self.socket = str(Path(self.socket_dir) / "mcp.sock")
        self.marker = secrets.token_hex(8)
        self.reaped = 0  # processes reap_orphans and stops killed (a browser's leftovers)
        self._reaped_at = 0.0
        self._reap_lock = threading.Lock()
        self.keeper: Keeper | None = None  # the idle session that keeps this start's Chromium up between episodes
        # TMPDIR: Playwright makes each browser's profile folder there, and every Chromium process names it
        env = {BROWSER_MARKER: self.marker, "AWORLD_GYM_PARENT_PID": str(os.getpid()), "TMPDIR": self.socket_dir,
               "PLAYWRIGHT_MCP_PING_TIMEOUT_MS": os.environ.get("PLAYWRIGHT_MCP_PING_TIMEOUT_MS", PING_TIMEOUT_MS)}  # fmt: skip
        super().__init__("playwright-mcp", env=env, start_timeout=60.0)

    def command(self, port: int) -> list[str]:
        scratch.remake(Path(self.socket_dir))  # if a temp cleaner removed it: same path (the env and markers name it)
        self.output_dir = str(scratch.make_dir("aworld-playwright-"))
        args = server_args(self.origin, self.settle_ms, self.output_dir, self.snapshot_mode)
        if self.proxy:  # Playwright also makes Chromium proxy loopback (its forced "<-loopback>" bypass rule)
            args += ["--proxy-server", self.proxy]
        self.extra_env.update({"AWORLD_GYM_LISTEN_SOCKET": self.socket, "AWORLD_GYM_LISTEN_PORT": str(port)})
        return [node_path(), *node_args(), "--require", str(LISTEN_UNIX), *args, "--host", "127.0.0.1", "--port", str(port),
                "--allowed-hosts", f"127.0.0.1:{port}"]  # fmt: skip

    def ready(self, port: int, proc: subprocess.Popen[bytes]) -> bool:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as s:
                s.connect(self.socket)
                self.keeper = Keeper(self.url_for(port), self.socket)  # connects at the first env's poke
                return True
            time.sleep(0.1)
        return False

    def cwd(self) -> str | None:
        return self.output_dir

    def marked_processes(self) -> dict[int, int]:
        """Every live process this server started, in any generation ({pid: start time}): Node, Chromium, helpers."""
        return processes_with(f"{BROWSER_MARKER}={self.marker}".encode(), (self.socket_dir + "/",))

    def orphans(self) -> dict[int, int]:
        """This server's processes that are no longer below the running server (all of them once it is gone): what
        a SIGKILLed browser left (its renderers and zygotes, re-parented away), or a dead server's browser."""
        found = self.marked_processes()  # first: a process started after this scan is not in it
        proc = self.proc
        live = {proc.pid, *descendants(proc.pid)} if proc is not None and proc.poll() is None else set()
        return {pid: start for pid, start in found.items() if pid not in live}

    def reap_orphans(self, force: bool = False) -> int:
        """SIGKILL :meth:`orphans` (at most once per :data:`REAP_EVERY_S` unless ``force``); how many were killed."""
        with self._lock, self._reap_lock:  # not during a restart: the new server's processes are its own
            if not force and time.monotonic() - self._reaped_at < REAP_EVERY_S:
                return 0
            self._reaped_at = time.monotonic()
            killed = kill(self.orphans())
            self.reaped += killed
            return killed

    def keep(self, force: bool = True) -> None:
        """The keeper's context again if the browser it was on died (:meth:`Keeper.poke`)."""
        keeper = self.keeper
        if keeper is not None:
            keeper.poke(force)

    def _stop(self) -> None:
        if self.keeper is not None:
            self.keeper.close()
            self.keeper = None
        super()._stop()  # the server's group, and what was below it while it ran
        with self._reap_lock:
            self.reaped += kill(self.marked_processes())  # what had left its tree (a killed browser's renderers)
        if self.output_dir:
            shutil.rmtree(self.output_dir, ignore_errors=True)
            self.output_dir = None

    def _idle(self) -> None:
        """Nobody holds it (and at exit): the socket's folder goes too (a restart keeps it: sessions point at it;
        the next start after this makes it again, :meth:`command`)."""
        super()._idle()
        shutil.rmtree(self.socket_dir, ignore_errors=True)


def shared_browser(origin: str, settle_ms: int) -> PlaywrightServer:
    """The process-wide Playwright server for this task origin."""
    return shared_instance(("playwright", origin, settle_ms), lambda: PlaywrightServer(origin, settle_ms))


def own_browser_entry(origin: str, settle_ms: int) -> tuple[dict[str, Any], str]:
    """A stdio ``mcpServers`` entry with a private Chromium, and its output folder (for the env to remove)."""
    output_dir = str(scratch.make_dir("aworld-playwright-"))
    args = [*node_args(), *server_args(origin, settle_ms, output_dir)]
    return {"command": node_path(), "args": args, "cwd": output_dir}, output_dir
