import json

import pytest

from aworld_gym.base.errors import ConfigError
from aworld_gym.mcp.config import parse_mcp_config
from aworld_gym.mcp.demo_server import build_server

AWORLD_CONFIG = {
    "mcpServers": {
        "gaia_server": {
            "type": "streamable-http",
            "url": "https://example.invalid/mcp",
            "timeout": 600,
            "sse_read_timeout": 600,
            "headers": {"ENV_CODE": "gaia", "Authorization": "Bearer x"},
        },
        "local_tool": {"command": "python", "args": ["server.py"], "env": {"A": 1}, "cwd": "."},
        "legacy": {"type": "sse", "url": "http://127.0.0.1:1/sse"},
    }
}


def test_aworld_config_shapes(tmp_path):
    specs = {s.name: s for s in parse_mcp_config(AWORLD_CONFIG)}
    g = specs["gaia_server"]
    assert (g.type, g.timeout, g.sse_read_timeout, g.headers["ENV_CODE"]) == ("streamable-http", 600.0, 600.0, "gaia")
    local = specs["local_tool"]
    assert (local.type, local.command, local.args, local.env, local.cwd) == (
        "stdio",
        "python",
        ("server.py",),
        {"A": "1"},
        ".",
    )
    assert specs["legacy"].type == "sse"
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(AWORLD_CONFIG))
    assert [s.name for s in parse_mcp_config(str(path))] == list(AWORLD_CONFIG["mcpServers"])
    assert [s.name for s in parse_mcp_config(json.dumps(AWORLD_CONFIG))] == list(AWORLD_CONFIG["mcpServers"])


def test_inprocess_servers():
    srv = build_server()
    specs = parse_mcp_config({"mcpServers": {"a": srv}}, servers={"b": build_server()})
    assert [(s.name, s.type) for s in specs] == [("a", "inprocess"), ("b", "inprocess")]


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ({"servers": {}}, '"mcpServers"'),
        ({"mcpServers": {"x": {"type": "grpc", "url": "http://a"}}}, "not one of stdio"),
        ({"mcpServers": {"x": {"args": ["a"]}}}, "needs a 'command'"),
        ({"mcpServers": {"x": {"type": "streamable-http"}}}, "http(s) 'url'"),
        ({"mcpServers": {"x": {"command": "p", "timeout": -1}}}, "positive number"),
        ({"mcpServers": {"x": {"command": "p", "comand": "typo"}}}, "unknown keys"),
        ({"mcpServers": {}}, "no MCP servers"),
        ("{not json", "not valid JSON"),
        ("/no/such/mcp.json", "does not exist"),
    ],
)
def test_bad_config_says_what_to_change(config, fragment):
    with pytest.raises(ConfigError) as err:
        parse_mcp_config(config)
    assert fragment in str(err.value)
