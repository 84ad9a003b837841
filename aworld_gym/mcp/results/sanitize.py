"""The one sanitiser for what a tool result shows the model: text without terminal control, metadata bounded.

A server's text can hold NUL bytes, ANSI colour and cursor sequences, bells (a Playwright call log is coloured;
a hostile server sends anything); its metadata (an image's ``mimeType``, a resource's ``uri``) is free text of any
length. Everything :func:`aworld_gym.mcp.results.render_result` builds from a result passes through here:
:func:`clean_text` for text (escape sequences and control characters other than tab and newline removed; a
carriage return becomes a newline) and :func:`clean_field` for a metadata field (the same, on one line, cut to a
bound), so metadata cannot crowd a tool's real text out of the output budget.
"""

from __future__ import annotations

import re

ANSI = re.compile(r"\x1b(?:\[[0-9;?<=>!]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")  # CSI, OSC, short
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_DROP = {c: None for c in range(32) if c not in (9, 10)} | {127: None}
MAX_FIELD_CHARS = 200  # a mimeType or uri as the model sees it


def clean_text(text: str) -> str:
    """``text`` without escape sequences and control characters (tab and newline kept; ``\\r\\n`` and a lone
    ``\\r`` become a newline). Text with nothing to remove is returned as it is (one scan)."""
    if _CONTROL.search(text) is None:
        return text
    if "\x1b" in text:
        text = ANSI.sub("", text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text.translate(_DROP)


def clean_field(value: object, limit: int = MAX_FIELD_CHARS) -> str:
    """A metadata field (a MIME type, a URI) for one line of model text: cleaned, on one line, at most ``limit``
    characters (a longer one is cut and says by how much)."""
    text = " ".join(clean_text(str(value)).split())
    if len(text) <= limit:
        return text
    return f"{text[: limit - 30]}... ({len(text) - limit + 30} more characters)"
