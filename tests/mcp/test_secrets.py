"""Secrets of an ``mcp_config`` are never printed (issue 44): a marker secret is planted in a URL's userinfo, its
query, the headers and a stdio server's env, with servers that fail in several ways (connection refused, 401 with
the header echoed back, a stdio server that prints its env and exits) and servers that echo their secrets in a tool
result. An episode, a ``collect`` to JSONL, an ``aworld-gym rollout`` (terminal, summary JSON) and ``aworld-gym
report`` (terminal, JSON and HTML) run on them, every log record of every logger is kept, and every output is searched for the marker: none holds
it. Before, the URL was in every error (records, the summary line), the stderr tail and the echoed values too.
"""

from __future__ import annotations

import base64
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import aworld_gym  # noqa: F401 - registers the ids
from aworld_gym.base.errors import ServerError
from aworld_gym.mcp.config import parse_mcp_config
from aworld_gym.mcp.hub import ToolHub
from aworld_gym.mcp.redact import redact, redact_url
from aworld_gym.rollout.collect import collect
from tests.helpers import ROOT, free_port, http_server

MARKER = "SECRET-MARKER-7f3a"
ENV = "AWorld/MCP-v0"
TASKS = [{"id": "t", "prompt": "Use the tools.", "answer": "done"}]
PRINTS_ENV = "import os, sys; t = os.environ['TOKEN']; print('out', t); print('err', t, file=sys.stderr); sys.exit(3)"
HEADERS = {"Authorization": f"Bearer {MARKER}", "X-Api-Key": MARKER, "Cookie": f"session={MARKER}"}


def leaked(text: str) -> bool:
    """Whether ``text`` holds the marker, plain or as the Basic credentials of ``user:<marker>``."""
    basic = base64.b64encode(f"user:{MARKER}".encode()).decode()
    return MARKER in text or basic in text


def http_entry(url: str) -> dict[str, Any]:
    """A streamable-HTTP entry for ``url`` with the marker in the userinfo, two query parameters and three headers."""
    secret = url.replace("http://", f"http://user:{MARKER}@", 1) + f"?api_key={MARKER}&token={MARKER}"
    return {"type": "streamable-http", "url": secret, "headers": dict(HEADERS), "timeout": 10}


def stdio_entry(*args: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": list(args), "cwd": str(ROOT), "env": {"TOKEN": MARKER}, "timeout": 10}


class EchoPolicy:
    """Calls both servers' ``echo_secrets``, then answers."""

    name = "echo"

    def act(self, env: Any, observation: str, info: dict[str, Any]) -> str:
        if "tool_response" in observation:
            return "<answer>done</answer>"
        calls = [{"name": f"{s}__echo_secrets", "arguments": {}} for s in ("local", "remote")]
        return "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls)


class Records(logging.Handler):
    """Every log record of every logger, formatted with its exception."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture(scope="module")
def configs() -> Iterator[dict[str, dict[str, Any]]]:
    with (
        http_server(["-m", "tests.hostile_tools_server", "secrets", "--http"]) as secrets_url,
        http_server(["-m", "tests.hostile_tools_server", "unauthorized", "--http"]) as refusing_url,
    ):
        yield {
            "working": {"mcpServers": {"local": stdio_entry("-m", "tests.hostile_tools_server", "secrets"),
                                       "remote": http_entry(secrets_url)}},
            "refused": {"mcpServers": {"web": http_entry(f"http://127.0.0.1:{free_port()}/mcp"),
                                       "prints_env": stdio_entry("-c", PRINTS_ENV)}},
            "unauthorized": {"mcpServers": {"web": http_entry(refusing_url)}},
            "prints_env": {"mcpServers": {"prints_env": stdio_entry("-c", PRINTS_ENV)}},
        }  # fmt: skip


@pytest.fixture(scope="module")
def outputs(configs, tmp_path_factory) -> dict[str, str]:
    """Every text the runs produced, by where it came from."""
    tmp = tmp_path_factory.mktemp("secrets")
    out: dict[str, str] = {}
    handler, root = Records(), logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        out["specs repr"] = repr([parse_mcp_config(c) for c in configs.values()])
        for name in ("refused", "unauthorized", "prints_env"):
            with pytest.raises(ServerError) as err:
                ToolHub(configs[name]).start()
            out[f"{name} start error"] = str(err.value)
        env = gym.make(ENV, mcp_config=configs["working"], tasks=TASKS)
        try:
            obs, info = env.reset(seed=0)
            obs, _, _, _, info = env.step(EchoPolicy().act(env, obs, info))
            out["episode"] = json.dumps([obs, info, env.unwrapped.messages], default=repr)
        finally:
            env.close()
        for name, config in configs.items():
            collect(ENV, EchoPolicy(), episodes=2, env_kwargs={"mcp_config": config, "tasks": TASKS},
                    sink=tmp / f"{name}.jsonl", progress=False)  # fmt: skip
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    out["logs"] = "\n".join(handler.lines)
    runs = [str(tmp / f"{name}.jsonl") for name in configs]
    for run in runs:
        out[run] = Path(run).read_text(encoding="utf-8")
    cli = [sys.executable, "-m", "aworld_gym.cli"]
    config_file = tmp / "refused.json"
    config_file.write_text(json.dumps(configs["refused"]), encoding="utf-8")
    kwargs = json.dumps({"mcp_config": str(config_file), "tasks": TASKS})
    rollout = subprocess.run([*cli, "rollout", "--env", ENV, "--episodes", "2", "--no-progress", "--env-kwargs", kwargs,
                              "--out", str(tmp / "cli.jsonl"), "--summary-json", str(tmp / "summary.json")],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    out["rollout terminal"] = rollout.stdout + rollout.stderr
    out["rollout summary json"] = (tmp / "summary.json").read_text(encoding="utf-8")
    out["cli.jsonl"] = (tmp / "cli.jsonl").read_text(encoding="utf-8")
    report = subprocess.run([*cli, "report", *runs, str(tmp / "cli.jsonl"), "--json", str(tmp / "r.json"), "--html",
                             str(tmp / "r.html")], capture_output=True, text=True, timeout=120)  # fmt: skip
    out["report terminal"] = report.stdout + report.stderr
    out["report json"] = (tmp / "r.json").read_text(encoding="utf-8")
    out["report html"] = (tmp / "r.html").read_text(encoding="utf-8")
    return out


def test_no_output_holds_the_secret(outputs):
    assert {where for where, text in outputs.items() if leaked(text)} == set()


def test_the_runs_did_what_the_test_needs(outputs, configs):
    """The control: the failures and the echoes happened (with the secrets hidden), so the search above meant
    something."""
    assert "http://***@127.0.0.1:" in outputs["refused start error"] and "api_key=***&token=***" in outputs[
        "refused start error"]  # fmt: skip
    assert "HTTP 401" in outputs["unauthorized start error"] and "Basic ***" in outputs["unauthorized start error"]
    assert "err ***" in outputs["prints_env start error"]
    episode = outputs["episode"]
    assert '\\"TOKEN\\": \\"***\\"' in episode and "/mcp?api_key=***&token=***" in episode
    assert '"structured": {"seen": {"TOKEN": "***"}}' in episode  # the structured content too
    assert "out ***" in outputs["logs"]  # the stdout line that is not JSON-RPC, warned about
    assert '"status": "void"' in outputs[next(k for k in outputs if k.endswith("refused.jsonl"))]
    assert "rollout: AWorld/MCP-v0" in outputs["rollout terminal"] and "first env_error" in outputs["rollout terminal"]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "https://user:pw%40x@host:8/p/mcp?api_key=k1&region=eu#f",
            "https://***@host:8/p/mcp?api_key=***&region=***#f",
        ),
        ("https://host/mcp", "https://host/mcp"),
        ("not a url", "not a url"),
    ],
)
def test_redact_url(url, shown):
    assert redact_url(url) == shown


def test_a_secret_is_hidden_in_any_text_once_its_config_is_read():
    token = "ghp_1234567890abcdefABCDEF"  # in a header of a name that says nothing: hidden for its look
    parse_mcp_config({"mcpServers": {"s": {"type": "sse", "url": "http://h/sse", "headers": {"X-Gateway": token,
                                                                                             "X-Region": "europe"}}}})  # fmt: skip
    assert redact(f"the server said: bad {token}; region europe") == "the server said: bad ***; region europe"


def test_a_modules_own_logger_hides_secrets_whatever_getlogger_returns_later():
    """The filter sits on the logger object each module logs through, from its import. Attached later by name, it
    reached only what ``logging.getLogger`` returned then: once the name's entry was made anew (as something in a
    full `make test` run did), the stdio module's warning about a stdout line carried its secret. A fresh process,
    so that no earlier test attached the filter to the module's object already."""
    import subprocess
    import sys

    program = """
import logging, sys
from aworld_gym.mcp.transports import stdio
from aworld_gym.mcp.redact import SECRETS
logging.Logger.manager.loggerDict.pop(stdio.logger.name)
logging.basicConfig(stream=sys.stdout, format="%(message)s", level=logging.DEBUG)
SECRETS.add(["SECRET-MARKER-module-logger-91"])
stdio.logger.warning("a line that is not JSON-RPC: %r", b"out SECRET-MARKER-module-logger-91")
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "a line that is not JSON-RPC" in done.stdout and "SECRET-MARKER" not in done.stdout, done.stdout
