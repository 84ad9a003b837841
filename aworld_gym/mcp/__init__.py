"""MCP plumbing: AWorld-style server configs, the ToolHub, and plain functions as an in-process server."""

from aworld_gym.mcp.config import ServerSpec, parse_mcp_config
from aworld_gym.mcp.functions import FunctionTools, function_server
from aworld_gym.mcp.hub import ToolHub, ToolResult

__all__ = ["FunctionTools", "ServerSpec", "ToolHub", "ToolResult", "function_server", "parse_mcp_config"]
