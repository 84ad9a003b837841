"""Argument validation against a tool's JSON schema, with a fast path for the flat schemas most servers publish.

``jsonschema`` costs ~20 µs per call even for ``{}``. Most MCP tool schemas (every ``MCPServer`` tool with
plain typed parameters) are an object of primitive-typed properties plus ``required``; those are checked here
directly, with the same messages ``jsonschema`` gives. Anything richer (``anyOf``, ``enum``, ``items``, bounds,
``$ref``...) goes to ``jsonschema``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Validator = Callable[[dict[str, Any]], list[str]]

_ANNOTATIONS = {"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly"}
_TOP = {"type", "properties", "required", "title", "description", "additionalProperties", "$schema"}


def _is(kind: str, value: Any) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    if kind == "null":
        return value is None
    return False


def _fast(schema: Mapping[str, Any]) -> Validator | None:
    """A validator for flat schemas, or ``None`` when the schema needs full JSON Schema."""
    if set(schema) - _TOP or schema.get("type", "object") != "object":
        return None
    props = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(props, Mapping) or not isinstance(required, list):
        return None
    types: dict[str, tuple[str, ...]] = {}
    for name, sub in props.items():
        if not isinstance(sub, Mapping) or set(sub) - _ANNOTATIONS - {"type"} or "type" not in sub:
            return None
        kinds = sub["type"] if isinstance(sub["type"], list) else [sub["type"]]
        if not all(isinstance(k, str) for k in kinds):
            return None
        types[name] = tuple(kinds)

    def check(args: dict[str, Any]) -> list[str]:
        errors = [f"{k!r} is a required property" for k in required if k not in args]
        for name, value in args.items():
            kinds = types.get(name)
            if kinds is not None and not any(_is(k, value) for k in kinds):
                shown = kinds[0] if len(kinds) == 1 else list(kinds)
                errors.append(f"{name}: {value!r} is not of type {shown!r}")
        return errors

    return check


def make_validator(schema: Mapping[str, Any]) -> Validator | None:
    """A function returning the error messages for ``args`` (empty when valid); ``None`` for a broken schema."""
    fast = _fast(schema)
    if fast is not None:
        return fast
    import jsonschema

    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        validator = cls(schema)
    except jsonschema.SchemaError:
        return None  # a server with a broken schema: let the server validate

    def check(args: dict[str, Any]) -> list[str]:
        out = []
        for err in sorted(validator.iter_errors(args), key=lambda e: list(e.path)):
            where = ".".join(str(p) for p in err.path)
            out.append(f"{where}: {err.message}" if where else err.message)
        return out

    return check
