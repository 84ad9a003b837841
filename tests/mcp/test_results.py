"""ToolResult records: MCP structuredContent reaches ``to_dict()`` (so ``info["tool_results"]``) when there is some."""

import json
from typing import TypedDict

from mcp.server.mcpserver import MCPServer

from aworld_gym.base.calls import ToolCall
from aworld_gym.mcp.hub import ToolHub
from aworld_gym.mcp.options import ToolOptions
from aworld_gym.mcp.results import ToolResult, truncate


class Weather(TypedDict):
    city: str
    celsius: float


def weather_server() -> MCPServer:
    server = MCPServer("weather", log_level="WARNING")

    @server.tool()
    def weather(city: str) -> Weather:
        """The weather in a city."""
        return {"city": city, "celsius": 21.5}

    @server.tool()
    def scores() -> dict[str, int]:
        """A plain dict result."""
        return {"a": 1, "b": 2}

    @server.tool(structured_output=False)
    def plain() -> str:
        """Text only."""
        return "just text"

    return server


def test_structured_content_is_in_the_record():
    with ToolHub(servers={"w": weather_server}) as hub:
        weather, scores, plain, unknown = hub.call(
            [ToolCall("weather", {"city": "Oslo"}, id="1"), ToolCall("scores", {}, id="2"), ToolCall("plain", {}),
             ToolCall("nope", {})]
        )  # fmt: skip
    assert weather.structured == {"city": "Oslo", "celsius": 21.5}
    record = weather.to_dict()
    assert record["structured"] == {"city": "Oslo", "celsius": 21.5} and record["id"] == "1"
    assert json.loads(weather.text) == record["structured"]  # the SDK also sends it as text for the model
    assert scores.to_dict()["structured"] == {"a": 1, "b": 2}
    assert plain.structured is None and "structured" not in plain.to_dict() and plain.text == "just text"
    assert "structured" not in unknown.to_dict()
    json.dumps([weather.to_dict(), scores.to_dict()])  # records stay JSON


def test_to_dict_keys_without_structured_content():
    r = ToolResult(ToolCall("t", {}, id="x"), "out", latency_s=0.1234567)
    assert r.to_dict() == {"id": "x", "name": "t", "server": None, "text": "out", "error": None, "latency_s": 0.123457,
                           "truncated": False}  # fmt: skip
    assert truncate("abcdef", 3) == ("abc\n[... output truncated: showing the first 3 of 6 characters]", True)


def test_the_sdk_result_wrapper_is_not_copied_into_records_and_cut_results_keep_no_copy():
    from aworld_gym.base.calls import ToolCall
    from aworld_gym.mcp.demo_server import build_server
    from aworld_gym.mcp.hub import ToolHub
    from aworld_gym.mcp.results import ToolResult

    call = ToolCall("add", {"a": 1, "b": 2}, "1")
    assert "structured" not in ToolResult(call, "3.0", structured={"result": 3.0}).to_dict()
    assert "structured" not in ToolResult(call, "hi", structured={"result": "hi"}).to_dict()
    assert ToolResult(call, "[1, 2]", structured={"result": [1, 2]}).to_dict()["structured"] == {"result": [1, 2]}
    with ToolHub(servers={"demo": build_server}, options=ToolOptions(max_output_chars=5)) as hub:
        (long,) = hub.call([ToolCall("echo", {"text": "x" * 50}, "2")])
    assert long.truncated and long.structured is None
