"""The warm path's bookkeeping (``Zygote``) against a stand-in zygote program (no bubblewrap needed): which requests a
dead zygote takes with it, and when a silent one counts as wedged. The real zygote is tested in test_warm.py."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from aworld_gym.sandbox import warm

# Speaks the zygote's protocol: a settings line in, "ready" out, then one reply per request (each in a thread, after
# 0.3 s), except that a request with "stall" is never answered and, after "mute", nothing is.
FAKE = """
import json, sys, threading, time
sys.stdin.readline()
time.sleep(1.0)  # a slow start, as the real one's preload
print(json.dumps({"ready": True}), flush=True)
lock, mute = threading.Lock(), threading.Event()
def answer(req):
    time.sleep(0.3)
    if req.get("stall") or mute.is_set():
        return
    with lock:
        print(json.dumps({"id": req["id"], "status": 0}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    if req.get("mute"):
        mute.set()
    threading.Thread(target=answer, args=(req,)).start()
"""


class NoCgroups:
    available = False

    def sweep_orphans(self) -> int:
        return 0


@pytest.fixture
def zygote(tmp_path: Path):
    (tmp_path / "fake_zygote.py").write_text(FAKE)
    z = warm.Zygote([], sys.executable, (), NoCgroups())  # type: ignore[arg-type] - a stand-in
    z.base_argv = [sys.executable, str(tmp_path / "fake_zygote.py")]
    yield z
    z.close()


def test_a_dead_zygote_fails_only_the_requests_sent_to_it(zygote):
    """Requests sent to the new zygote while the dead one's reader is still failing its own are not failed with it."""
    zygote.ensure()
    sent_to = threading.local()
    ensure = zygote.ensure

    def ensure_noting() -> object:
        sent_to.proc = ensure()
        return sent_to.proc

    zygote.ensure = ensure_noting  # type: ignore[method-assign]
    wrong: list[tuple[int, int]] = []
    lost, answered, stop = [0], [0], threading.Event()

    def client() -> None:
        while not stop.is_set():
            try:
                zygote.run({}, 10)
                answered[0] += 1
            except warm.ZygoteDied:
                if sent_to.proc.poll() is None:  # lost, though the zygote it went to is alive
                    wrong.append((sent_to.proc.pid, zygote.proc.pid))
                lost[0] += 1

    threads = [threading.Thread(target=client) for _ in range(16)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    os.kill(zygote.proc.pid, signal.SIGKILL)
    time.sleep(3.0)
    stop.set()
    for t in threads:
        t.join(15)
    assert zygote.starts == 2 and lost[0] >= 1 and answered[0] > 16
    assert not wrong, f"{len(wrong)} request(s) on a live zygote reported lost"


def test_one_unanswered_request_does_not_kill_a_zygote_that_answers_others(zygote):
    zygote.ensure()
    first = zygote.proc
    traffic = threading.Thread(target=lambda: [zygote.run({}, 10) for _ in range(12)])
    traffic.start()
    with pytest.raises(warm.ZygoteDied, match=r"did not answer within 1 s \(it answers others: kept\)"):
        zygote.run({"stall": True}, 1.0)
    traffic.join(15)
    assert zygote.proc is first and first.poll() is None and zygote.starts == 1
    assert zygote.run({}, 10)["status"] == 0


def test_a_zygote_that_answers_nothing_is_killed_and_the_next_request_starts_a_new_one(zygote):
    zygote.ensure()
    first = zygote.proc
    with pytest.raises(warm.ZygoteDied, match=r"did not answer within 1 s \(stopped: the next execution starts"):
        zygote.run({"mute": True}, 1.0)
    assert first.poll() is not None, "the silent zygote was left running"
    assert zygote.run({}, 10)["status"] == 0
    assert zygote.proc is not first and zygote.starts == 2
