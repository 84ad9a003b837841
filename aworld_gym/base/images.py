"""Images as vision models take them: the formats OpenAI-compatible endpoints accept, told by their first bytes.

Shared by the tool layer (which images of a tool result may be shown) and the episode (the data URLs of image
parts); the MIME type comes from the bytes, not from what a server declared.
"""

from __future__ import annotations

import base64

# The formats OpenAI-compatible vision endpoints take (OpenAI, vLLM, SGLang): PNG, JPEG, GIF and WebP.
VISION_FORMATS = "PNG, JPEG, GIF or WebP"
_EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}


def image_mime(data: bytes) -> str | None:
    """The MIME type of ``data`` when it is a PNG, JPEG, GIF or WebP image (by its signature), else ``None``."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_extension(data: bytes) -> str:
    """The file extension for ``data`` (``png`` when the format is not one of the four)."""
    return _EXTENSIONS.get(image_mime(data) or "", "png")


def data_url(data: bytes) -> str:
    """A ``data:`` URL of the image (its MIME type from its bytes; ``image/png`` when they say none)."""
    return f"data:{image_mime(data) or 'image/png'};base64," + base64.b64encode(data).decode("ascii")
