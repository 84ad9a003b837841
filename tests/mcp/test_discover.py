"""The ``server/discover`` probe is sent once per server and process: later connects (other envs, restarts) use the
era the server showed, counted at a real streamable-HTTP server (``tests/capability_server.py``); a remembered era
that no longer fits (the server was replaced by an older one) is forgotten and probed again.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from aworld_gym.core.env import MCPEnv
from aworld_gym.mcp.config import parse_mcp_config
from aworld_gym.mcp.transports import discover
from aworld_gym.mcp.transports.shared import free_port
from tests.helpers import ROOT

TASKS = [{"id": "t", "prompt": "Use the tools.", "answer": "done"}]
WHOAMI = '<tool_call>\n{"name": "whoami", "arguments": {}}\n</tool_call>'


@contextlib.contextmanager
def serve(port: int, legacy: bool = False) -> Iterator[str]:
    """The capability server over streamable HTTP on ``port``; yields its URL."""
    args = ["-m", "tests.capability_server", "--transport", "streamable-http", "--port", str(port)]
    proc = subprocess.Popen([sys.executable, *args, *(["--legacy"] if legacy else [])], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the capability server did not start")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


def methods(url: str) -> dict[str, int]:
    with urllib.request.urlopen(url.removesuffix("/mcp") + "/stats", timeout=10) as response:
        return json.loads(response.read())


def connect(url: str) -> str:
    """An env on ``url`` that calls ``whoami``; returns the tool's text."""
    with MCPEnv({"mcpServers": {"cap": {"type": "streamable-http", "url": url}}}, TASKS) as env:
        env.reset(seed=0)
        return env.step(WHOAMI)[4]["tool_results"][0]["text"]


def test_a_second_env_sends_no_discover_probe():
    with serve(free_port()) as url:
        assert connect(url).startswith("aworld-gym ")
        first = methods(url)
        assert (first["server/discover"], first.get("initialize", 0)) == (1, 0)  # a 2026-era server: no handshake
        assert connect(url).startswith("aworld-gym ")
        second = methods(url)
    assert second["server/discover"] == 1  # not probed again
    assert second["tools/call"] == 2 and second["tools/list"] == 2


def test_a_2025_server_is_probed_once_then_only_initialized():
    with serve(free_port(), legacy=True) as url:
        connect(url)
        connect(url)
        seen = methods(url)
    assert (seen["server/discover"], seen["initialize"], seen["tools/call"]) == (1, 2, 2)
    mode, _ = discover.connect_mode(parse_mcp_config({"mcpServers": {"cap": {"type": "http", "url": url}}})[0])
    assert mode == "legacy"


def test_a_remembered_era_that_no_longer_fits_is_probed_again():
    port = free_port()
    with serve(port) as url:
        connect(url)  # remembered: 2026-07-28
    with serve(port, legacy=True) as url:  # the same address, now an older server
        assert connect(url).startswith("aworld-gym ")
        seen = methods(url)
    assert seen["tools/list"] == 2  # the first, as 2026-07-28 (remembered, no probe), was refused
    assert seen["server/discover"] == 1 and seen["initialize"] == 1  # then the probe found a 2025 server
    spec = parse_mcp_config({"mcpServers": {"cap": {"type": "streamable-http", "url": url}}})[0]
    assert discover.connect_mode(spec) == ("legacy", None)  # remembered instead


@pytest.mark.parametrize("entry", [{"type": "inprocess"}, {"url": "http://127.0.0.1:1/mcp", "type": "http"}])
def test_what_is_remembered_and_by_what(entry: dict[str, Any]):
    from tests.capability_server import build

    spec = parse_mcp_config({"mcpServers": {"cap": {**entry, "server": build()} if "url" not in entry else entry}})[0]
    if spec.type == "inprocess":
        assert discover.server_key(spec) is None  # an in-process probe is a function call: nothing to remember
        return
    other = parse_mcp_config({"mcpServers": {"cap": {**entry, "headers": {"Authorization": "Bearer t"}}}})[0]
    assert discover.server_key(spec) != discover.server_key(other)  # another identity, another verdict
    assert "Bearer" not in discover.server_key(other)  # a digest, not the headers
    assert discover.connect_mode(spec) == ("auto", None)
