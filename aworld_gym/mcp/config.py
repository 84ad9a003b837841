"""AWorld-style ``mcp_config`` parsing.

::

    {"mcpServers": {
        "gaia_server": {"type": "streamable-http", "url": "https://.../mcp", "timeout": 600,
                        "sse_read_timeout": 600, "headers": {"Authorization": "Bearer ..."}},
        "local_tool":  {"command": "python", "args": ["server.py"], "env": {}, "cwd": "."}}}

``type`` is ``stdio`` (the default when absent), ``sse`` or ``streamable-http``. In-process MCP server objects
(``mcp.server.mcpserver.MCPServer`` or a low-level ``Server``) may be given as values too, or through
``servers={"name": obj}``; a zero-argument callable that returns such an object (a server factory) works
everywhere an object does, and survives ``gym.make``'s deep copy of its kwargs. ``reset_tool`` (our extension) names a tool the env calls at every reset; it is
hidden from the agent. ``pool`` (ours, stdio servers) lets the envs of one process share a few processes of a
server that keeps no per-client state. ``auth`` (HTTP servers) is OAuth 2.1: see :mod:`aworld_gym.mcp.auth`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aworld_gym.base.errors import ConfigError
from aworld_gym.mcp.cache import ServerCache, server_cache
from aworld_gym.mcp.redact import SECRETS, SENSITIVE, named_secrets, redact, redact_url, url_secrets

Transport = Literal["stdio", "sse", "streamable-http", "inprocess"]
_TYPES = {"stdio": "stdio", "sse": "sse", "streamable-http": "streamable-http", "streamable_http": "streamable-http",
          "http": "streamable-http", "streamableHttp": "streamable-http", "inprocess": "inprocess"}  # fmt: skip
_KNOWN_KEYS = {"type", "command", "args", "env", "cwd", "url", "headers", "timeout", "sse_read_timeout",
               "reset_tool", "server", "disabled", "description", "share_session", "pool", "share", "socket",
               "max_connections",
               "tool_prefix", "allow_tools", "elicitation", "sampling", "roots", "auth", "cache"}  # fmt: skip


@dataclass(frozen=True)
class ServerSpec:
    """One MCP server to connect to.

    Attributes:
        name: the key in ``mcpServers``; used to qualify clashing tool names.
        type: transport.
        command, args, env, cwd: how to launch a stdio server.
        url, headers: where to reach an HTTP (``streamable-http`` or ``sse``) server.
        auth: OAuth for an HTTP server (:class:`~aworld_gym.mcp.auth.AuthConfig`, from the entry's ``"auth"``
            object), or an ``httpx2.Auth`` (or a factory of one) given by a Python caller.
        timeout: per-call timeout in seconds for this server's tools (``None``: the hub's default).
        sse_read_timeout: how long an SSE stream may stay silent.
        server: an in-process server object.
        reset_tool: a tool called at every env reset (hidden from the agent).
        share_session: (ours, HTTP servers) every env on the same event loop shares one MCP session; only for
            servers that tell envs apart by the per-call ``_meta`` (aworld-gym's own servers do).
        pool: (ours, stdio servers) the hubs on one event loop share at most this many processes of the server
            (``"share": true`` means 1); each process serves many hubs over one MCP session, a new hub goes to the
            least-loaded one, and they start lazily and stop with the last hub. ``None`` (the default): every hub
            starts its own process, which stateful servers need. Only for servers that keep no per-client state
            (or tell envs apart by the per-call ``_meta``).
        max_connections: (ours, HTTP servers) the HTTP client's connections to the server, and idle ones
            kept alive (``None``, the default: no cap, a connection per call in flight, each one open file while
            open; httpx's own default, 100, capped a shared session's calls in flight silently). A number caps the
            calls in flight per session at it; more envs than that sharing one session is said once.
        tool_prefix: (ours) every tool of this server is exposed as ``<prefix>__<tool>`` (e.g. a remote gateway's
            tools beside the env's own, which keep their names).
        allow_tools: (ours) glob patterns of this server's own tool names that are exposed (``None``: all).
        capabilities: (ours) this server's own ``elicitation`` / ``sampling`` / ``roots`` settings, which win over
            the env's (checked when the hub is made; see :mod:`aworld_gym.mcp.capabilities`).
        cache: (ours) this server's record/replay mode, state scope and identity (the entry's ``"cache"``: a mode,
            or ``{"mode", "scope", "id"}``; see :mod:`aworld_gym.mcp.cache`); ``None``: the env's default.
    """

    name: str
    type: Transport
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # repr=False: secrets live here
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout: float | None = None
    sse_read_timeout: float | None = None
    server: Any = None
    reset_tool: str | None = None
    share_session: bool = False
    pool: int | None = None
    socket: str | None = None
    max_connections: int | None = None
    tool_prefix: str | None = None
    allow_tools: tuple[str, ...] | None = None
    capabilities: Mapping[str, Any] = field(default_factory=dict, repr=False)  # may hold an API key: no repr
    auth: Any = field(default=None, repr=False)  # OAuth (aworld_gym.mcp.auth): holds secrets, no repr
    cache: ServerCache | None = None

    def __post_init__(self) -> None:
        SECRETS.add(self.secret_values())  # hidden in any text that leaves the process from now on

    def secret_values(self) -> list[str]:
        """The secret values of this server entry (URL userinfo and query values, sensitive headers, env values and
        flags, a sampling API key, OAuth literals): see :mod:`aworld_gym.mcp.redact`."""
        found = url_secrets(self.url or "")
        for name, value in {**dict(self.headers or {}), **dict(self.env or {})}.items():
            found += named_secrets(str(name), str(value))
        args = list(self.args)
        for i, arg in enumerate(args):
            flag, eq, value = arg.partition("=")
            if eq and flag.startswith("-"):
                found += named_secrets(flag, value)
            elif arg.startswith("-") and i + 1 < len(args) and SENSITIVE.search(arg):
                found += named_secrets(arg, args[i + 1])
        sampling = self.capabilities.get("sampling") if isinstance(self.capabilities, Mapping) else None
        if isinstance(sampling, Mapping) and sampling.get("api_key"):
            found.append(str(sampling["api_key"]))
        idp = getattr(self.auth, "idp", None)
        for holder, name in ((self.auth, "client_secret"), (self.auth, "private_key"), (idp, "id_token"),
                             (idp, "client_secret")):  # fmt: skip
            literal = getattr(getattr(holder, name, None), "value", None)  # an OAuth Secret given as a literal
            if isinstance(literal, str):
                found.append(literal)
        return found

    def __repr__(self) -> str:
        where = f"url={redact_url(self.url)!r}" if self.url else f"command={self.command!r}, args={list(self.args)!r}"
        return redact(f"ServerSpec(name={self.name!r}, type={self.type!r}, {where})")

    def where(self) -> str:
        """Where the server is, as messages may show it (a URL without its secrets, or the command line)."""
        if self.type == "stdio":
            return redact(f"command {self.command!r} {list(self.args)}")
        if self.type == "inprocess":
            return "in-process server"
        return f"url {redact_url(self.url)!r}"


def _is_server_object(obj: Any) -> bool:
    from mcp.server import Server
    from mcp.server.mcpserver import MCPServer

    return isinstance(obj, Server | MCPServer)


def parse_mcp_config(
    config: Mapping[str, Any] | str | Path | None = None, servers: Mapping[str, Any] | None = None
) -> list[ServerSpec]:
    """Turn an ``mcp_config`` (dict, JSON text or a JSON file path) plus in-process servers into specs."""
    raw = _load(config)
    entries = raw.get("mcpServers", raw.get("mcp_servers"))
    if entries is None:
        if raw:
            raise ConfigError('mcp_config must have an "mcpServers" object: {"mcpServers": {"name": {...}}}')
        entries = {}
    if not isinstance(entries, Mapping):
        raise ConfigError('"mcpServers" must map server names to server objects')
    specs = [_spec(name, entry) for name, entry in entries.items() if not _disabled(entry)]
    for name, obj in (servers or {}).items():
        obj = _resolve_factory(obj)
        if not _is_server_object(obj):
            raise ConfigError(f"servers[{name!r}] must be an MCPServer or mcp.server.Server, got {type(obj).__name__}")
        specs.append(ServerSpec(name=name, type="inprocess", server=obj))
    names = [s.name for s in specs]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise ConfigError(f"server names must be unique; repeated: {sorted(dupes)}")
    if not specs:
        raise ConfigError("no MCP servers configured: pass mcp_config={'mcpServers': {...}} or servers={...}")
    return specs


def _resolve_factory(obj: Any) -> Any:
    """Call a server factory (a callable that is not itself a server object)."""
    if callable(obj) and not _is_server_object(obj) and not isinstance(obj, type | Mapping):
        return obj()
    return obj


def _disabled(entry: Any) -> bool:
    return isinstance(entry, Mapping) and bool(entry.get("disabled"))


def _load(config: Mapping[str, Any] | str | Path | None) -> Mapping[str, Any]:
    if config is None:
        return {}
    if isinstance(config, Mapping):
        return config
    if isinstance(config, Path) or (isinstance(config, str) and not config.lstrip().startswith("{")):
        path = Path(config).expanduser()
        if not path.is_file():
            raise ConfigError(f"mcp_config file {str(path)!r} does not exist")
        config = path.read_text(encoding="utf-8")
    try:
        data = json.loads(config)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"mcp_config is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, Mapping):
        raise ConfigError("mcp_config must be a JSON object")
    return data


def _spec(name: str, entry: Any) -> ServerSpec:
    if not isinstance(name, str) or not name:
        raise ConfigError("server names must be non-empty strings")
    entry = _resolve_factory(entry)
    if _is_server_object(entry):
        return ServerSpec(name=name, type="inprocess", server=entry)
    if not isinstance(entry, Mapping):
        raise ConfigError(f"mcpServers[{name!r}] must be an object, got {type(entry).__name__}")
    unknown = set(entry) - _KNOWN_KEYS
    if unknown:
        raise ConfigError(f"mcpServers[{name!r}]: unknown keys {sorted(unknown)}; known: {sorted(_KNOWN_KEYS)}")
    kind = entry.get("type") or ("inprocess" if entry.get("server") is not None else "stdio")
    if kind not in _TYPES:
        raise ConfigError(f"mcpServers[{name!r}]: type {kind!r} is not one of stdio, sse, streamable-http")
    kind = _TYPES[kind]
    if entry.get("auth") is not None and kind not in ("sse", "streamable-http"):
        raise ConfigError(f"mcpServers[{name!r}]: 'auth' (OAuth) is for HTTP servers (sse, streamable-http); a {kind} "
                          "server gets credentials through its 'env'")  # fmt: skip
    timeout = _positive(name, "timeout", entry.get("timeout"))
    common: dict[str, Any] = {
        "name": name,
        "type": kind,
        "timeout": timeout,
        "sse_read_timeout": _positive(name, "sse_read_timeout", entry.get("sse_read_timeout")),
        "reset_tool": entry.get("reset_tool"),
        "share_session": bool(entry.get("share_session", False)),
        "pool": _pool(name, kind, entry),
        "max_connections": _connections(name, kind, entry),
        "tool_prefix": _prefix(name, entry.get("tool_prefix")),
        "allow_tools": _patterns(name, entry.get("allow_tools")),
        "capabilities": {k: entry[k] for k in ("elicitation", "sampling", "roots") if k in entry},
        "cache": server_cache(name, entry.get("cache")),
    }
    if kind == "stdio":
        command = entry.get("command")
        if not isinstance(command, str) or not command:
            raise ConfigError(f"mcpServers[{name!r}]: a stdio server needs a 'command' (e.g. \"python\")")
        args = entry.get("args") or []
        if not isinstance(args, list | tuple) or not all(isinstance(a, str) for a in args):
            raise ConfigError(f"mcpServers[{name!r}]: 'args' must be a list of strings")
        env = entry.get("env") or {}
        if not isinstance(env, Mapping):
            raise ConfigError(f"mcpServers[{name!r}]: 'env' must be an object of strings")
        return ServerSpec(
            command=command,
            args=tuple(args),
            env={str(k): str(v) for k, v in env.items()},
            cwd=entry.get("cwd"),
            **common,
        )
    if kind == "inprocess":
        server = _resolve_factory(entry.get("server"))
        if not _is_server_object(server):
            raise ConfigError(f"mcpServers[{name!r}]: an inprocess server needs 'server': an MCPServer object")
        return ServerSpec(server=server, **common)
    url = entry.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError(f"mcpServers[{name!r}]: a {kind} server needs an http(s) 'url'")
    headers = entry.get("headers") or {}
    if not isinstance(headers, Mapping):
        raise ConfigError(f"mcpServers[{name!r}]: 'headers' must be an object of strings")
    socket = entry.get("socket")
    if socket is not None and (not isinstance(socket, str) or kind != "streamable-http"):
        raise ConfigError(f"mcpServers[{name!r}]: 'socket' (a Unix socket path) is for streamable-http servers")
    return ServerSpec(url=url, headers={str(k): str(v) for k, v in headers.items()}, socket=socket,
                      auth=_auth(name, kind, entry, headers), **common)  # fmt: skip


def _auth(name: str, kind: str, entry: Mapping[str, Any], headers: Mapping[str, Any]) -> Any:
    """The entry's ``"auth"`` (OAuth), checked; ``None`` when absent."""
    value = entry.get("auth")
    if value is None:
        return None
    if entry.get("socket") is not None:
        raise ConfigError(f"mcpServers[{name!r}]: 'auth' and 'socket' do not go together (a Unix socket's file "
                          "permissions are its authentication)")  # fmt: skip
    if any(str(k).lower() == "authorization" for k in headers):
        raise ConfigError(f"mcpServers[{name!r}]: give 'auth' (OAuth) or an 'Authorization' header, not both")
    from aworld_gym.mcp.auth import parse_auth

    return parse_auth(name, kind, value)


def _connections(name: str, kind: str, entry: Mapping[str, Any]) -> int | None:
    """The ``max_connections`` of an HTTP server entry, checked; ``None`` when absent (no cap)."""
    value = entry.get("max_connections")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"mcpServers[{name!r}]: 'max_connections' must be an integer >= 1 (the most connections "
                          f"to this server at once, per session), got {value!r}")  # fmt: skip
    if kind not in ("sse", "streamable-http"):
        raise ConfigError(f"mcpServers[{name!r}]: 'max_connections' is for HTTP servers (this one is {kind})")
    return value


def _pool(name: str, kind: str, entry: Mapping[str, Any]) -> int | None:
    """The ``pool`` size of a server entry (``"share": true`` is ``"pool": 1``); ``None`` when not pooled."""
    pool, share = entry.get("pool"), entry.get("share")
    if share is not None and not isinstance(share, bool):
        raise ConfigError(f"mcpServers[{name!r}]: 'share' must be true or false, got {share!r}")
    if pool is not None and share:
        raise ConfigError(f"mcpServers[{name!r}]: give 'pool' (a number of processes) or 'share', not both")
    key = "pool" if pool is not None else "share"
    if share:
        pool = 1
    if pool is None:
        return None
    if isinstance(pool, bool) or not isinstance(pool, int) or pool < 1:
        raise ConfigError(
            f"mcpServers[{name!r}]: 'pool' must be an integer >= 1 (the most processes of this server that the envs "
            f"of one process share), got {pool!r}"
        )
    if kind != "stdio":
        hint = "; an HTTP server is shared with 'share_session': true" if kind in ("sse", "streamable-http") else ""
        raise ConfigError(f"mcpServers[{name!r}]: {key!r} is for stdio servers (this one is {kind}){hint}")
    return pool


MAX_SECONDS = 1_000_000.0  # about 11.6 days: past it a timeout means "never", which none of ours may


def seconds(value: Any, where: str) -> float:
    """``value`` as a number of seconds, or a :class:`ConfigError` naming ``where``: a finite number above 0 and at
    most :data:`MAX_SECONDS`. ``NaN`` (which compares false with every bound: a ``NaN`` timeout abandoned every
    call at once), infinity, 0, negatives, booleans, strings and huge numbers are refused.

    Args:
        value: The configured value.
        where: What it configures, for the error (e.g. ``mcpServers['gaia']: 'timeout'``).
    """
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where} must be a positive number of seconds, got {type(value).__name__} {shown}")
    try:
        number = float(value)
    except OverflowError:  # an int past float's range
        number = math.inf
    if not math.isfinite(number) or not 0 < number <= MAX_SECONDS:
        raise ConfigError(f"{where} must be a positive number of seconds, at most {MAX_SECONDS:g}; got {shown}")
    return number


def count(value: Any, where: str, least: int = 1) -> int:
    """``value`` as a whole number of at least ``least``, or a :class:`ConfigError` naming ``where`` (a float, even
    a whole one, a boolean or a string is refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ConfigError(f"{where} must be a whole number of at least {least}, got {type(value).__name__} {shown}")
    return value


def _positive(name: str, key: str, value: Any) -> float | None:
    return None if value is None else seconds(value, f"mcpServers[{name!r}]: {key!r}")


def _prefix(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,31}", value):
        raise ConfigError(f"mcpServers[{name!r}]: 'tool_prefix' must be a short name (letters, digits, _ or -)")
    return value


def _patterns(name: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"mcpServers[{name!r}]: 'allow_tools' must be a list of tool names or glob patterns")
    return tuple(value)
