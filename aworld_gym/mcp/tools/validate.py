"""Argument validation against a tool's JSON schema, with a fast path for the flat schemas most servers publish.

``jsonschema`` costs ~20 µs per call even for ``{}``. Most MCP tool schemas (every ``MCPServer`` tool with
plain typed parameters) are an object of primitive-typed properties plus ``required``; those are checked here
directly, with the same messages ``jsonschema`` gives. Anything richer (``anyOf``, ``enum``, ``items``, bounds,
``$ref``...) goes to ``jsonschema``.

A schema that cannot be checked here is left to the server: one ``jsonschema`` rejects or cannot compile
(:func:`make_validator` returns ``None``), and one whose check fails while running (a ``$ref`` that recurses
forever, a reference that does not resolve: the check raises :class:`Unvalidatable`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Validator = Callable[[dict[str, Any]], list[str]]

_ANNOTATIONS = {"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly"}
_TOP = {"type", "properties", "required", "title", "description", "additionalProperties", "$schema"}
_KINDS = frozenset({"string", "integer", "number", "boolean", "array", "object", "null"})


class Unvalidatable(Exception):
    """A schema whose check failed while running (not the arguments' fault): the call is left to the server."""


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
    if (
        not isinstance(props, Mapping)
        or not isinstance(required, list)
        or not all(isinstance(r, str) for r in required)
    ):
        return None
    types: dict[str, tuple[str, ...]] = {}
    for name, sub in props.items():
        if not isinstance(sub, Mapping) or set(sub) - _ANNOTATIONS - {"type"} or "type" not in sub:
            return None
        kinds = sub["type"] if isinstance(sub["type"], list) else [sub["type"]]
        if not all(isinstance(k, str) and k in _KINDS for k in kinds):  # an unknown type: jsonschema decides
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


def _path_key(error: Any) -> list[tuple[int, int, str]]:
    """Sort key of a ``jsonschema`` error by its path (indices and names may mix: kept comparable)."""
    return [(0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in error.path]


def make_validator(schema: Mapping[str, Any]) -> Validator | None:
    """A function returning the error messages for ``args`` (empty when valid); ``None`` for a schema that cannot
    be checked here (invalid, or anything ``jsonschema`` raises on): the server validates. The function raises
    :class:`Unvalidatable` when the check itself fails (e.g. a ``$ref`` that recurses forever)."""
    try:
        fast = _fast(schema)
    except (TypeError, ValueError, RecursionError):  # e.g. an unhashable ``type``
        fast = None
    if fast is not None:
        return fast
    import jsonschema

    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        validator = cls(schema)
    except Exception:  # noqa: BLE001 - SchemaError, RecursionError, a bad $schema...: let the server validate
        return None

    def check(args: dict[str, Any]) -> list[str]:
        try:
            errors = sorted(validator.iter_errors(args), key=_path_key)
        except Exception as exc:  # noqa: BLE001 - RecursionError, an unresolvable $ref: the schema's fault
            raise Unvalidatable(f"{type(exc).__name__}: {exc}"[:200]) from None
        out = []
        for err in errors:
            where = ".".join(str(p) for p in err.path)
            out.append(f"{where}: {err.message}" if where else err.message)
        return out

    return check
