"""Shared browsers for Browser-v0: as many Playwright MCP servers (one Chromium each) as the envs need.

One browser holds at most ``contexts_per_browser`` envs (one isolated browser context each). An env takes a
context on the least loaded running browser that has room; when every browser is full, another one starts. A
browser with no env left stops, and is started again (same socket) when an env needs it. A crash of one browser
(or of its server) reaches only the envs on it, and the next reset of each gets a new browser there.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from aworld_gym.base.errors import ConfigError
from aworld_gym.core.admission import Admission
from aworld_gym.core.resources import Holdings, LocalServer
from aworld_gym.envs.browser.playwright import PlaywrightServer

CONTEXTS_ENV = "AWORLD_GYM_BROWSER_CONTEXTS"
# 32 contexts per browser: 128 envs run on 4 browsers (4 Node servers sharing the CPU with the driver). Measured
# by benchmarks/browser_scale.py, see docs/benchmarks.md.
DEFAULT_CONTEXTS = 32
ACTIVE_ENV = "AWORLD_GYM_BROWSER_ACTIVE"
# Envs driving their browser at once, per CPU: the others wait in the driver (no browser timeout runs there), so a
# starved machine slows episodes down instead of timing out their page loads and clicks. Measured by
# benchmarks/browser_scale.py, see docs/benchmarks.md.
ACTIVE_PER_CPU = 4


def _setting(given: int | None, variable: str, default: int, what: str) -> int:
    if given is None:
        raw = os.environ.get(variable, "")
        try:
            given = int(raw) if raw.strip() else default
        except ValueError:
            raise ConfigError(f"${variable}={raw!r} is not a whole number") from None
    if isinstance(given, bool) or not isinstance(given, int) or given < 1:
        raise ConfigError(f"{what} must be a whole number >= 1, not {given!r}")
    return given


def _cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def contexts_cap(given: int | None = None) -> int:
    """The number of envs (browser contexts) one shared browser may hold: ``given``, else
    ``$AWORLD_GYM_BROWSER_CONTEXTS``, else :data:`DEFAULT_CONTEXTS`."""
    return _setting(given, CONTEXTS_ENV, DEFAULT_CONTEXTS, "contexts_per_browser")


def active_cap(given: int | None = None) -> int:
    """The number of envs of this process that may drive their browser at once (a reset, a step): ``given``, else
    ``$AWORLD_GYM_BROWSER_ACTIVE``, else :data:`ACTIVE_PER_CPU` per CPU this process may run on."""
    return _setting(given, ACTIVE_ENV, ACTIVE_PER_CPU * _cpus(), "active_browsers")


def active_share(processes: int, cpus: float | None = None) -> dict[str, str]:
    """The environment for one of ``processes`` worker processes that share a machine (a process engine's workers, a
    node's Ray actors): ``$AWORLD_GYM_BROWSER_ACTIVE`` as set here, else that process's share of the machine's
    default (:data:`ACTIVE_PER_CPU` per CPU; ``cpus``: the machine's, default this process's), at least 1. The gate
    is per process, so without a share every worker would take the whole machine's."""
    if os.environ.get(ACTIVE_ENV, "").strip():
        return {ACTIVE_ENV: os.environ[ACTIVE_ENV]}
    return {ACTIVE_ENV: str(max(1, int(ACTIVE_PER_CPU * (cpus or _cpus())) // max(1, processes)))}


_admissions: dict[int, Admission] = {}
_admissions_lock = threading.Lock()


def admission(limit: int) -> Admission:
    """The process-wide gate of every Browser-v0 env made with this ``limit`` (shared or own browsers alike: they
    share the machine's CPUs)."""
    with _admissions_lock:
        if limit not in _admissions:
            _admissions[limit] = Admission(limit)
        return _admissions[limit]


class BrowserPool:
    """The shared browsers of one task site (origin and settle time) in this process.

    Args:
        origin: the only origin the browsers may request.
        settle_ms: how long Playwright waits after an action for the page to settle.
    """

    def __init__(self, origin: str, settle_ms: int) -> None:
        self.origin, self.settle_ms = origin, settle_ms
        self.servers: list[PlaywrightServer] = []
        self._lock = threading.Lock()

    def checkout(self, holdings: Holdings, cap: int, name: str = "browser") -> dict[str, Any]:
        """Hold a context's place on a browser for an env (``holdings``: the env's, under the ``mcpServers`` name
        ``name``) and return the ``mcpServers`` entry for it. Choosing and holding happen under one lock, so envs
        made at once in many threads never put more than ``cap`` on one browser."""
        with self._lock:
            server = self._choose(cap)
            url = holdings.hold(server, name)  # starts the server if it is not running
        return LocalServer(server).entry(url)

    def _choose(self, cap: int) -> PlaywrightServer:
        running = [s for s in self.servers if 0 < s.refs < cap]
        if running:
            return min(running, key=lambda s: s.refs)
        idle = next((s for s in self.servers if s.refs == 0), None)
        if idle is not None:
            return idle
        server = PlaywrightServer(self.origin, self.settle_ms)
        self.servers.append(server)
        return server

    @property
    def load(self) -> list[int]:
        """Envs on each browser (0: stopped)."""
        return [s.refs for s in self.servers]

    @property
    def running(self) -> list[PlaywrightServer]:
        """The browsers that hold at least one env."""
        return [s for s in self.servers if s.refs > 0]


_pools: dict[tuple[str, int], BrowserPool] = {}
_pools_lock = threading.Lock()


def browser_pool(origin: str, settle_ms: int) -> BrowserPool:
    """The process-wide pool of shared browsers for this task site."""
    with _pools_lock:
        key = (origin, settle_ms)
        if key not in _pools:
            _pools[key] = BrowserPool(origin, settle_ms)
        return _pools[key]


def all_browsers() -> list[PlaywrightServer]:
    """Every shared browser server this process has made (running or stopped), in every pool."""
    with _pools_lock:
        return [server for pool in _pools.values() for server in pool.servers]
