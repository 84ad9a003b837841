"""What a tool call gives back: :class:`ToolResult`, its error kinds, and how MCP content becomes model text."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from aworld_gym.base.calls import ToolCall
from aworld_gym.mcp.results.images import ImageLimits, ToolImage, encoded_size, over_step_limit, read_image
from aworld_gym.mcp.results.sanitize import clean_field, clean_text

# Error kinds of a ToolResult (``None`` when the call succeeded).
UNKNOWN_TOOL = "unknown_tool"
BAD_ARGUMENTS = "bad_arguments"  # valid JSON that does not fit the tool's schema (missing, unknown, wrong type)
INVALID_ARGUMENTS = "invalid_arguments"  # arguments that cannot be sent at all (lone surrogate, NaN, too deep, ...)
TOO_LARGE = "too_large"
TOOL_ERROR = "tool_error"
TIMEOUT = "timeout"
SERVER_DIED = "server_died"
CACHE_MISS = "cache_miss"  # replay-strict: no result of the call was recorded (the server is never reached)
REFUSED = "refused"  # the env's guard refused the call (e.g. a navigation off the task's site)


@dataclass
class ToolResult:
    """The outcome of one tool call, as the env shows it to the model.

    Attributes:
        call: the call this answers.
        text: what the model sees (``"Error: ..."`` for a failed call), cut to the hub's ``max_output_chars``.
        error: the error kind (one of the constants of this module), ``None`` on success.
        server: the name of the server the call was routed to (``None`` for an unknown tool).
        latency_s: wall time of the call, checks included.
        truncated: whether ``text`` was cut.
        structured: the MCP ``structuredContent`` of the result, when the server sent one.
        images: its images that the model is shown (image parts after the tool messages; see
            :mod:`aworld_gym.mcp.results.images`); ``text`` has a line standing for each.
    """

    call: ToolCall
    text: str
    error: str | None = None
    server: str | None = None
    latency_s: float = 0.0
    truncated: bool = False
    structured: Any = None
    images: tuple[ToolImage, ...] = ()

    @property
    def is_error(self) -> bool:
        """Whether the call failed (in any way: routing, checks, transport or the tool itself)."""
        return self.error is not None

    def with_text(self, text: str) -> ToolResult:
        """A copy showing the model ``text`` instead (e.g. without run-dependent URLs; ``self`` when ``text`` is
        what it shows already); this result is not changed.

        Results are never changed after the hub returns them: an env that shows the model something else puts
        such a copy in its step's results (see :meth:`~aworld_gym.core.env.MCPEnv.acheck_task`).
        """
        return self if text == self.text else replace(self, text=text)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record (``info["tool_results"]``); ``"structured"`` only when the server sent some that the
        text does not already say (the SDK's ``{"result": value}`` wrapper of a typed return is left out)."""
        out = {
            "id": self.call.id,
            "name": self.call.name,
            "server": self.server,
            "text": self.text,
            "error": self.error,
            "latency_s": round(self.latency_s, 6),
            "truncated": self.truncated,
        }
        if self.structured is not None and not _echoes(self.structured, self.text):
            out["structured"] = self.structured
        if self.images:
            out["images"] = [image.record() for image in self.images]
        return out


def _echoes(structured: Any, text: str) -> bool:
    """Whether ``structured`` is only the ``{"result": value}`` wrapper of what ``text`` already shows."""
    if not isinstance(structured, dict) or len(structured) != 1 or "result" not in structured:
        return False
    value = structured["result"]
    if isinstance(value, str):
        return value == text
    return isinstance(value, int | float | bool) or value is None


def readable(message: str, limit: int = 300) -> str:
    """An error message fit for an observation: control characters (NUL, escapes, bells) removed, one or two
    lines, at most ``limit`` characters."""
    lines = [ln.strip() for ln in clean_text(str(message)).splitlines() if ln.strip()]
    text = " ".join(lines[:2])
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_error(exc: BaseException) -> str:
    """One readable line for an exception: a pydantic validation error (a malformed result) is summarized by its
    first problem and a count, not dumped."""
    errors = getattr(exc, "errors", None)
    if callable(errors) and type(exc).__name__ == "ValidationError":
        try:
            found = errors()
        except Exception:  # noqa: BLE001 - fall back to the plain text
            found = []
        if found:
            first = found[0]
            where = ".".join(str(x) for x in first.get("loc", ()))
            more = f" (and {len(found) - 1} more problems)" if len(found) > 1 else ""
            got = str(first.get("input", ""))[:80]
            return readable(f"the server's reply is not valid MCP: {where}: {first.get('msg', '')}; got {got}{more}")
    return readable(f"{type(exc).__name__}: {exc}")


def truncate(text: str, limit: int) -> tuple[str, bool]:
    """Cut ``text`` to ``limit`` characters and say so; returns (text, was_cut)."""
    if len(text) <= limit:
        return text, False
    note = f"\n[... output truncated: showing the first {limit} of {len(text)} characters]"
    return text[:limit] + note, True


def render_content(result: Any) -> str:
    """Render an MCP ``CallToolResult`` as text for the model (images as placeholders)."""
    return render_result(result, None)[0]


def render_result(result: Any, limits: ImageLimits | None) -> tuple[str, list[ToolImage]]:
    """An MCP ``CallToolResult`` as the model's text and the images it is shown (within ``limits``; ``None``:
    text only). Audio and non-image blobs stay placeholders with their type and size."""
    parts: list[str] = []
    images: list[ToolImage] = []
    for block in result.content or []:
        kind = getattr(block, "type", None)
        image = None
        if kind == "text":
            line = clean_text(block.text)
        elif kind in ("image", "audio"):
            mime, data = getattr(block, "mime_type", None), getattr(block, "data", "") or ""
            mime = clean_field(mime) if mime else None
            if kind == "image":
                line, image = read_image("image", mime, data, limits)
            else:
                line = f"[audio: {mime or 'unknown type'}, about {encoded_size(data)} bytes]"
        elif kind == "resource":
            line, image = _resource(block.resource, limits)
        elif kind == "resource_link":
            line = f"[resource link {clean_field(block.uri)}]"
        else:
            line = clean_text(str(block))
        parts.append(line)
        images += [image] if image is not None else []
    if not parts and getattr(result, "structured_content", None) is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts), images


def _resource(res: Any, limits: ImageLimits | None) -> tuple[str, ToolImage | None]:
    """An embedded resource: its text, an image (a blob of an ``image/*`` type), or a placeholder (other blobs)."""
    blob, uri = getattr(res, "blob", None), clean_field(res.uri)
    mime = clean_field(res.mime_type) if getattr(res, "mime_type", None) else None
    if blob is None:
        return clean_text(getattr(res, "text", None) or "") or f"[resource {uri}]", None
    if (mime or "").startswith("image/"):
        return read_image(f"image resource {uri}", mime, blob, limits)
    return f"[resource {uri}: {mime or 'unknown type'}, about {encoded_size(blob)} bytes]", None


def cap_images(results: Sequence[ToolResult], limits: ImageLimits) -> list[ToolResult]:
    """One step's results with the images past the step's limits dropped (in call order), each one's line in the
    text replaced by a note saying why; results without images are returned as they are."""
    out: list[ToolResult] = []
    count = total = 0
    for r in results:
        if not r.images:
            out.append(r)
            continue
        kept: list[ToolImage] = []
        text = r.text
        for image in r.images:
            why = over_step_limit(image, count, total, limits)
            if why is None:
                kept.append(image)
                count, total = count + 1, total + len(image.data)
                continue
            note = image.line[:-1] + f", not shown: {why}]"
            text = text.replace(image.line, note, 1) if image.line in text else f"{text}\n{note}"
        out.append(r if len(kept) == len(r.images) else replace(r, text=text, images=tuple(kept)))
    return out
