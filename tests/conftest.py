from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from tests.helpers import http_demo_server


@pytest.fixture(scope="session")
def http_url():
    with http_demo_server() as url:
        yield url


@pytest.fixture(scope="session")
def sse_url():
    with http_demo_server("sse") as url:
        yield url
