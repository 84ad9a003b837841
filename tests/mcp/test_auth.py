"""OAuth 2.1 for HTTP MCP servers, against a real authorization server and a protected MCP server on 127.0.0.1
(tests/oauth_server.py, in a child process): registration, PKCE consent, every client authentication method,
client credentials, refresh, the token store, step-up, failures that name their step, and secrets kept out of
records, logs and reprs. The official conformance suite's auth scenarios run in tests/conformance/."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import stat
import subprocess
import sys
import time

import gymnasium as gym
import httpx2
import pytest

import aworld_gym  # noqa: F401
from aworld_gym.base.calls import ToolCall
from aworld_gym.base.errors import ServerError
from aworld_gym.mcp.auth import connect
from aworld_gym.mcp.hub import ToolHub
from aworld_gym.mcp.options import ToolOptions
from aworld_gym.mcp.transports.shared import free_port
from aworld_gym.rollout.driver import run_episode
from aworld_gym.rollout.policies.plan import PlanPolicy
from tests.helpers import ROOT, wait_until

SECRET = "S3cret-client-value-91f2"


class Stand:
    """The stand-in servers: ``url`` (streamable HTTP), ``sse``, ``issuer``; ``configure`` resets them."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.url, self.sse, self.issuer = f"{self.base}/mcp", f"{self.base}/sse", f"{self.base}/as"

    def configure(self, **config) -> None:
        httpx2.post(f"{self.base}/_config", json=config).raise_for_status()

    def stats(self) -> dict:
        return httpx2.get(f"{self.base}/_stats").json()

    def config(self, auth, url: str | None = None, **entry) -> dict:
        server = {"type": "sse" if url == self.sse else "streamable-http", "url": url or self.url, "auth": auth}
        return {"mcpServers": {"notes": {**server, **entry}}}


@pytest.fixture(scope="module")
def stand():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.oauth_server", "--port", str(port)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        assert wait_until(lambda: _listening(port), 30), "the stand-in OAuth server did not start"
        yield Stand(port)
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def fresh(stand):
    """Default stand-in configuration and no tokens kept from another test (a new process's memory store)."""
    from aworld_gym.mcp.auth import store as auth_store

    stand.configure()
    auth_store._memory.__init__()
    return stand


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def _echo(config: dict, text: str = "hi") -> str:
    with ToolHub(config, options=ToolOptions(timeout=20)) as hub:
        return hub.call([ToolCall("echo", {"text": text})])[0].text


def test_dynamic_registration_and_headless_pkce(fresh):
    assert _echo(fresh.config({})) == "hi"
    s = fresh.stats()
    (reg,) = s["register"]
    assert reg["redirect_uris"] == ["http://127.0.0.1:33418/callback"] and reg["client_name"] == "aworld-gym"
    assert reg["grant_types"] == ["authorization_code", "refresh_token"] and reg["application_type"] == "native"
    (authz,) = s["authorize"]
    assert authz["code_challenge_method"] == "S256" and authz["resource"] == fresh.url  # RFC 8707
    assert authz["scope"] == "notes:read notes:write"  # the resource's scopes_supported
    grants = [(t["grant"], t["method"], t["resource"]) for t in s["token"]]
    assert grants == [("authorization_code", "client_secret_basic", fresh.url)]
    assert s["bad_token"] == 0


def test_client_id_metadata_document_instead_of_registration(fresh):
    fresh.configure(cimd=True)
    url = "https://client.example.com/aworld-gym.json"
    assert _echo(fresh.config({"client_metadata_url": url})) == "hi"
    s = fresh.stats()
    assert s["register"] == [] and s["authorize"][0]["client_id"] == url
    assert [(t["grant"], t["method"]) for t in s["token"]] == [("authorization_code", "none")]


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post", "none", "private_key_jwt"])
def test_pre_registered_client(fresh, monkeypatch, method):
    private, public = _ec_key_pair()
    fresh.configure(
        dcr=False, expires_in=3, clients={"pre": {"secret": SECRET, "method": method, "public_key": public}}
    )
    monkeypatch.setenv("NOTES_SECRET", SECRET)
    auth = {"client_id": "pre", "issuer": fresh.issuer}
    if method == "private_key_jwt":  # with the authorization code too (the SDK signs client credentials only)
        auth.update(private_key=private, signing_algorithm="ES256")
    elif method != "none":
        auth.update(client_secret={"env": "NOTES_SECRET"}, token_endpoint_auth_method=method)
    with ToolHub(fresh.config(auth), options=ToolOptions(timeout=20)) as hub:
        assert hub.call([ToolCall("echo", {"text": "a"})])[0].text == "a"
        time.sleep(3)  # the refresh authenticates the same way
        assert hub.call([ToolCall("echo", {"text": "b"})])[0].text == "b"
    s = fresh.stats()
    assert s["register"] == [] and s["bad_token"] == 0
    assert [(t["grant"], t["method"]) for t in s["token"]][:2] == [
        ("authorization_code", method),
        ("refresh_token", method),
    ]


def browser_stand_in(authorization_url: str) -> str:
    """A consent handler, as a browser automation would be: it follows the login to the redirect with the code."""
    response = httpx2.get(authorization_url, follow_redirects=False)
    return response.headers["location"]


async def async_browser_stand_in(authorization_url: str) -> str:
    async with httpx2.AsyncClient() as client:
        return (await client.get(authorization_url)).headers["location"]


def refusing_person(authorization_url: str) -> str:
    return authorization_url.split("?")[0].replace("/as/authorize", "/cb") + "?error=access_denied&error_description=no"


@pytest.mark.parametrize("handler", ["browser_stand_in", "async_browser_stand_in"])
def test_consent_handler_from_config(fresh, handler):
    assert _echo(fresh.config({"consent": f"tests.mcp.test_auth:{handler}"})) == "hi"
    assert len(fresh.stats()["authorize"]) == 1


def test_consent_handler_refusal_and_bad_handler_are_clear_errors(fresh):
    text, _ = _reset_error(fresh.config({"consent": "tests.mcp.test_auth:refusing_person"}))
    assert "authorization request (consent)" in text and "refused: access_denied (no)" in text
    text, _ = _reset_error(fresh.config({"consent": "tests.mcp.test_auth:no_such_handler"}))
    assert "cannot load the consent handler" in text


def _ec_key_pair() -> tuple[str, str]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()  # fmt: skip
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public.decode()


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post", "private_key_jwt"])
def test_client_credentials(fresh, tmp_path, method):
    private, public = _ec_key_pair()
    fresh.configure(clients={"trainer": {"secret": SECRET, "method": method, "public_key": public}})
    auth = {"grant": "client_credentials", "client_id": "trainer", "token_endpoint_auth_method": method,
            "issuer": fresh.issuer, "scope": "notes:read"}  # fmt: skip
    if method == "private_key_jwt":
        (tmp_path / "key.pem").write_text(private)
        auth.update(private_key={"file": str(tmp_path / "key.pem")}, signing_algorithm="ES256")
    else:
        auth["client_secret"] = SECRET
    assert _echo(fresh.config(auth)) == "hi"
    s = fresh.stats()
    assert s["authorize"] == [] and s["register"] == []
    (token,) = s["token"]
    assert (token["grant"], token["method"], token["resource"]) == ("client_credentials", method, fresh.url)
    assert token["scope"] == "notes:read"  # the configured scope, not the resource's two (G3)


def test_client_credentials_over_sse(fresh):
    fresh.configure(clients={"trainer": {"secret": SECRET, "method": "client_secret_post"}})
    auth = {"grant": "client_credentials", "client_id": "trainer", "client_secret": SECRET,
            "token_endpoint_auth_method": "client_secret_post"}  # fmt: skip
    assert _echo(fresh.config(auth, url=fresh.sse)) == "hi"
    assert [t["resource"] for t in fresh.stats()["token"]] == [fresh.sse]


def test_token_is_refreshed_after_expiry(fresh):
    fresh.configure(expires_in=3)
    with ToolHub(fresh.config({}), options=ToolOptions(timeout=20)) as hub:
        assert hub.call([ToolCall("echo", {"text": "a"})])[0].text == "a"
        time.sleep(3)
        assert hub.call([ToolCall("echo", {"text": "b"})])[0].text == "b"
    s = fresh.stats()
    grants = [t["grant"] for t in s["token"]]
    assert grants[0] == "authorization_code" and set(grants[1:]) == {"refresh_token"}
    assert len(s["authorize"]) == 1 and s["bad_token"] == 0  # refreshed before use, not after a refusal


def test_file_token_store_is_reused_by_other_envs_and_processes(fresh, tmp_path):
    store = tmp_path / "tokens"
    config = fresh.config({"token_store": str(store)})
    assert _echo(config) == "hi"
    (path,) = store.iterdir()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(store.stat().st_mode) == 0o700
    saved = json.loads(path.read_text())
    assert saved["tokens"]["expires_at"] > time.time() + 3000 and saved["client_info"]["client_id"].startswith("dcr-")
    assert _echo(config, "again") == "again"  # another env (its own loop and provider)
    code = (
        f"from tests.mcp.test_auth import _echo; import json; assert _echo(json.loads({json.dumps(config)!r})) == 'hi'"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)
    s = fresh.stats()
    assert len(s["authorize"]) == 1 and len(s["register"]) == 1 and len(s["token"]) == 1  # one login in all


def test_a_stored_token_keeps_its_expiry(fresh, tmp_path):
    """A token loaded from the store is known to have expired (the SDK alone would send it and meet a 401, then
    log in again): it is refreshed before use."""
    fresh.configure(expires_in=3)
    config = fresh.config({"token_store": str(tmp_path)})
    assert _echo(config) == "hi"
    time.sleep(3)
    assert _echo(config, "later") == "later"  # a new provider, reading the store
    s = fresh.stats()
    assert [t["grant"] for t in s["token"]] == ["authorization_code", "refresh_token"]
    assert len(s["authorize"]) == 1 and s["bad_token"] == 0


def test_concurrent_hubs_on_one_loop_log_in_once(fresh):
    async def main() -> list[str]:
        hubs = [ToolHub(fresh.config({}), options=ToolOptions(timeout=20)) for _ in range(4)]
        await asyncio.gather(*(h.astart() for h in hubs))
        try:
            results = await asyncio.gather(*(h.acall([ToolCall("echo", {"text": str(i)})]) for i, h in enumerate(hubs)))
            return [r[0].text for r in results]
        finally:
            await asyncio.gather(*(h.aclose() for h in hubs))

    assert asyncio.run(main()) == ["0", "1", "2", "3"]
    s = fresh.stats()
    assert len(s["authorize"]) == 1 and len(s["token"]) == 1
    for _ in range(3):  # each hub on its own loop, closed with the hub: its provider goes with it
        assert _echo(fresh.config({})) == "hi"
    assert len(connect._providers) == 1


def test_step_up_on_insufficient_scope(fresh):
    with ToolHub(fresh.config({"scope": "notes:read"}), options=ToolOptions(timeout=20)) as hub:
        (result,) = hub.call([ToolCall("write_note", {"text": "x"})])
    assert result.text == "noted: x"
    s = fresh.stats()
    assert [a["scope"] for a in s["authorize"]] == ["notes:read", "notes:read notes:write"]
    assert [c["scope"] for c in s["calls"]] == ["notes:read", "notes:read notes:write"]


def _reset_error(config: dict) -> tuple[str, float]:
    env = gym.make("AWorld/MCP-v0", mcp_config=config, tasks=[{"id": "t", "prompt": "p", "answer": "a"}])
    start = time.monotonic()
    try:
        with pytest.raises(ServerError) as info:
            env.reset()
    finally:
        env.close()
    return str(info.value), time.monotonic() - start


def test_unreachable_or_silent_authorization_server_is_a_clear_error_in_bounded_time(fresh):
    fresh.configure(as_url=f"http://127.0.0.1:{free_port()}/as")
    text, took = _reset_error(fresh.config({}))
    assert "'notes'" in text and "authorization server metadata discovery" in text and "could not reach" in text
    assert took < 15
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        fresh.configure(as_url=f"http://127.0.0.1:{silent.getsockname()[1]}/as")
        text, took = _reset_error(fresh.config({}, timeout=2))
    assert "authorization server metadata discovery" in text and "did not answer within 2 s" in text
    assert took < 30


@pytest.mark.parametrize(
    ("stand_config", "auth", "expected"),
    [
        ({"consent_page": True}, {}, ["authorization request (consent)", "needs a person"]),
        ({"pkce_methods": None}, {}, ["S256", "refusing to proceed"]),
        ({"dcr": False}, {}, ["dynamic client registration", "client_metadata_url"]),
        ({"dcr": False, "clients": {"pre": {"secret": "other", "method": "client_secret_post"}}},
         {"client_id": "pre", "client_secret": SECRET, "token_endpoint_auth_method": "client_secret_post"},
         ["token request (authorization code)", "invalid_client"]),
        ({}, {"issuer": "https://elsewhere.example.com"}, ["protected resource metadata", "not the configured issuer"]),
    ],
)  # fmt: skip
def test_failed_authorization_names_the_server_and_the_step(fresh, stand_config, auth, expected):
    fresh.configure(**stand_config)
    text, _ = _reset_error(fresh.config(auth))
    assert "MCP server 'notes'" in text and "OAuth authorization failed at" in text
    assert all(e in text for e in expected), text
    assert SECRET not in text


def test_secrets_stay_out_of_records_logs_and_reprs(fresh, caplog):
    caplog.set_level(logging.DEBUG)
    fresh.configure(dcr=False, clients={"pre": {"secret": SECRET, "method": "client_secret_post"}})
    auth = {"client_id": "pre", "client_secret": SECRET, "token_endpoint_auth_method": "client_secret_post"}
    config = fresh.config(auth, headers={"X-Api-Key": "hdr-" + SECRET})
    task = {"id": "e", "prompt": "Echo hello.", "answer": "hello",
            "reference": {"turns": [[{"name": "echo", "arguments": {"text": "hello"}}]], "pattern": r"(\w+)\s*$"}}  # fmt: skip
    env = gym.make("AWorld/MCP-v0", mcp_config=config, tasks=[task])
    try:
        obs, info = env.reset()
        traj = run_episode(env, PlanPolicy())
        seen = [repr(env), repr(env.unwrapped.hub.specs), repr(vars(env.unwrapped.hub)), repr(obs), repr(info)]
    finally:
        env.close()
    assert traj.status == "ok" and traj.reward == 1.0
    s = fresh.stats()
    tokens = s["issued"]  # the code, the access token and the refresh token
    assert len(tokens) == 3
    text = "\n".join([json.dumps(traj.to_record(), default=str), caplog.text, *seen])
    for secret in [SECRET, *tokens]:
        assert secret not in text


def test_an_httpx_auth_object_is_used_as_given(fresh):
    fresh.configure(clients={"trainer": {"secret": SECRET, "method": "client_secret_post"}})
    token = httpx2.post(f"{fresh.issuer}/token", data={"grant_type": "client_credentials", "client_id": "trainer",
                                                         "client_secret": SECRET}).json()["access_token"]  # fmt: skip

    class Bearer(httpx2.Auth):
        def auth_flow(self, request):
            request.headers["Authorization"] = f"Bearer {token}"
            yield request

    assert _echo(fresh.config(Bearer())) == "hi"
    assert fresh.stats()["bad_token"] == 0


def test_a_registration_the_server_forgot_is_dropped_and_made_again(fresh):
    assert _echo(fresh.config({})) == "hi"
    fresh.configure()  # the authorization server forgets its clients and tokens
    # Same identity (client_name is only sent at registration), but an entry this process has not connected to yet:
    # a remembered protocol era would make the connect retry at once (aworld_gym.mcp.transports.discover).
    again = fresh.config({"client_name": "aworld-gym again"})
    text, _ = _reset_error(again)
    assert "answered HTTP 400" in text and "the dynamic registration was dropped" in text
    assert _echo(again) == "hi"  # registers again
    s = fresh.stats()
    assert len(s["register"]) == 1 and s["register"][0]["client_name"] == "aworld-gym again"
