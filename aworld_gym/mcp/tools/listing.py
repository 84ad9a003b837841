"""A server's tool list, read defensively: what a hostile ``tools/list`` can no longer do to an env.

The SDK validates a ``tools/list`` result as a whole, so one malformed tool failed the whole server. Here the
result is fetched raw, page by page, and each tool is checked on its own, against the SDK's own wire model of the
negotiated protocol version, then:

- a malformed tool (no ``inputSchema``, a name that is not a string, a schema that is not an object or whose
  ``properties``/``required`` are not an object / a list of strings) is dropped with a one-line warning;
- a tool whose ``inputSchema`` nests deeper than :data:`MAX_SCHEMA_DEPTH` objects and arrays is dropped (no
  arguments the hub sends nest that deep; 120 objects once failed the whole server's listing);
- a name listed twice keeps its first definition (a warning says so);
- a description loses its control characters (other than tab and newline); one longer than
  :data:`MAX_DESCRIPTION_CHARS` is cut, with a note saying so;
- a schema whose JSON text is longer than :data:`MAX_SCHEMA_CHARS` loses its documentation (``description``,
  ``title``, ``examples``, ``$comment``); still too long, the tool is dropped.

Names no OpenAI ``tools=`` API accepts are renamed by the namespace (:func:`safe_names`), calls going to the
original name. Each warning is logged once per process, server and tool. The tools kept are handed to the SDK's
session, which checks structured results against their output schemas.

A ``notifications/tools/list_changed`` marks the connection; the hub has it re-list its tools between steps
(:meth:`~aworld_gym.mcp.transports.connection.Connection.relist`), never during one.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mcp import types
from pydantic import ValidationError

from aworld_gym.mcp.redact import module_logger

if TYPE_CHECKING:
    pass

MAX_DESCRIPTION_CHARS = 2_000
MAX_SCHEMA_CHARS = 16_000
MAX_SCHEMA_DEPTH = 64  # JSON objects and arrays, the schema itself counting as 1 (an object property costs 2)
MAX_PAGES = 100
RELIST_TIMEOUT_S = 30.0
LIST_CHANGED = "notifications/tools/list_changed"

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # control characters other than tab and newline
_VALID_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_INVALID_RUN = re.compile(r"[^a-zA-Z0-9_-]+")
_DOC_KEYS = frozenset({"description", "title", "examples", "$comment"})
_DATA_KEYS = frozenset({"enum", "const", "default"})  # values, not schemas: kept as they are
_NAMED_SCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_warned: set[tuple[str, str, str]] = set()
logger = module_logger(__name__)


async def list_tools(client: Any, server: str) -> list[types.Tool]:
    """Every page of ``client``'s ``tools/list``, each tool checked on its own (see the module docstring).

    Args:
        client: an entered ``mcp.Client``.
        server: the server's name, for the warnings.

    Raises:
        ValueError: the result holds no list of tools at all.
    """
    session = client.session
    version = getattr(session, "protocol_version", None) or "2025-11-25"
    items: list[Any] = []
    shell: dict[str, Any] = {}  # the first page's other fields: each tool is checked as a result of its own
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await fetch_page(client, cursor)
        if not isinstance(page, dict) or not isinstance(page.get("tools"), list):
            raise ValueError(f"its tools/list result holds no list of tools ({_kind(page)})")
        items.extend(page["tools"])
        shell = shell or {k: v for k, v in page.items() if k not in ("tools", "nextCursor")}
        cursor = page.get("nextCursor")
        if not isinstance(cursor, str) or not cursor:
            break
    tools = clean_tools(items, server, version, shell)
    absorb = getattr(session, "_absorb_tool_listing", None)  # the SDK's per-tool state (output schemas, headers)
    if absorb is not None:
        tools = list(absorb(types.ListToolsResult(tools=tools), complete=True).tools)
    return tools


async def fetch_page(client: Any, cursor: str | None) -> Any:
    """One raw ``tools/list`` result (a dict as the server sent it), stamped as the session stamps its requests."""
    session = client.session
    dispatcher, stamp = getattr(session, "_dispatcher", None), getattr(session, "_stamp", None)
    if dispatcher is None or stamp is None:  # an SDK without these seams: its own listing, validated as a whole
        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        return page.model_dump(by_alias=True, mode="json", exclude_none=True)
    data: dict[str, Any] = {"method": "tools/list"}
    if cursor is not None:
        data["params"] = {"cursor": cursor}
    opts: dict[str, Any] = {}
    stamp(data, opts)
    return await dispatcher.send_raw_request("tools/list", data.get("params"), opts)


def clean_tools(
    items: Sequence[Any], server: str, version: str = "2025-11-25", shell: dict[str, Any] | None = None
) -> list[types.Tool]:
    """The usable tools of a raw ``tools/list``: malformed ones and repeated names dropped, long descriptions cut,
    oversized schemas stripped of their documentation or dropped (each with a warning, once).

    Args:
        items: the ``tools`` of the result(s), as sent.
        server: the server's name, for the warnings.
        version: the session's protocol version (its wire model checks each tool).
        shell: the result's other fields (a result's own faults, e.g. a missing ``cacheScope``, are not the tools').
    """
    from mcp_types import methods

    out: list[types.Tool] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        name = item.get("name") if isinstance(item, dict) else None
        label = f"#{i + 1} ({shown_name(name)})" if name is not None else f"#{i + 1}"
        try:
            if not isinstance(item, dict):
                raise ValueError(f"it is {_kind(item)}, not an object")
            try:
                methods.validate_server_result("tools/list", version, {**(shell or {}), "tools": [item]})
            except ValidationError as exc:
                own = [e for e in exc.errors() if tuple(e["loc"][:2]) == ("tools", 0)]
                if own:
                    raise ValueError(_describe(own)) from None
            except (KeyError, ValueError):  # a version this SDK has no table for: the common model only
                pass
            tool = types.Tool.model_validate(item, by_name=False)
            problem = _schema_problem(tool.input_schema)
            if problem:
                raise ValueError(problem)
        except (ValidationError, ValueError) as exc:
            warn_once(server, label, f"MCP server {server!r}: tool {label} dropped: {why_refused(exc)}")
            continue
        if tool.name in seen:
            why = "twice: the first definition is kept"
            warn_once(server, tool.name, f"MCP server {server!r} lists the tool {shown_name(tool.name)} {why}")
            continue
        seen.add(tool.name)
        kept = _bounded(tool, server)
        if kept is not None:
            out.append(kept)
    return out


def _bounded(tool: types.Tool, server: str) -> types.Tool | None:
    """``tool`` with its description and schema within the caps; ``None`` when the schema cannot be."""
    update: dict[str, Any] = {}
    who = f"MCP server {server!r}: tool {shown_name(tool.name)}"
    description = tool.description or ""
    if _CONTROL.search(description):
        description = update["description"] = _CONTROL.sub("", description)
    if len(description) > MAX_DESCRIPTION_CHARS:
        cut = description[:MAX_DESCRIPTION_CHARS].rstrip()
        update["description"] = f"{cut} [description cut: {len(description)} characters]"
        warn_once(server, tool.name, f"{who}: its description ({len(description)} characters) is cut to "
                  f"{MAX_DESCRIPTION_CHARS}")  # fmt: skip
    try:
        size = _size(tool.input_schema)
        if size > MAX_SCHEMA_CHARS:
            schema = without_docs(tool.input_schema)
            smaller = _size(schema)
            if smaller > MAX_SCHEMA_CHARS:
                warn_once(server, tool.name, f"{who} dropped: its input schema is {size} characters of JSON ({smaller} "
                          f"without descriptions); the limit is {MAX_SCHEMA_CHARS}")  # fmt: skip
                return None
            update["input_schema"] = schema
            warn_once(server, tool.name, f"{who}: its input schema is {size} characters of JSON; its descriptions "
                      f"were removed ({smaller} left)")  # fmt: skip
    except (RecursionError, TypeError, ValueError) as exc:
        warn_once(server, tool.name, f"{who} dropped: its input schema cannot be encoded ({type(exc).__name__})")
        return None
    return tool.model_copy(update=update) if update else tool


def without_docs(schema: Any) -> Any:
    """``schema`` without its documentation keywords (``description``, ``title``, ``examples``, ``$comment``);
    property names, ``enum``, ``const`` and ``default`` values are kept as they are."""
    if isinstance(schema, list):
        return [without_docs(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DOC_KEYS and (key == "examples" or isinstance(value, str)):
            continue
        if key in _DATA_KEYS:
            out[key] = value
        elif key in _NAMED_SCHEMAS and isinstance(value, dict):
            out[key] = {name: without_docs(sub) for name, sub in value.items()}
        else:
            out[key] = without_docs(value)
    return out


def _schema_problem(schema: Any) -> str | None:
    """What makes an input schema unreadable at its top level (newer protocol versions check less of it)."""
    if not isinstance(schema, dict):
        return f"inputSchema is {_kind(schema)}, not an object"
    depth = nesting(schema, MAX_SCHEMA_DEPTH)
    if depth > MAX_SCHEMA_DEPTH:
        return f"inputSchema nests objects and arrays more than {MAX_SCHEMA_DEPTH} deep"
    props = schema.get("properties")
    if props is not None and (
        not isinstance(props, dict) or not all(isinstance(p, dict | bool) for p in props.values())
    ):
        return "inputSchema.properties is not an object of schemas"
    required = schema.get("required")
    if required is not None and (not isinstance(required, list) or not all(isinstance(r, str) for r in required)):
        return "inputSchema.required is not a list of names"
    return None


def nesting(value: Any, limit: int) -> int:
    """How deep ``value`` nests dicts and lists (a scalar is 0), counted without recursion and only up to
    ``limit + 1``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, dict | list):
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


def safe_names(names: Sequence[str]) -> dict[str, str]:
    """``{name: the name the agent sees}`` for one server's tools: a name OpenAI's ``tools=`` API accepts
    (``^[a-zA-Z0-9_-]{1,64}$``) is kept; any other is cleaned (runs of other characters become ``_``) and, when
    the clean name is empty, too long or taken, given a suffix from a hash of the original (deterministic)."""
    taken = {n for n in names if _VALID_NAME.fullmatch(n)}
    out: dict[str, str] = {}
    for name in names:
        if name in taken:
            out[name] = name
            continue
        base = _INVALID_RUN.sub("_", name).strip("_")
        if not base or len(base) > 64 or base in taken:
            digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
            base = f"{base[:55] or 'tool'}_{digest}"
        taken.add(base)
        out[name] = base
    return out


def warn_once(server: str, tool: str, message: str) -> None:
    """Log ``message`` as a warning, once per process for each server, tool and message."""
    key = (server, tool, message)
    if key in _warned:
        return
    if len(_warned) > 10_000:  # a server inventing new names at every listing must not grow this forever
        _warned.clear()
    _warned.add(key)
    logger.warning("%s", message)


def _size(schema: Any) -> int:
    return len(json.dumps(schema, ensure_ascii=False))


def _describe(errors: Sequence[Any]) -> str:
    """Pydantic errors as one line: the first (where and what), and how many more."""
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ())]
    if loc[:2] == ["tools", "0"]:
        loc = loc[2:]
    where = ".".join(loc)
    text = f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg", "invalid"))
    return text + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else "")


def why_refused(exc: BaseException) -> str:
    """One line for why a tool (or a listing) was refused: a pydantic error by its first problem."""
    if isinstance(exc, ValidationError):
        return _describe(exc.errors())
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _kind(value: Any) -> str:
    return "null" if value is None else f"a {type(value).__name__}"


def shown_name(name: Any) -> str:
    """``repr(name)``, at most 60 characters (for warnings)."""
    text = repr(name)
    return text if len(text) <= 60 else text[:57] + "..."
