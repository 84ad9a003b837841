"""Open an HTML report in the system's headless Chromium through the Playwright MCP server, as a person would:
the page is served on 127.0.0.1 and driven with Playwright MCP's tools (navigate, evaluate, click, console,
screenshot). Used by ``tests/report/test_report_browser.py``; ``python -m tests.report_page REPORT.html OUT.png``
refreshes the screenshot in docs/report.md (``docs/images/report.png``).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aworld_gym.base.calls import ToolCall
from aworld_gym.envs.browser.playwright import own_browser_entry
from aworld_gym.mcp.hub import ToolHub


@contextlib.contextmanager
def served(folder: Path) -> Iterator[str]:
    """``folder`` over HTTP on 127.0.0.1; yields the origin."""
    handler = functools.partial(_Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


class Page:
    """One report page in a headless Chromium driven through Playwright MCP."""

    def __init__(self, report: Path) -> None:
        self.report = report
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Page:
        origin = self._stack.enter_context(served(self.report.parent))
        entry, self.output_dir = own_browser_entry(origin, settle_ms=200)
        self._stack.callback(shutil.rmtree, self.output_dir, ignore_errors=True)
        self.hub = self._stack.enter_context(ToolHub({"mcpServers": {"browser": {**entry, "timeout": 120}}}))
        self.url = f"{origin}/{self.report.name}"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def call(self, tool: str, **args: Any) -> str:
        result = self.hub.call([ToolCall(tool, args)])[0]
        if result.error:
            raise RuntimeError(f"{tool} failed: {result.error}: {result.text[:500]}")
        return result.text

    def open(self, fragment: str = "") -> None:
        self.call("browser_navigate", url=self.url + fragment)

    def js(self, function: str) -> Any:
        """Run ``function`` (a JavaScript function's source) in the page; returns its JSON value."""
        text = self.call("browser_evaluate", function=function)
        body = text.split("### Result", 1)[1].split("\n### ", 1)[0].strip()
        body = body.removeprefix("```json").removeprefix("```").removesuffix("```").strip()
        return json.loads(body)

    def console_errors(self) -> tuple[int, str]:
        """How many errors the page logged (uncaught exceptions included), and the console's text."""
        import re

        text = self.call("browser_console_messages", level="error")
        found = re.search(r"Errors: (\d+)", text)
        return (int(found.group(1)) if found else -1), text

    def screenshot(self, out: Path, full_page: bool = False) -> Path:
        self.call("browser_take_screenshot", type="png", scale="css", filename="report.png", fullPage=full_page)
        found = next(Path(self.output_dir).rglob("report.png"))
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(found, out)
        return out


if __name__ == "__main__":
    with Page(Path(sys.argv[1]).resolve()) as page:
        page.open()
        page.call("browser_resize", width=1280, height=900)
        print(page.screenshot(Path(sys.argv[2])))
