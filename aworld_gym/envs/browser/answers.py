"""Reading Playwright MCP's answers: the text of a result, its markdown sections, a page script's JSON value, and
the answer without run-dependent text (what Browser-v0 shows the model)."""

from __future__ import annotations

import json
import re
from typing import Any

from aworld_gym.core.errors import ServerError

_SECTION = re.compile(r"^### (\w[\w ]*)\n(.*?)(?=^### |\Z)", re.S | re.M)
_RUN_FILES = re.compile(r"^.*\b(?:console|page)-\d{4}-\d\d-\d\dT[\w.-]+\.(?:log|yml)\b.*\n?", re.M)
_EMPTY_SECTION = re.compile(r"^### \w[\w ]*\n(?=### |\Z)", re.M)


def steady(text: str, pages: str) -> str:
    """Playwright MCP's answer without run-dependent text: lines naming its timestamped log and snapshot files
    (``New console entries: console-2026-...log``), sections left empty by that, and the page server's
    per-run origin and token (URLs become paths)."""
    text = _RUN_FILES.sub("", text.replace(pages, ""))
    return _EMPTY_SECTION.sub("", text).rstrip("\n")


def text_of(result: Any) -> str:
    """The text parts of a ``CallToolResult``, one per line."""
    return "\n".join(b.text for b in result.content or [] if getattr(b, "type", None) == "text")


def sections(text: str) -> dict[str, str]:
    """Playwright MCP answers in markdown sections (``### Result``, ``### Snapshot``...)."""
    return {m.group(1).strip(): m.group(2) for m in _SECTION.finditer(text)}


def result_json(result: Any) -> dict[str, Any]:
    """The JSON object a page script (``browser_evaluate``) returned.

    Raises:
        ServerError: the script failed, or its answer is not a JSON object.
    """
    text = text_of(result)
    if result.is_error:
        raise ServerError(f"the page script failed: {text[:300]}")
    body = sections(text).get("Result", "").strip()
    body = body.removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        raise ServerError(f"unexpected answer from the page script: {text[:300]}") from None
    if not isinstance(value, dict):
        raise ServerError(f"unexpected answer from the page script: {text[:300]}")
    return value


# What Playwright logs when the page itself keeps an action from happening (the action retries until its timeout):
# the element is hidden, disabled, moving, covered, scrolled away or removed. A model's mistake, shown to the model.
PAGE_REASONS = (
    "element is not ",  # visible / enabled / stable / editable
    "intercepts pointer events",
    "element is outside of the viewport",
    "element was detached from the DOM",
)
_TIMED_OUT = re.compile(r"\bTimeout \d+ms exceeded\b")


def starved(text: str) -> bool:
    """Whether a Playwright MCP error is a timeout the page gave no reason for: the element was found (a missing one
    fails at once: "does not match any elements"), yet the action got no verdict from the page within Playwright's
    timeout. That is the machine or the browser being too slow (a starved CPU, a stalled renderer), not the model's
    mistake: Browser-v0 ends such an episode as an infrastructure failure (``void``), never with reward 0."""
    if not _TIMED_OUT.search(text):
        return False
    log = text.split("Call log:", 1)[1] if "Call log:" in text else ""
    return not any(reason in log for reason in PAGE_REASONS)
