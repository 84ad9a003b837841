"""The driver SIGKILLed mid-run and started again with ``--resume``: every (task, sample) is recorded exactly once,
and the killed driver's stdio servers do not outlive it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import plan_tasks, stdio_config, wait_until

EPISODES = 48


def _demo_servers(marker: str) -> list[int]:
    import psutil

    out = []
    for p in psutil.process_iter(["cmdline", "environ"]):
        try:
            if (
                "aworld_gym.mcp.demo_server" in (p.info["cmdline"] or [])
                and (p.info["environ"] or {}).get("AWORLD_TEST_MARKER") == marker
                and p.status() != psutil.STATUS_ZOMBIE
            ):
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


def _rollout(tmp: Path, resume: bool, marker: str) -> subprocess.Popen:
    tasks = tmp / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in plan_tasks(12)))
    config = stdio_config()
    config["mcpServers"]["demo"]["env"] = {"AWORLD_TEST_MARKER": marker}
    argv = [str(Path(sys.executable).parent / "aworld-gym"), "rollout", "--env", "AWorld/MCP-v0", "--policy",
            "reference", "--episodes", str(EPISODES), "--group-size", "4", "--concurrency", "8",
            "--policy-latency", "0.3", "--env-kwargs", json.dumps({"mcp_config": config, "tasks": str(tasks)}),
            "--out", str(tmp / "out.jsonl"), "--no-progress", *(["--resume"] if resume else [])]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.slow
def test_a_killed_driver_resumes_without_losing_or_doubling_an_episode(tmp_path):
    marker = f"killed-driver-{os.getpid()}"
    out = tmp_path / "out.jsonl"
    first = _rollout(tmp_path, resume=False, marker=marker)
    assert wait_until(lambda: out.exists() and len(out.read_text().splitlines()) >= 12, timeout=120)
    os.kill(first.pid, signal.SIGKILL)  # the driver only: no chance to close anything
    first.wait(10)
    written = len(out.read_text().splitlines())
    assert 12 <= written < EPISODES
    # Its stdio servers see their input end and exit.
    assert wait_until(lambda: _demo_servers(marker) == [], timeout=20), _demo_servers(marker)
    second = _rollout(tmp_path, resume=True, marker=marker)
    _, err = second.communicate(timeout=300)
    assert second.returncode == 0, err.decode()[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    keys = Counter((r["task_id"], r["sample"]) for r in rows)
    assert len(keys) == EPISODES and set(keys.values()) == {1}, [k for k, c in keys.items() if c != 1]
    assert all(r.get("termination") for r in rows)
    assert _demo_servers(marker) == []
