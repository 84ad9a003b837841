"""The shared browsers' pool: at most ``contexts_per_browser`` envs per browser, more browsers as needed, the least
loaded running browser first (no browser is started here: the servers are stand-ins that count references)."""

from __future__ import annotations

import threading

import pytest

from aworld_gym.base.errors import ConfigError
from aworld_gym.core.resources import Holdings
from aworld_gym.envs.browser import browsers
from aworld_gym.envs.browser.browsers import BrowserPool, active_cap, contexts_cap


class Counted:
    """Stands in for a PlaywrightServer: counts references like ``SharedServer.refs``."""

    def __init__(self, origin: str, settle_ms: int) -> None:
        self.refs = 0
        self.starts = 0
        self.socket = "/tmp/x.sock"
        self._lock = threading.Lock()

    def acquire(self) -> str:
        with self._lock:
            self.refs += 1
            return "http://127.0.0.1:1/mcp"

    def ensure_alive(self) -> str:
        return "http://127.0.0.1:1/mcp"

    def release(self) -> None:
        with self._lock:
            self.refs -= 1


@pytest.fixture
def pool(monkeypatch):
    monkeypatch.setattr(browsers, "PlaywrightServer", Counted)
    return BrowserPool("http://127.0.0.1:1", 150)


def test_browsers_fill_up_to_the_cap_and_another_starts(pool):
    held = [Holdings() for _ in range(10)]
    entries = [pool.checkout(h, 4) for h in held]
    assert pool.load == [4, 4, 2]
    assert entries[0] == {"type": "streamable-http", "url": "http://127.0.0.1:1/mcp", "socket": "/tmp/x.sock"}
    assert all(h.items[0].server_name == "browser" for h in held)  # a restart reconnects the env's session
    for h in held[:4]:
        h.release()
    assert pool.load == [0, 4, 2]
    pool.checkout(Holdings(), 4)
    assert pool.load == [0, 4, 3]  # the least loaded running browser, not the stopped one
    for _ in range(2):
        pool.checkout(Holdings(), 4)
    assert pool.load == [1, 4, 4]  # all running ones full: the stopped one starts again, no fourth is made


def test_envs_made_at_once_never_overfill_a_browser(pool):
    threads = [threading.Thread(target=pool.checkout, args=(Holdings(), 8)) for _ in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert pool.load == [8] * 8


def test_the_cap_comes_from_the_argument_the_environment_or_the_default(monkeypatch):
    monkeypatch.delenv(browsers.CONTEXTS_ENV, raising=False)
    assert contexts_cap() == browsers.DEFAULT_CONTEXTS
    monkeypatch.setenv(browsers.CONTEXTS_ENV, "12")
    assert contexts_cap() == 12 and contexts_cap(3) == 3
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ConfigError, match="contexts_per_browser"):
            contexts_cap(bad)
    monkeypatch.setenv(browsers.CONTEXTS_ENV, "many")
    with pytest.raises(ConfigError, match="AWORLD_GYM_BROWSER_CONTEXTS"):
        contexts_cap()


def test_active_browsers_come_from_the_argument_the_environment_or_the_cpus(monkeypatch):
    monkeypatch.delenv(browsers.ACTIVE_ENV, raising=False)
    monkeypatch.setattr(browsers.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert active_cap() == 3 * browsers.ACTIVE_PER_CPU
    monkeypatch.setenv(browsers.ACTIVE_ENV, "5")
    assert active_cap() == 5 and active_cap(2) == 2
    for bad in (0, 1.5, False):
        with pytest.raises(ConfigError, match="active_browsers"):
            active_cap(bad)
    assert browsers.admission(7) is browsers.admission(7)  # one gate per limit in the process
    assert browsers.admission(7).limit == 7 and browsers.admission(6) is not browsers.admission(7)


def test_worker_processes_share_the_machines_browser_slots(monkeypatch):
    """A process engine's workers (or a node's Ray actors) each get their share: the gate is per process."""
    from aworld_gym.rollout.engines.ray_worker import EpisodeWorker

    monkeypatch.delenv(browsers.ACTIVE_ENV, raising=False)
    monkeypatch.setattr(browsers.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert browsers.active_share(2) == {browsers.ACTIVE_ENV: str(browsers.ACTIVE_PER_CPU)}  # 8 slots over 2
    assert browsers.active_share(3, cpus=16) == {browsers.ACTIVE_ENV: str(16 * browsers.ACTIVE_PER_CPU // 3)}
    assert browsers.active_share(100) == {browsers.ACTIVE_ENV: "1"}  # never 0
    monkeypatch.setenv(browsers.ACTIVE_ENV, "6")
    assert browsers.active_share(2) == {browsers.ACTIVE_ENV: "6"}  # set by the user: passed on as it is
    monkeypatch.delenv(browsers.ACTIVE_ENV)
    EpisodeWorker(1, 0.0, {browsers.ACTIVE_ENV: "3"})  # in its own process on Ray; here, this one's environment
    assert active_cap() == 3
    monkeypatch.setenv(browsers.ACTIVE_ENV, "5")
    EpisodeWorker(1, 0.0, {browsers.ACTIVE_ENV: "3"})
    assert active_cap() == 5  # what the actor's process has already wins
