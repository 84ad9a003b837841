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
