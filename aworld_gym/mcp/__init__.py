"""MCP plumbing: AWorld-style server configs and the ToolHub."""

from aworld_gym.mcp.config import ServerSpec, parse_mcp_config
from aworld_gym.mcp.hub import ToolHub, ToolResult

__all__ = ["ServerSpec", "ToolHub", "ToolResult", "parse_mcp_config"]
