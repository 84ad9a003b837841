"""One tool namespace over many servers: which tools the agent sees, under which names, with which schemas."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aworld_gym.mcp.redact import module_logger
from aworld_gym.mcp.tools.listing import safe_names, shown_name, warn_once
from aworld_gym.mcp.transports.connection import Connection

_NAME_RE = re.compile(r"[^a-zA-Z0-9_-]")
_VALID_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
# Keys of a schema's top level that say where the schema comes from, not what to send (Node servers add them).
_SCHEMA_NOISE = ("$schema", "$id")
logger = module_logger(__name__)
_reported_task_only: set[tuple[str, str]] = set()  # (server, tool) already logged as hidden


@dataclass
class RoutedTool:
    """One tool as the agent sees it, and where its calls go.

    Attributes:
        exposed: the name the agent uses (``server__tool`` when two servers have the tool).
        name: the tool's name on its server.
        conn: the connection to that server.
        schema: the JSON schema calls are checked against (hidden arguments removed); the agent reads
            :attr:`shown`.
        description: the tool's description.
        validator: the schema check, built at the first call (``False``: the schema is left to the server).
    """

    exposed: str
    name: str
    conn: Connection
    schema: dict[str, Any]
    description: str
    validator: Any = field(default=None, repr=False)

    @property
    def shown(self) -> dict[str, Any]:
        """The schema as the model reads it: ``schema`` without ``$schema`` and ``$id``."""
        if not any(k in self.schema for k in _SCHEMA_NOISE):
            return self.schema
        return {k: v for k, v in self.schema.items() if k not in _SCHEMA_NOISE}


def openai_tools(tools: Iterable[RoutedTool]) -> list[dict[str, Any]]:
    """``tools`` as OpenAI tool schemas (``{"type": "function", "function": {...}}``), as the model reads them."""
    return [
        {"type": "function", "function": {"name": t.exposed, "description": t.description, "parameters": t.shown}}
        for t in tools
    ]


def task_only(tool: Any) -> bool:
    """Whether a tool can only be called as an MCP task (``execution.taskSupport == "required"``): a plain call
    always fails, and the env does not run tasks, so the agent is not shown it."""
    return getattr(getattr(tool, "execution", None), "task_support", None) == "required"


def build_tools(
    conns: Sequence[Connection],
    *,
    allow: Sequence[str] | None = None,
    deny: Sequence[str] = (),
    hidden_arguments: Mapping[str, frozenset[str]] | None = None,
) -> dict[str, RoutedTool]:
    """The agent's tools by exposed name, from the tools the connections listed.

    A tool name that two servers share is exposed as ``server__tool`` (for both); a server with a ``tool_prefix``
    exposes each tool as ``prefix__tool``; a server's ``reset_tool`` is never exposed, nor a tool that runs only
    as an MCP task (:func:`task_only`; logged once per process and tool). A name that OpenAI's ``tools=`` API
    would refuse (not ``^[a-zA-Z0-9_-]{1,64}$``) is exposed under a clean name
    (:func:`~aworld_gym.mcp.tools.listing.safe_names`; a warning, once), its calls going to the original name.

    Args:
        conns: the started connections, in config order.
        allow: glob patterns a tool must match (its name, exposed name or ``server__tool``); ``None`` allows all.
        deny: glob patterns of tools to hide (applied after ``allow``).
        hidden_arguments: ``{tool name: arguments}`` removed from the schemas the agent sees.
    """

    clean = {id(c): safe_names([t.name for t in c.tools]) for c in conns}  # per server: {name: valid name}

    def base(conn: Connection, name: str) -> str:  # a server's tool_prefix names all its tools
        prefix = getattr(conn.spec, "tool_prefix", None)
        name = clean[id(conn)][name]
        return _NAME_RE.sub("_", f"{prefix}__{name}")[:64] if prefix else name

    counts: dict[str, int] = {}
    for conn in conns:
        for tool in conn.tools:
            if not task_only(tool):
                counts[base(conn, tool.name)] = counts.get(base(conn, tool.name), 0) + 1
    hidden = {c.spec.reset_tool for c in conns if c.spec.reset_tool}
    tools: dict[str, RoutedTool] = {}
    for conn in conns:
        for tool in conn.tools:
            if task_only(tool):
                _report_task_only(conn.spec.name, tool.name)
                continue
            valid = clean[id(conn)][tool.name]
            qualified = _NAME_RE.sub("_", f"{conn.spec.name}__{valid}")[:64]
            exposed = qualified if counts[base(conn, tool.name)] > 1 else base(conn, tool.name)
            # a prefixed server's tools are matched by their exposed names only ("read_file" is not "aworld__read_file")
            known = (exposed, qualified) if getattr(conn.spec, "tool_prefix", None) else (tool.name, exposed, qualified)
            own = getattr(conn.spec, "allow_tools", None)  # the server entry's own filter, by the tool's name
            if own is not None and not any(fnmatch.fnmatchcase(tool.name, p) for p in own):
                continue
            if tool.name in hidden or not _allowed(known, allow, deny):
                continue
            schema = dict(tool.input_schema or {"type": "object", "properties": {}})
            drop = (hidden_arguments or {}).get(tool.name)
            if drop and isinstance(schema.get("properties", {}), dict):
                props = schema.get("properties") or {}
                schema["properties"] = {k: v for k, v in props.items() if k not in drop}
                if isinstance(schema.get("required"), list):
                    schema["required"] = [k for k in schema["required"] if k not in drop]
            if valid != tool.name:
                why = f"is exposed as {exposed!r} (a tool name must match ^[a-zA-Z0-9_-]{{1,64}}$)"
                warn_once(
                    conn.spec.name, tool.name, f"MCP server {conn.spec.name!r}: the tool {shown_name(tool.name)} {why}"
                )
            tools[exposed] = RoutedTool(exposed, tool.name, conn, schema, (tool.description or "").strip())
    return tools


def find_tool(tools: Mapping[str, RoutedTool], name: str) -> RoutedTool | list[str]:
    """The tool a call named ``name`` goes to: the tool exposed under that name, or else the one tool exposed under a
    clean name whose server declared ``name`` (a model that read the server's own name, e.g. ``../../etc/passwd``
    exposed as ``etc_passwd``, reaches the same tool). When none does, the exposed names the call could have meant
    (several tools declared ``name``) or an empty list.
    """
    tool = tools.get(name)
    if tool is not None:
        return tool
    if _VALID_NAME.fullmatch(name):  # a valid name is exposed as itself, qualified or prefixed: no alias
        return []
    meant = [t for t in tools.values() if t.name == name]
    return meant[0] if len(meant) == 1 else [t.exposed for t in meant]


def _allowed(names: Iterable[str], allow: Sequence[str] | None, deny: Sequence[str]) -> bool:
    names = tuple(names)

    def match(patterns: Iterable[str]) -> bool:
        return any(fnmatch.fnmatchcase(n, p) for n in names for p in patterns)

    if allow is not None and not match(allow):
        return False
    return not match(deny)


def _report_task_only(server: str, tool: str) -> None:
    if (server, tool) not in _reported_task_only:
        _reported_task_only.add((server, tool))
        logger.info("tool %r of server %r is hidden: it runs only as an MCP task, which envs do not use", tool, server)
