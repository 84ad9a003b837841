"""The official MCP conformance suite's server scenarios against our own streamable-HTTP servers, and their version.

Our servers are tools-only: the scenarios that apply to any server run against each of them; the rest need the
suite's fixed test tools, prompts or resources (NOT_APPLICABLE says which and why).
"""

from __future__ import annotations

import asyncio

import pytest

import aworld_gym
from tests.conformance.suite import missing, run_server_scenario
from tests.helpers import http_server

MISSING = missing()
needs_suite = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")

# The scenarios every MCP server must pass, tools-only ones included (resources-list and prompts-list: an empty list).
SERVER_SCENARIOS = ["server-initialize", "ping", "tools-list", "dns-rebinding-protection", "server-sse-multiple-streams",
                    "resources-list", "prompts-list"]  # fmt: skip
_FIXED_TOOL = "needs the suite's fixed test tool {} (a tools-only server has its own tools)"
_PROMPTS = "needs the suite's test prompts (our servers serve tools only)"
_RESOURCES = "needs the suite's test resources (our servers serve tools only)"
NOT_APPLICABLE = {
    "logging-set-level": "our servers send no log notifications, so they do not declare the logging capability",
    "completion-complete": "completes the suite's test prompt's arguments (our servers have no prompts)",
    "tools-call-simple-text": _FIXED_TOOL.format("test_simple_text"),
    "tools-call-image": _FIXED_TOOL.format("test_image_content"),
    "tools-call-audio": _FIXED_TOOL.format("test_audio_content"),
    "tools-call-embedded-resource": _FIXED_TOOL.format("test_embedded_resource"),
    "tools-call-mixed-content": _FIXED_TOOL.format("test_multiple_content_types"),
    "tools-call-with-logging": _FIXED_TOOL.format("test_tool_with_logging"),
    "tools-call-error": _FIXED_TOOL.format("test_error_handling"),
    "tools-call-with-progress": _FIXED_TOOL.format("test_tool_with_progress"),
    "tools-call-sampling": _FIXED_TOOL.format("test_sampling"),
    "tools-call-elicitation": _FIXED_TOOL.format("test_elicitation"),
    "json-schema-2020-12": _FIXED_TOOL.format("json_schema_2020_12_tool"),
    "elicitation-sep1034-defaults": _FIXED_TOOL.format("test_elicitation_sep1034_defaults"),
    "server-sse-polling": _FIXED_TOOL.format("test_reconnection"),
    "elicitation-sep1330-enums": _FIXED_TOOL.format("test_elicitation_sep1330_enums"),
    **{s: _RESOURCES for s in ("resources-read-text", "resources-read-binary",
                                "resources-templates-read", "resources-subscribe", "resources-unsubscribe")},
    **{s: _PROMPTS for s in ("prompts-get-simple", "prompts-get-with-args",
                             "prompts-get-embedded-resource", "prompts-get-with-image")},
}  # fmt: skip


def _servers(corpus: str, root: str) -> dict[str, list[str]]:
    """How to run each of our HTTP servers (``--port N`` is appended)."""
    http = ["--transport", "streamable-http"]
    return {
        "demo": ["-m", "aworld_gym.mcp.demo_server", *http],
        "serve-python": ["-m", "aworld_gym.cli", "serve-python", "--warm", "off"],
        "gaia-files": ["-m", "aworld_gym.envs.gaia.files_server", *http, "--root", root],
        "gaia-search": ["-m", "aworld_gym.envs.gaia.search_server", *http, "--backend", f"local:{corpus}"],
    }


SERVERS = list(_servers("", ""))


@pytest.fixture(scope="module", params=SERVERS)
def server_url(request, tmp_path_factory):
    corpus = tmp_path_factory.mktemp("corpus")
    (corpus / "page.md").write_text("URL: https://example.org/page\nTitle: A page\n\nSome text to search.\n")
    root = tmp_path_factory.mktemp("files")
    with http_server(_servers(str(corpus), str(root))[request.param]) as url:
        yield url


@needs_suite
@pytest.mark.node
def test_the_lists_are_the_suites():
    from tests.conformance.suite import list_scenarios

    suite = list_scenarios("server")
    assert sorted(suite) == sorted([*SERVER_SCENARIOS, *NOT_APPLICABLE])


@needs_suite
@pytest.mark.node
@pytest.mark.parametrize("scenario", SERVER_SCENARIOS)
def test_server_scenario(server_url, scenario, tmp_path):
    verdict = run_server_scenario(server_url, scenario, tmp_path)
    assert verdict.passed, verdict.explain()


def test_server_reports_its_version(server_url):
    """``serverInfo`` names the server and carries aworld-gym's version (it was empty)."""
    from mcp import Client

    async def info():
        async with Client(server_url) as client:
            return client.server_info

    server_info = asyncio.run(info())
    assert server_info is not None and server_info.name
    assert server_info.version == aworld_gym.__version__


def test_in_process_servers_report_their_version(tmp_path):
    """The same objects served on stdio or in-process report the version too."""
    from mcp import Client

    from aworld_gym.envs.gaia.files_server import build_server as files_server
    from aworld_gym.envs.gaia.search_local import LocalBM25Backend
    from aworld_gym.envs.gaia.search_server import build_server as search_server
    from aworld_gym.mcp.demo_server import build_server as demo_server
    from aworld_gym.sandbox.runner import Sandbox
    from aworld_gym.sandbox.server import build_server as python_server

    (tmp_path / "page.md").write_text("Title: A page\n\nSome text.\n")
    sandbox = Sandbox(warm=False)
    servers = [
        demo_server(),
        python_server(sandbox),
        files_server([tmp_path]),
        search_server(LocalBM25Backend(tmp_path)),
    ]

    async def versions() -> list[str]:
        found = []
        for server in servers:
            async with Client(server) as client:
                found.append(client.server_info.version)
        return found

    try:
        assert asyncio.run(versions()) == [aworld_gym.__version__] * len(servers)
    finally:
        sandbox.close()
