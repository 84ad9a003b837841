"""Reading Playwright MCP's answers: the text of a result, its markdown sections, a page script's JSON value, and
the answer without run-dependent text (what Browser-v0 shows the model)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from aworld_gym.base.errors import ServerError
from aworld_gym.mcp.results import TIMEOUT, TOOL_ERROR, ToolResult

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


# What Playwright logs while an action makes progress. Any other line of a call log is a reason the page gave for
# the action not happening (the element is hidden, disabled, moving, covered, scrolled away or removed, an option
# is missing...): the model's mistake, shown to the model. Unknown lines count as reasons: a model's mistake is
# never made void by a wording this list does not know.
_PROGRESS = re.compile(
    r"^(?:\d+ × )?(?:"
    r"waiting for locator\(.*"
    r"|locator resolved to .*"
    r"|(?:attempting|retrying|performing) [\w ]+ action(?: \(trial run\))?"
    r"|[\w ]+ action done"
    r"|waiting for element to be (?:visible|enabled|stable|editable|, | and )+"
    r"|element is (?:visible|enabled|stable|editable|, | and )+"
    r"|scrolling into view if needed|done scrolling"
    r"|waiting \d+ms"
    r"|waiting for scheduled navigations to finish|navigations have finished"
    r")$"
)
_TIMED_OUT = re.compile(r"\bTimeout \d+ms exceeded\b")


def starved(text: str) -> bool:
    """Whether a Playwright MCP error is a timeout the page gave no reason for: the element was found (a missing one
    fails at once: "does not match any elements"; the call log says ``locator resolved to``), yet every line of the
    log is progress, no verdict from the page within Playwright's timeout. That is the machine or the browser being
    too slow (a starved CPU, a stalled renderer), not the model's mistake: Browser-v0 ends such an episode as an
    infrastructure failure (``void``), never with reward 0."""
    if not _TIMED_OUT.search(text) or "Call log:" not in text:
        return False
    lines = [line.strip().removeprefix("- ").strip() for line in text.split("Call log:", 1)[1].splitlines()]
    lines = [line for line in lines if line]
    return any(line.startswith("locator resolved to ") for line in lines) and all(_PROGRESS.match(x) for x in lines)


def as_timeout(result: ToolResult) -> ToolResult:
    """A Playwright action that timed out with no reason from the page (:func:`starved`) counts as the
    call timing out; ``browser_wait_for`` waits for what the model asked, and its timeout stays the model's."""
    if result.error != TOOL_ERROR or result.call.name == "browser_wait_for" or not starved(result.text):
        return result
    return replace(result, error=TIMEOUT)
