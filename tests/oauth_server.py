"""A stand-in OAuth 2.1 authorization server and an MCP server it protects (streamable HTTP at /mcp, SSE at /sse),
one process, for the OAuth client tests.

    python -m tests.oauth_server --port 8991

The resource publishes protected-resource metadata (RFC 9728) naming the authorization server at ``<base>/as``
(metadata at ``/.well-known/oauth-authorization-server/as``, RFC 8414 path insertion). The authorization server
does dynamic registration, approves ``/as/authorize`` at once (302 to the redirect URI with ``code``, ``state`` and
``iss``), and checks at ``/as/token`` what a strict server checks: the client's registered authentication method
(basic, post, none, private_key_jwt), PKCE S256, the redirect URI, ``resource`` (RFC 8707) consistent with the
authorization request, refresh-token rotation. ``write_note`` needs scope ``notes:write`` (403
``insufficient_scope`` otherwise: step-up). ``POST /_config`` resets the state with a new configuration (see
``DEFAULTS``); ``GET /_stats`` tells what clients did.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import secrets
import time
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode

DEFAULTS: dict[str, Any] = {
    "dcr": True,  # offer dynamic client registration
    "cimd": False,  # accept client ID metadata document URLs as client ids
    "pkce_methods": ["S256"],  # code_challenge_methods_supported (None: not advertised)
    "scopes_supported": ["notes:read", "notes:write"],  # in the resource's metadata
    "www_scope": None,  # scope= in the 401 challenge
    "write_scope": "notes:write",  # what write_note needs
    "expires_in": 3600,
    "refresh": True,  # issue refresh tokens
    "clients": {},  # pre-registered: {client_id: {"secret": ..., "method": ..., "public_key": PEM}}
    "consent_page": False,  # /authorize answers 200 with a login page instead of redirecting
    "as_url": None,  # the authorization server the resource names (default: <base>/as)
    "grants": ["authorization_code", "refresh_token", "client_credentials"],
}


class State:
    def __init__(self, base: str) -> None:
        self.base = base
        self.reset({})

    def reset(self, config: dict[str, Any]) -> None:
        self.config = {**DEFAULTS, **config}
        self.clients: dict[str, dict[str, Any]] = dict(self.config["clients"])
        self.codes: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, dict[str, Any]] = {}
        self.refresh: dict[str, dict[str, Any]] = {}
        self.stats: dict[str, Any] = {"authorize": [], "token": [], "register": [], "bad_token": 0, "calls": [],
                                      "metadata": [], "issued": []}  # fmt: skip

    @property
    def issuer(self) -> str:
        return f"{self.base}/as"

    def issue(self, client_id: str, scope: str | None, resource: str | None) -> dict[str, Any]:
        access = "at-" + secrets.token_urlsafe(16)
        self.tokens[access] = {"scope": scope or "", "exp": time.time() + self.config["expires_in"],
                               "client_id": client_id, "resource": resource}  # fmt: skip
        self.stats["issued"].append(access)
        body: dict[str, Any] = {"access_token": access, "token_type": "Bearer", "expires_in": self.config["expires_in"]}
        if scope:
            body["scope"] = scope
        if self.config["refresh"] and "refresh_token" in self.config["grants"]:
            rt = "rt-" + secrets.token_urlsafe(16)
            self.refresh[rt] = {"client_id": client_id, "scope": scope, "resource": resource}
            self.stats["issued"].append(rt)
            body["refresh_token"] = rt
        return body


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse(body, status_code=status, headers=headers)


def build(state: State) -> Any:
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse, RedirectResponse
    from starlette.routing import Route

    def prm(request: Any) -> Any:
        state.stats["metadata"].append(request.url.path)
        resource = state.base + request.url.path.removeprefix("/.well-known/oauth-protected-resource")
        body = {"resource": resource, "authorization_servers": [state.config["as_url"] or state.issuer]}
        if state.config["scopes_supported"] is not None:
            body["scopes_supported"] = state.config["scopes_supported"]
        return _json(200, body)

    def as_metadata(request: Any) -> Any:
        state.stats["metadata"].append(request.url.path)
        c, i = state.config, state.issuer
        body: dict[str, Any] = {"issuer": i, "authorization_endpoint": f"{i}/authorize", "token_endpoint": f"{i}/token",
                                "response_types_supported": ["code"], "grant_types_supported": c["grants"],
                                "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post",
                                                                          "none", "private_key_jwt"],
                                "scopes_supported": c["scopes_supported"],
                                "authorization_response_iss_parameter_supported": True,
                                "client_id_metadata_document_supported": c["cimd"]}  # fmt: skip
        if c["pkce_methods"] is not None:
            body["code_challenge_methods_supported"] = c["pkce_methods"]
        if c["dcr"]:
            body["registration_endpoint"] = f"{i}/register"
        return _json(200, body)

    async def register(request: Any) -> Any:
        meta = await request.json()
        state.stats["register"].append(meta)
        method = meta.get("token_endpoint_auth_method") or "client_secret_basic"
        client_id = "dcr-" + secrets.token_urlsafe(6)
        client = {"method": method, "redirect_uris": meta.get("redirect_uris") or []}
        out = {**meta, "client_id": client_id, "token_endpoint_auth_method": method}
        if method in ("client_secret_basic", "client_secret_post"):
            client["secret"] = out["client_secret"] = "dcr-secret-" + secrets.token_urlsafe(12)
        state.clients[client_id] = client
        return _json(201, out)

    def authorize(request: Any) -> Any:
        q = dict(request.query_params)
        state.stats["authorize"].append({k: v for k, v in q.items() if k not in ("code_challenge", "state")})
        client = state.clients.get(q.get("client_id", ""))
        if client is None and not (state.config["cimd"] and q.get("client_id", "").startswith("https://")):
            return _json(400, {"error": "invalid_client"})
        if client is not None and client.get("redirect_uris") and q.get("redirect_uri") not in client["redirect_uris"]:
            return _json(400, {"error": "invalid_request", "error_description": "redirect_uri not registered"})
        if q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
            return _json(400, {"error": "invalid_request", "error_description": "PKCE S256 required"})
        if state.config["consent_page"]:
            return HTMLResponse("<html><form>Log in: <input name=user></form></html>")
        code = "code-" + secrets.token_urlsafe(12)
        state.codes[code] = {**q, "used": False}
        state.stats["issued"].append(code)
        query = urlencode({"code": code, "state": q.get("state", ""), "iss": state.issuer})
        return RedirectResponse(f"{q['redirect_uri']}?{query}", status_code=302)

    async def token(request: Any) -> Any:
        form = {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
        grant = form.get("grant_type", "")
        client_id, method, why = _client_auth(state, form, request.headers.get("authorization"))
        state.stats["token"].append({"grant": grant, "method": method, "client_id": client_id,
                                     "resource": form.get("resource"), "scope": form.get("scope")})  # fmt: skip
        if why:
            return _json(401, {"error": "invalid_client", "error_description": why})
        if grant == "authorization_code":
            code = state.codes.get(form.get("code", ""))
            if code is None or code["used"] or code["client_id"] != client_id:
                return _json(400, {"error": "invalid_grant", "error_description": "unknown or used code"})
            code["used"] = True
            challenge = base64.urlsafe_b64encode(hashlib.sha256(form.get("code_verifier", "").encode()).digest())
            if challenge.decode().rstrip("=") != code["code_challenge"]:
                return _json(400, {"error": "invalid_grant", "error_description": "PKCE verifier mismatch"})
            if form.get("redirect_uri") != code["redirect_uri"] or form.get("resource") != code.get("resource"):
                return _json(400, {"error": "invalid_grant", "error_description": "redirect_uri or resource differs"})
            return _json(200, state.issue(client_id, code.get("scope"), form.get("resource")))
        if grant == "refresh_token":
            old = state.refresh.pop(form.get("refresh_token", ""), None)
            if old is None or old["client_id"] != client_id:
                return _json(400, {"error": "invalid_grant", "error_description": "unknown refresh token"})
            return _json(200, state.issue(client_id, old["scope"], form.get("resource") or old["resource"]))
        if grant == "client_credentials" and grant in state.config["grants"]:
            return _json(200, state.issue(client_id, form.get("scope"), form.get("resource")))
        return _json(400, {"error": "unsupported_grant_type"})

    async def config(request: Any) -> Any:
        state.reset(await request.json())
        return _json(200, {"ok": True})

    def stats(request: Any) -> Any:
        return _json(200, {**state.stats, "clients": sorted(state.clients)})

    return Starlette(routes=[
        Route("/.well-known/oauth-protected-resource/{rest:path}", prm),
        Route("/.well-known/oauth-authorization-server/as", as_metadata),
        Route("/as/register", register, methods=["POST"]),
        Route("/as/authorize", authorize),
        Route("/as/token", token, methods=["POST"]),
        Route("/_config", config, methods=["POST"]),
        Route("/_stats", stats),
    ])  # fmt: skip


def _client_auth(state: State, form: dict[str, str], header: str | None) -> tuple[str, str, str | None]:
    """(client_id, the method the client used, why it is refused or None), against the client's registration."""
    if header and header.startswith("Basic "):
        client_id, _, secret = base64.b64decode(header[6:]).decode().partition(":")
        client_id, secret, method = unquote(client_id), unquote(secret), "client_secret_basic"
    elif form.get("client_assertion"):
        client_id, secret, method = form.get("client_id", ""), "", "private_key_jwt"
    elif "client_secret" in form:
        client_id, secret, method = form.get("client_id", ""), form["client_secret"], "client_secret_post"
    else:
        client_id, secret, method = form.get("client_id", ""), "", "none"
    client = state.clients.get(client_id)
    if client is None:
        ok = state.config["cimd"] and client_id.startswith("https://") and method == "none"
        return client_id, method, None if ok else "unknown client"
    if client["method"] != method:
        return client_id, method, f"this client authenticates with {client['method']}, not {method}"
    if method == "private_key_jwt":
        import jwt

        try:
            claims = jwt.decode(form["client_assertion"], client["public_key"], algorithms=["RS256", "ES256"],
                                audience=[state.issuer, state.issuer + "/"])  # fmt: skip
        except jwt.PyJWTError as exc:
            return client_id, method, f"bad client assertion: {exc}"
        if claims.get("iss") != client_id or claims.get("sub") != client_id:
            return client_id, method, "assertion iss/sub must be the client id"
    elif method != "none" and secret != client.get("secret"):
        return client_id, method, "wrong client secret"
    return client_id, method, None


def build_mcp() -> Any:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("oauth-standin", log_level="WARNING")

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text back."""
        return text

    @server.tool()
    def write_note(text: str) -> str:
        """Write a note (needs the notes:write scope)."""
        return f"noted: {text}"

    return server


class Guard:
    """The resource server's side: a valid, unexpired Bearer token for /mcp, /sse and /messages; write_note needs
    the write scope (403 insufficient_scope: step-up)."""

    def __init__(self, state: State, http_app: Any, sse_app: Any, as_app: Any) -> None:
        self.state, self.http_app, self.sse_app, self.as_app = state, http_app, sse_app, as_app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return await self.http_app(scope, receive, send)
        path = scope.get("path", "")
        if not path.startswith(("/mcp", "/sse", "/messages")):
            return await self.as_app(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers") or []}
        prm = f"{self.state.base}/.well-known/oauth-protected-resource{'/sse' if path != '/mcp' else '/mcp'}"
        auth = headers.get("authorization", "")
        token = self.state.tokens.get(auth.removeprefix("Bearer ")) if auth.startswith("Bearer ") else None
        if token is None or token["exp"] < time.time():
            if auth:
                self.state.stats["bad_token"] += 1
            challenge = f'Bearer error="invalid_token", resource_metadata="{prm}"'
            if self.state.config["www_scope"]:
                challenge += f', scope="{self.state.config["www_scope"]}"'
            return await _send(send, 401, b'{"error": "invalid_token"}', challenge)
        try:
            message = json.loads(body) if body else {}
        except ValueError:
            message = {}
        if isinstance(message, dict) and message.get("method") == "tools/call":
            name = (message.get("params") or {}).get("name")
            self.state.stats["calls"].append({"tool": name, "scope": token["scope"]})
            need = self.state.config["write_scope"]
            if name == "write_note" and need not in token["scope"].split():
                challenge = f'Bearer error="insufficient_scope", scope="notes:read {need}", resource_metadata="{prm}"'
                return await _send(send, 403, b'{"error": "insufficient_scope"}', challenge)
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        app = self.http_app if path.startswith("/mcp") else self.sse_app
        await app(scope, replay, send)


async def _send(send: Any, status: int, body: bytes, challenge: str) -> None:
    headers = [(b"content-type", b"application/json"), (b"www-authenticate", challenge.encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def main() -> None:
    import uvicorn

    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args()
    state = State(f"http://127.0.0.1:{args.port}")
    server = build_mcp()
    app = Guard(state, server.streamable_http_app(host="127.0.0.1"), server.sse_app(host="127.0.0.1"), build(state))
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
