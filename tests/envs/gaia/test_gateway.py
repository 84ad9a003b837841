"""AWorld's hosted gateway as a first-class mcp_config: against a stand-in of our own (tests/gateway_server.py)
that wants AWorld's headers (Authorization, ENV_CODE, MCP_SERVERS) and serves tools with AWorld-style names. Its
tools join GAIA's own as ``aworld__<tool>`` (ours keep their names, so a clash with ``read_file`` is no clash),
``allow_tools`` picks among them, and a wrong token is a clear error."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time

import gymnasium as gym
import pytest

import aworld_gym  # noqa: F401
from aworld_gym.base.errors import ConfigError
from aworld_gym.envs.gaia.gateway import aworld_gateway
from tests.helpers import free_port

SERVERS = ["readweb-server", "wiki-server", "document-server"]


@pytest.fixture(scope="module")
def gateway():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.gateway_server", "--port", str(port), "--token", "s3cret"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            break
        time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(10)


def names(info):
    return {t["function"]["name"] for t in info["tools"]}


def test_gateway_tools_join_gaias_under_clear_names(gateway):
    config = aworld_gateway(gateway, "s3cret", servers=SERVERS)
    entry = config["mcpServers"]["aworld"]
    assert entry["headers"] == {"Authorization": "Bearer s3cret", "ENV_CODE": "gaia", "MCP_SERVERS": ",".join(SERVERS)}
    assert entry["timeout"] == entry["sse_read_timeout"] == 600
    env = gym.make("AWorld/GAIA-v0", python_server="inprocess", mcp_config=config)
    try:
        obs, info = env.reset(options={"task_id": "sample-c01"})
        tools = names(info)
        assert {"aworld__read_url", "aworld__search_wikipedia", "aworld__read_file"} <= tools
        assert {"read_file", "run_python", "run_shell", "web_search"} <= tools  # ours keep their names
        _, _, _, _, info = env.step('<tool_call>{"name": "aworld__search_wikipedia", "arguments": {"query": "Everest"}}'
                                    "</tool_call>")  # fmt: skip
        result = info["tool_results"][0]
        assert result["error"] is None and "8849 m" in result["text"]
        _, _, _, _, info = env.step(
            '<tool_call>{"name": "read_file", "arguments": {"path": "inventory.csv"}}</tool_call>'
        )
        assert "Hinge" in info["tool_results"][0]["text"]  # our reader, not the gateway's
    finally:
        env.close()
    env = gym.make("AWorld/GAIA-v0", python_server="inprocess", mcp_config=config,
                   allow_tools=["read_file", "run_python", "aworld__read_url"])  # fmt: skip
    try:
        assert names(env.reset(options={"task_id": "sample-c01"})[1]) == {"read_file", "run_python", "aworld__read_url"}
    finally:
        env.close()


def test_a_wrong_token_or_missing_settings_are_clear_errors(gateway, monkeypatch):
    env = gym.make("AWorld/GAIA-v0", python_server="inprocess", mcp_config=aworld_gateway(gateway, "wrong", SERVERS))
    try:
        with pytest.raises(Exception, match=r"aworld") as caught:
            env.reset(options={"task_id": "sample-c01"})
        assert "HTTP 401: bad token" in str(caught.value), caught.value  # the gateway's reason, not a generic error
    finally:
        env.close()
    monkeypatch.delenv("AWORLD_GATEWAY_URL", raising=False)
    monkeypatch.delenv("AWORLD_GATEWAY_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="AWORLD_GATEWAY_TOKEN"):
        aworld_gateway()
    monkeypatch.setenv("AWORLD_GATEWAY_URL", gateway)
    monkeypatch.setenv("AWORLD_GATEWAY_TOKEN", "s3cret")
    assert aworld_gateway()["mcpServers"]["aworld"]["url"] == gateway
    from aworld_gym.mcp.config import parse_mcp_config

    with pytest.raises(ConfigError, match="'tool_prefix' must be a short name"):
        parse_mcp_config({"mcpServers": {"g": {"type": "streamable-http", "url": gateway, "tool_prefix": "a b"}}})
