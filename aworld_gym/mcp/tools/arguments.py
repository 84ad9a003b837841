"""Checks on an agent's tool-call arguments before they are sent: can they be sent at all, and do they fit the tool.

Two kinds of failure, both answered to the model as an observation (the session is never touched):

- ``invalid_arguments``: the arguments cannot travel as JSON-RPC at all: a lone surrogate (``json.loads`` turns
  the model text ``"\\ud800"`` into one, and the transport dies encoding it), ``NaN``/``Infinity``, nesting deeper
  than ``max_depth``, a key that is not a string, a value that is not a JSON type, or arguments that are not an
  object;
- ``bad_arguments`` / ``too_large``: valid JSON that does not fit the tool's schema, or is too long.

A schema that cannot be checked here (one ``jsonschema`` rejects, a ``$ref`` that recurses forever, a type it does
not know) is left to the server: its calls are sent unchecked, with a warning, once.

The common case costs one JSON encoding (that the size check needs anyway) and an ``isascii`` test; the walk over
the arguments runs only when the encoded text could hide a nested object or too deep a nesting.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aworld_gym.mcp.results import BAD_ARGUMENTS, INVALID_ARGUMENTS, TOO_LARGE
from aworld_gym.mcp.tools.listing import shown_name, warn_once
from aworld_gym.mcp.tools.validate import Unvalidatable, make_validator

if TYPE_CHECKING:
    from aworld_gym.mcp.tools.namespace import RoutedTool

# One encoder for every call: ``json.dumps`` with non-default options builds a new encoder each time.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTAINERS = (dict, list, tuple)  # a tuple, not ``dict | list | tuple``: isinstance is faster with it
_JSON_TYPES = "strings, numbers, booleans, null, arrays and objects"


def check_arguments(tool: RoutedTool, args: Any, *, max_chars: int, max_depth: int) -> tuple[str, str] | None:
    """Why ``args`` cannot be sent to ``tool``, as ``(error kind, message)``; ``None`` when they can.

    Args:
        tool: the routed tool (its exposed name, schema and cached validator).
        args: the call's arguments.
        max_chars: the longest JSON text of arguments accepted (``too_large`` beyond).
        max_depth: the deepest nesting of objects and arrays accepted, the arguments object counting as 1.
    """
    text, problem = _encode(args, max_depth)
    if problem is not None:
        return INVALID_ARGUMENTS, f"the arguments of {tool.exposed!r} cannot be sent: {problem}"
    if len(text) > max_chars:
        return TOO_LARGE, (
            f"the arguments of {tool.exposed!r} are {len(text)} characters long; the limit is {max_chars}. "
            "Send less data per call."
        )
    props = tool.schema.get("properties")
    if isinstance(props, Mapping) and tool.schema.get("additionalProperties") is not True:
        unknown = [k for k in args if k not in props]
        if unknown:
            expected = _few(list(props), quote=False) or "no arguments"
            return BAD_ARGUMENTS, f"{tool.exposed!r} got unknown argument(s) {_few(unknown)}; expected: {expected}."
    if tool.validator is None:
        tool.validator = make_validator(tool.schema) or False
    if tool.validator is False:
        return None
    try:
        errors = tool.validator(args)
    except Unvalidatable as exc:  # the schema's fault, not the model's: the server checks the arguments
        tool.validator = False
        server = tool.conn.spec.name
        why = f"cannot be checked here ({exc}); its calls are checked by the server only"
        warn_once(server, tool.name, f"MCP server {server!r}: the input schema of tool {shown_name(tool.name)} {why}")
        return None
    if errors:
        return BAD_ARGUMENTS, f"invalid arguments for {tool.exposed!r}: " + "; ".join(errors[:5])
    return None


def _few(names: list[Any], shown: int = 8, chars: int = 60, *, quote: bool = True) -> str:
    """Argument names as an error shows them: at most ``shown``, each cut to ``chars`` characters, and a count."""
    cut = [str(n)[:chars] for n in names[:shown]]
    text = ", ".join(map(repr, cut) if quote else cut)
    return text + (f" and {len(names) - shown} more" if len(names) > shown else "")


def json_problem(args: Any, max_depth: int = 32) -> str | None:
    """What makes ``args`` impossible to send as a JSON object, said for the model; ``None`` when nothing does.

    Args:
        args: a tool call's arguments.
        max_depth: the deepest nesting of objects and arrays accepted, the arguments object counting as 1.
    """
    return _encode(args, max_depth)[1]


def _encode(args: Any, max_depth: int) -> tuple[str, str | None]:
    """(the JSON text of ``args``, what makes them impossible to send or ``None``)."""
    if not isinstance(args, dict):
        return "", f"the arguments must be a JSON object ({{...}}), not {_kind(args)}."
    try:
        text = _ENCODER.encode(args)
        if not text.isascii():
            text.encode("utf-8")  # raises for a lone surrogate (a UnicodeEncodeError is a ValueError)
    except (TypeError, ValueError, RecursionError) as exc:
        return "", find_problem(args, max_depth) or f"they are not valid JSON ({type(exc).__name__}: {exc})."
    nested = False
    for key, value in args.items():
        if not isinstance(key, str):  # the encoder would have turned 1 into "1" without a word
            return text, find_problem(args, max_depth)
        if isinstance(value, _CONTAINERS):
            nested = True
    if nested:
        braces = text.count("{")
        if (braces > 1 or braces + text.count("[") > max_depth) and _suspect(args, max_depth):
            return text, find_problem(args, max_depth)
    return text, None


def _suspect(args: dict[str, Any], max_depth: int) -> bool:
    """Whether ``args`` hold what the encoder lets through: a key that is not a string, or too deep a nesting."""
    try:
        return _keys_or_depth(args, 1, max_depth)
    except RecursionError:
        return True


def _keys_or_depth(value: dict[str, Any] | list[Any] | tuple[Any, ...], depth: int, max_depth: int) -> bool:
    if depth > max_depth:
        return True
    if isinstance(value, dict):
        for key in value:
            if type(key) is not str and not isinstance(key, str):
                return True
        items = value.values()
    else:
        items = value
    for item in items:  # noqa: SIM110 - a plain loop is faster than any() over a generator
        if isinstance(item, _CONTAINERS) and _keys_or_depth(item, depth + 1, max_depth):
            return True
    return False


def find_problem(value: Any, max_depth: int = 32) -> str | None:
    """Walk ``value`` and describe the first thing JSON-RPC cannot carry, with where it is; ``None`` if nothing.

    Args:
        value: the arguments (or any value).
        max_depth: the deepest nesting of objects and arrays accepted, ``value`` itself counting as 1.
    """
    try:
        return _walk(value, "", 0, max_depth)
    except RecursionError:
        return f"they are nested too deeply (the limit is {max_depth} levels). Send a flatter structure."


def _walk(value: Any, path: str, depth: int, max_depth: int) -> str | None:
    if isinstance(value, str):
        return _surrogate(value, f"the string at {path or 'the top'}")
    if value is None or isinstance(value, bool | int):
        return None
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        shown = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")  # as json.loads reads them
        return f'{_at(path)} is {shown}, which JSON cannot carry. Send a finite number, or the string "{shown}".'
    if isinstance(value, dict | list | tuple):
        depth += 1
        if depth > max_depth:
            return (
                f"they are nested more than {max_depth} levels deep (at {_short(path)}). "
                "Send a flatter structure, e.g. a list of objects, or the data as one JSON string."
            )
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    return f"{_at(path)} has the key {key!r} ({type(key).__name__}); JSON object keys must be strings."
                found = _surrogate(key, f"a key of {_at(path)}") or _walk(item, _join(path, key), depth, max_depth)
                if found:
                    return found
        else:
            for i, item in enumerate(value):
                found = _walk(item, f"{path}[{i}]", depth, max_depth)
                if found:
                    return found
        return None
    return f"{_at(path)} is of type {type(value).__name__}, which is not a JSON value. Send only {_JSON_TYPES}."


def _surrogate(text: str, where: str) -> str | None:
    m = _SURROGATE.search(text)
    if m is None:
        return None
    return (
        f"{where} holds a lone surrogate ({m.group()!a} at index {m.start()}), half of a UTF-16 pair, which "
        "is not valid Unicode. Write the character itself, or escape it as a complete pair (e.g. \\ud83d\\ude00)."
    )


def _join(path: str, key: str) -> str:
    if not path and key.isidentifier():
        return key
    return f"{path}[{key!r}]" if path else repr(key)


def _at(path: str) -> str:
    return f"the value at {path}" if path else "the arguments object"


def _short(path: str, limit: int = 60) -> str:
    return path if len(path) <= limit else path[:limit] + "..."


def _kind(value: Any) -> str:
    """What a non-object value is, in JSON's words where it has some."""
    if value is None:
        return "null"
    for kind, name in ((bool, "a boolean"), (int | float, "a number"), (str, "a string"), (list | tuple, "an array")):
        if isinstance(value, kind):
            return name
    return f"a value of type {type(value).__name__}"
