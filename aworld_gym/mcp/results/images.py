"""Images in tool results: which the model is shown, within which limits, and the text that stands for each.

An image content block, or an embedded blob resource of an ``image/*`` type, becomes a :class:`ToolImage` (its
bytes, for an image part of the chat history) when the hub's ``tool_images`` allows it, and always leaves a
bracketed line in the result's text, so that a text-only reader still sees that an image was there::

    [image: image/png, 4035 bytes]                                   shown
    [image: image/png, 9000000 bytes, not shown: larger than ...]     dropped, with the reason
    [image: image/png, about 4035 bytes]                             tool_images=False (text only)

The format is read from the bytes (PNG, JPEG, GIF or WebP); an image in another format (SVG, BMP, TIFF) or with
broken base64 is not shown, and the line says why.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from aworld_gym.base.errors import ConfigError
from aworld_gym.base.images import VISION_FORMATS, image_mime
from aworld_gym.mcp.results.sanitize import clean_field


@dataclass(frozen=True)
class ImageLimits:
    """Which images of tool results the model is shown (``tool_images=`` of the hub and of MCP envs).

    Attributes:
        enabled: show images at all; ``False`` keeps every image a text placeholder (for text-only models).
        max_image_bytes: an image larger than this (decoded) is not shown; its line says so.
        max_images_per_step: the most images shown per step, over all its tool calls in call order; the rest are
            not shown and their lines say so.
        max_step_image_bytes: the most image bytes shown per step, counted the same way.
    """

    enabled: bool = True
    max_image_bytes: int = 5_000_000
    max_images_per_step: int = 4
    max_step_image_bytes: int = 10_000_000


NO_IMAGES = ImageLimits(enabled=False)


def image_limits(value: bool | Mapping[str, Any] | ImageLimits | None, name: str = "tool_images") -> ImageLimits:
    """``tool_images`` as given (``True``/``False``, a dict of :class:`ImageLimits` fields, or one) as limits;
    errors name the setting ``name``.

    Raises:
        ConfigError: an unknown key, or a limit that is not a positive integer.
    """
    if value is None or isinstance(value, bool):
        return ImageLimits(enabled=value is not False)
    if isinstance(value, ImageLimits):
        limits = value
    elif isinstance(value, Mapping):
        known = {f.name for f in fields(ImageLimits)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ConfigError(f"{name}: unknown key(s) {unknown}; known: {sorted(known)}")
        limits = ImageLimits(**value)
    else:
        raise ConfigError(f"{name} must be True, False or a dict of limits, not {type(value).__name__}")
    for f in fields(ImageLimits):
        v = getattr(limits, f.name)
        if f.name != "enabled" and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ConfigError(f"{name}: {f.name} must be a positive integer, not {v!r}")
    return limits


@dataclass(frozen=True)
class ToolImage:
    """An image of a tool result that the model is shown.

    Attributes:
        data: the image's bytes.
        mime_type: its type, read from the bytes (``image/png``, ``image/jpeg``, ``image/gif``, ``image/webp``).
        line: the line standing for it in the result's text (replaced by a note if the step's limits drop it).
    """

    data: bytes
    mime_type: str
    line: str

    def record(self) -> dict[str, Any]:
        """What ``ToolResult.to_dict`` keeps of it (never the bytes)."""
        return {"mime_type": self.mime_type, "bytes": len(self.data)}


def encoded_size(data: str) -> int:
    """How many bytes base64 text decodes to (exactly, for base64 without line breaks)."""
    return len(data) * 3 // 4 - (2 if data.endswith("==") else 1 if data.endswith("=") else 0)


def read_image(what: str, mime: str | None, data: str, limits: ImageLimits | None) -> tuple[str, ToolImage | None]:
    """The line for an image (``what``: ``"image"`` or ``"image resource <uri>"``) and, if it is shown, its bytes.

    Args:
        what: how the line names it.
        mime: the MIME type the server declared.
        data: its base64 text.
        limits: the hub's image limits (``None``: text only).
    """
    declared = clean_field(mime) if mime else "unknown type"  # a server's free text: one bounded line
    if limits is None or not limits.enabled:
        return f"[{what}: {declared}, about {encoded_size(data)} bytes]", None
    if encoded_size(data) > limits.max_image_bytes:  # too large: not even decoded
        why = f"larger than the {limits.max_image_bytes}-byte limit per image (max_image_bytes)"
        return f"[{what}: {declared}, about {encoded_size(data)} bytes, not shown: {why}]", None
    try:
        raw = base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        return f"[{what}: {declared}, not shown: its data is not valid base64]", None
    if len(raw) > limits.max_image_bytes:
        why = f"larger than the {limits.max_image_bytes}-byte limit per image (max_image_bytes)"
        return f"[{what}: {declared}, {len(raw)} bytes, not shown: {why}]", None
    found = image_mime(raw)
    if found is None:
        why = f"not an image format vision models take ({VISION_FORMATS})"
        return f"[{what}: {declared}, {len(raw)} bytes, not shown: {why}]", None
    line = f"[{what}: {found}, {len(raw)} bytes]"
    return line, ToolImage(raw, found, line)


def over_step_limit(image: ToolImage, count: int, total: int, limits: ImageLimits) -> str | None:
    """Why ``image`` is not shown when ``count`` images of ``total`` bytes are shown already in its step."""
    if count >= limits.max_images_per_step:
        n = limits.max_images_per_step
        return f"this step shows at most {n} image{'s' if n != 1 else ''} (max_images_per_step)"
    if total + len(image.data) > limits.max_step_image_bytes:
        return f"this step shows at most {limits.max_step_image_bytes} image bytes (max_step_image_bytes)"
    return None
