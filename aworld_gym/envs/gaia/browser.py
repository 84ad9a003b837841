"""A real browser for GAIA: the shared ``@playwright/mcp`` server of ``AWorld/Browser-v0`` (one Chromium per
process, an isolated context per env, the same tools exposed), with every request through :class:`WebGuard`:
http(s) to public addresses only, plus what ``allow`` admits, minus what ``deny`` refuses; never ``file:``.
"""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aworld_gym.base.errors import ConfigError
from aworld_gym.envs.browser.playwright import PlaywrightServer
from aworld_gym.envs.gaia.web_proxy import WebGuard
from aworld_gym.mcp.transports.shared import shared_instance


class GuardedBrowser(PlaywrightServer):
    """Playwright MCP behind the web guard (actions answer briefly; ``browser_snapshot`` shows the page)."""

    def __init__(self, allow: Sequence[str], deny: Sequence[str], settle_ms: int,
                 hosts: Mapping[str, tuple[str, int]] | None = None) -> None:  # fmt: skip
        self.allow, self.deny, self.hosts = tuple(allow), tuple(deny), dict(hosts or {})
        self.guard: WebGuard | None = None
        super().__init__(None, settle_ms)

    def command(self, port: int) -> list[str]:
        if self.guard is None:  # started with the browser, stopped with it (a restart gets a new one)
            self.guard = WebGuard(self.allow, self.deny, self.hosts)
        self.proxy = self.guard.url
        return super().command(port)

    def _stop(self) -> None:
        super()._stop()
        if self.guard is not None:
            self.guard.close()
            self.guard = None


def guarded_browser(allow: Sequence[str] = (), deny: Sequence[str] = (), settle_ms: int = 300,
                    hosts: Mapping[str, tuple[str, int]] | None = None) -> GuardedBrowser:  # fmt: skip
    """The process-wide guarded browser for these lists."""
    key = ("gaia-browser", tuple(allow), tuple(deny), settle_ms, tuple(sorted((hosts or {}).items())))
    return shared_instance(key, lambda: GuardedBrowser(allow, deny, settle_ms, hosts))


SAMPLE_SITE_HOST = "archive.sample.test"  # the bundled sample site's name (the guard maps it to its server)
_site: tuple[Any, tuple[str, int]] | None = None
_site_lock = threading.Lock()


def sample_site(folder: Path) -> dict[str, tuple[str, int]]:
    """Serve the sample set's web pages (public sample content, GET only) on 127.0.0.1 for this process; returns
    the guard's host mapping for them."""
    global _site
    with _site_lock:
        if _site is None:
            handler = functools.partial(_Pages, directory=str(folder))
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
            threading.Thread(target=server.serve_forever, name="aworld-gym-sample-site", daemon=True).start()
            _site = (server, ("127.0.0.1", server.server_address[1]))
        return {SAMPLE_SITE_HOST: _site[1]}


class _Pages(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def list_directory(self, path: Any) -> Any:  # no folder listings
        self.send_error(404)
        return None


def check_navigation(name: str, args: dict[str, Any]) -> str | None:
    """The hub guard of ``browser_navigate``: only http(s) URLs (the proxy checks the addresses)."""
    if name != "browser_navigate":
        return None
    url = str(args.get("url", "")).strip()
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme not in ("http", "https"):
        return f"refused {url!r}: the browser opens only http:// and https:// URLs"
    return None


def browser_entry(allow: Sequence[str], deny: Sequence[str], hosts: Mapping[str, tuple[str, int]] | None = None) -> Any:
    from aworld_gym.core.resources import LocalServer
    from aworld_gym.envs.browser.env import AGENT_TOOLS

    for pattern in (*allow, *deny):
        if not isinstance(pattern, str) or not pattern:
            raise ConfigError("browser_allow / browser_deny are lists of host or host:port patterns")
    return LocalServer(guarded_browser(allow, deny, hosts=hosts), allow_tools=AGENT_TOOLS)
