"""MCP plumbing: AWorld-style server configs (:mod:`~.config`, secrets kept in by :mod:`~.redact`), the
:class:`ToolHub` (:mod:`~.hub`, on the event loops of :mod:`~.loop`), and its parts by concept: :mod:`~.transports`
(sessions over stdio and HTTP), :mod:`~.auth` (OAuth), :mod:`~.tools` (listing, naming, checking and sending calls),
:mod:`~.results` (what a call gives back); what a server may ask of the client (:mod:`~.capabilities`,
:mod:`~.client_requests`, :mod:`~.sampling`), and our own servers (:mod:`~.functions`, :mod:`~.serving`,
:mod:`~.demo_server`)."""

from aworld_gym.mcp.config import ServerSpec, parse_mcp_config
from aworld_gym.mcp.functions import FunctionTools, function_server
from aworld_gym.mcp.hub import ToolHub
from aworld_gym.mcp.results import ToolResult

__all__ = ["FunctionTools", "ServerSpec", "ToolHub", "ToolResult", "function_server", "parse_mcp_config"]
