"""The MiniWoB++ page server answers only requests that know its secret path (or come from one of its pages)."""

from __future__ import annotations

import urllib.error
import urllib.request
from urllib.parse import urlsplit

import pytest

from aworld_gym.envs.browser.tasks import shared_pages


def _get(url: str, referer: str | None = None) -> int:
    req = urllib.request.Request(url, headers={"Referer": referer} if referer else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture
def pages():
    server = shared_pages()
    base = server.acquire()
    yield base.rstrip("/")
    server.release()


def test_a_client_without_the_token_is_refused(pages):
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(pages))
    assert _get(f"{pages}/miniwob/click-button.html") == 200
    assert _get(f"{origin}/miniwob/click-button.html") == 403  # the port alone is not enough
    assert _get(f"{origin}/") == 403
    assert _get(f"{origin}/x{pages.rsplit('/', 1)[1]}/miniwob/click-button.html") == 403
    # a page of ours loading an absolute path (the flight pages do) is served; a forged referer without the token is not
    assert _get(f"{origin}/core/core.js", referer=f"{pages}/flight/Alaska/index.html") == 200
    assert _get(f"{origin}/core/core.js", referer=f"{origin}/flight/Alaska/index.html") == 403


def test_playwright_mcp_listens_only_on_a_private_unix_socket(pages):
    """No TCP port at all; the socket is 0600 in a 0700 folder, so another user cannot connect."""
    import os
    import shutil
    import socket
    import stat
    import subprocess
    import sys

    from aworld_gym.envs.browser.playwright import shared_browser

    origin = "{0.scheme}://{0.netloc}".format(urlsplit(pages))
    browser = shared_browser(origin, 300)
    url = browser.acquire()
    try:
        assert url.startswith("http://127.0.0.1:")
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", browser.port)) != 0  # nothing on the TCP port
        assert stat.S_IMODE(os.stat(browser.socket).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(browser.socket_dir).st_mode) == 0o700
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(browser.socket)  # we can
        if os.geteuid() == 0 and shutil.which("setpriv"):
            probe = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({browser.socket!r}); print('IN')"
            p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                                probe], capture_output=True, text=True)  # fmt: skip
            assert p.returncode != 0 and "IN" not in p.stdout and "PermissionError" in p.stderr, p.stderr
    finally:
        browser.release()


def test_a_removed_socket_folder_is_made_again_private_at_a_restart():
    """The socket's folder removed under a live process (a temp cleaner) failed every later browser start: the
    server listens there and Chromium keeps its profiles there (TMPDIR)."""
    import os
    import shutil
    import stat

    from aworld_gym.envs.browser.playwright import PlaywrightServer

    server = PlaywrightServer(None, 300)  # not started: command() is what every (re)start runs first
    try:
        shutil.rmtree(server.socket_dir)
        argv = server.command(9)
        assert os.path.isdir(server.socket_dir) and stat.S_IMODE(os.lstat(server.socket_dir).st_mode) == 0o700
        assert "--port" in argv and server.extra_env["AWORLD_GYM_LISTEN_SOCKET"].startswith(server.socket_dir + "/")
    finally:
        server.shutdown()
    assert not os.path.exists(server.socket_dir)
