"""The client program the official MCP conformance suite drives: aworld-gym's MCP client, through AWorld/MCP-v0.

The suite (``conformance client --command "<python> tests/conformance/client.py" --scenario NAME``) starts a mock
server, runs this program with the server's URL as the last argument, and sets ``MCP_CONFORMANCE_SCENARIO`` (and,
for four auth scenarios, ``MCP_CONFORMANCE_CONTEXT``: JSON with credentials). Everything goes through
``gym.make("AWorld/MCP-v0", mcp_config={"mcpServers": {"x": {"url": URL, "type": "streamable-http", ...}}})``:
``reset`` connects (OAuth included) and lists the tools; scenarios that need a tool call get one ``step`` whose
action calls it; then the env is closed. Exit codes: 0 done, 1 the env could not connect (or failed), 2 the
scenario's tool is missing, 3 this program ran out of time. Credentials never reach stdout or stderr.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from typing import Any

# Tools a scenario needs called (its checks are recorded by that call), with their arguments. Other scenarios
# call the first tool, if the server lists one (the auth mocks' ``test-tool``: that drives scope step-up).
SCENARIO_CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "tools_call": ("add_numbers", {"a": 5, "b": 3}),
    "sse-retry": ("test_reconnection", {}),
    "elicitation-sep1034-client-defaults": ("test_client_elicitation_defaults", {}),
    "auth/scope-step-up": ("test-tool", {}),
}
# What the suite's own reference clients use: a redirect URI nothing listens on (the mock authorization server
# redirects to it at once, and the headless consent reads the code from the Location header) and a client ID
# metadata document URL (CIMD) that the mock accepts without fetching it.
REDIRECT_URI = "http://localhost:3000/callback"
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
DEADLINE_S = 115  # the suite kills a client after 120 s (suite.CLIENT_TIMEOUT_MS); ending first leaves no orphan holding its pipes


def auth_config(scenario: str, context: dict[str, Any]) -> dict[str, Any] | None:
    """The ``"auth"`` object of the server entry (``None``: no auth) for a scenario and its context."""
    if not scenario.startswith("auth/"):
        return None
    if scenario == "auth/client-credentials-basic":
        return {"grant": "client_credentials", "client_id": context["client_id"],
                "client_secret": context["client_secret"], "token_endpoint_auth_method": "client_secret_basic"}  # fmt: skip
    if scenario == "auth/client-credentials-jwt":
        return {"grant": "client_credentials", "client_id": context["client_id"],
                "private_key": context["private_key_pem"], "token_endpoint_auth_method": "private_key_jwt",
                "signing_algorithm": context.get("signing_algorithm") or "ES256"}  # fmt: skip
    if scenario == "auth/cross-app-access-complete-flow":
        return {"grant": "jwt_bearer_id_jag", "client_id": context["client_id"],
                "client_secret": context["client_secret"], "token_endpoint_auth_method": "client_secret_basic",
                "idp": {"client_id": context["idp_client_id"], "id_token": context["idp_id_token"],
                        "issuer": context["idp_issuer"], "token_endpoint": context["idp_token_endpoint"]}}  # fmt: skip
    auth: dict[str, Any] = {"grant": "authorization_code", "consent": "headless", "redirect_uri": REDIRECT_URI,
                            "client_metadata_url": CLIENT_METADATA_URL}  # fmt: skip
    if "client_id" in context:  # auth/pre-registration: a client registered beforehand, no DCR
        auth.update(client_id=context["client_id"], client_secret=context["client_secret"],
                    token_endpoint_auth_method="client_secret_basic")  # fmt: skip
    return auth


def env_kwargs(url: str, scenario: str, context: dict[str, Any]) -> dict[str, Any]:
    """``gym.make`` keyword arguments of AWorld/MCP-v0 for one scenario."""
    server: dict[str, Any] = {"type": "streamable-http", "url": url, "timeout": 20}
    auth = auth_config(scenario, context)
    if auth is not None:
        server["auth"] = auth
    kwargs: dict[str, Any] = {
        "mcp_config": {"mcpServers": {"x": server}},
        "tasks": [{"id": scenario, "prompt": f"MCP conformance scenario {scenario}", "answer": "done"}],
        "tool_timeout": 20,
    }
    if scenario == "elicitation-sep1034-client-defaults":
        kwargs["elicitation"] = "accept_defaults"  # answer with the schema's defaults
    return kwargs


def pick_call(scenario: str, tools: list[str]) -> tuple[str, dict[str, Any]] | None:
    """The tool call this scenario needs (``None``: none), by the names the env exposes."""
    if scenario in SCENARIO_CALLS:
        return SCENARIO_CALLS[scenario]
    return (tools[0], {}) if tools else None


def run(url: str, scenario: str, context: dict[str, Any]) -> int:
    import gymnasium as gym

    import aworld_gym  # noqa: F401 - registers AWorld/MCP-v0

    try:
        env = gym.make("AWorld/MCP-v0", **env_kwargs(url, scenario, context))
    except Exception as exc:  # noqa: BLE001 - reported, then a non-zero exit
        return fail("gym.make", exc)
    try:
        try:
            _, info = env.reset(seed=0)
        except Exception as exc:  # noqa: BLE001
            return fail("reset (connect, list tools)", exc)
        tools = [t["function"]["name"] for t in info.get("tools", [])]
        print(f"connected; tools: {tools}")
        call = pick_call(scenario, tools)
        if call is None:
            return 0
        name, arguments = call
        if name not in tools:
            print(f"the scenario's tool {name!r} is not among the tools the env exposes", file=sys.stderr)
            return 2
        action = f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"
        obs, _, _, _, _ = env.step(action)
        print(f"called {name}: {obs[:2000]}")
        return 0
    finally:
        env.close()


def fail(stage: str, exc: BaseException) -> int:
    print(f"{stage} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    traceback.print_exc(limit=3, file=sys.stderr)
    return 1


def _out_of_time(signum: int, frame: Any) -> None:
    print(f"gave up after {DEADLINE_S} s", file=sys.stderr, flush=True)
    os._exit(3)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: client.py <server URL> (MCP_CONFORMANCE_SCENARIO set by the suite)", file=sys.stderr)
        return 64
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    try:
        context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    except json.JSONDecodeError:
        print("MCP_CONFORMANCE_CONTEXT is not JSON", file=sys.stderr)
        return 64
    signal.signal(signal.SIGALRM, _out_of_time)
    signal.alarm(DEADLINE_S)
    return run(argv[-1], scenario, context)


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no lingering thread may keep the suite waiting for this process
