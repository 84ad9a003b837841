"""The MCP SDK's OAuth providers, with what aworld-gym adds to them.

Each provider here is the SDK's (``OAuthClientProvider`` for the authorization code with PKCE, dynamic
registration, client ID metadata documents and step-up; ``ClientCredentialsOAuthProvider``) plus :class:`_AWorld`:

- G1: a token loaded from the store gets its expiry back (the store keeps the absolute time) and the metadata that
  says where to refresh it, and expiry has a small leeway, so a stale token is refreshed before use instead of
  being sent and refused (and then a new login);
- G3: a configured ``scope`` is what is asked for (the SDK would replace it with the one it selects on a 401);
  a 403 ``insufficient_scope`` still adds the challenged scopes (step-up);
- G5: an authorization server whose metadata does not list PKCE ``S256`` is refused (MCP spec, MUST);
- ``private_key_jwt`` works for every grant and for refresh (the SDK signs only its client-credentials request);
- a pinned ``issuer`` is the only authorization server a pre-registered client's credentials go to;
- a token another event loop or process stored is picked up instead of logging in again (shared store).

These rely on the SDK's provider internals (``_initialize``, ``_auth_flow``, ``_perform_authorization``), which
``mcp<3`` keeps; tests/mcp/test_auth.py covers each.
"""

from __future__ import annotations

import contextlib
import time
import uuid
import warnings
from collections.abc import AsyncGenerator
from typing import Any

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError, OAuthTokenError
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.shared.auth import (
    JWT_BEARER_GRANT_TYPE,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    ProtectedResourceMetadata,
)
from pydantic import PrivateAttr

from aworld_gym.mcp.auth import AuthConfig, AuthorizationError, IdpConfig, token_endpoint_auth_method
from aworld_gym.mcp.auth.consent import Consent
from aworld_gym.mcp.auth.store import StoreView, backend

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
LEEWAY_S = 30.0  # a token is renewed this long before it expires (at most a tenth of its lifetime)


class _ScopedMetadata(OAuthClientMetadata):
    """Client metadata whose scope, when a 401 makes the SDK select one, is the configured scope instead (G3)."""

    _pinned: str | None = PrivateAttr(default=None)
    _pin_next: bool = PrivateAttr(default=False)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "scope" and self._pin_next:
            self._pin_next = False
            value = self._pinned
        super().__setattr__(name, value)


class _AWorld:
    """What every provider here adds to the SDK's (see the module doc). Mixed in before the SDK class."""

    context: Any
    _initialized: bool
    step: str = "authorization"

    def _aworld_setup(self, store: StoreView, scope: str | None, signer: Any) -> None:
        ctx = self.context
        self.store, self.signer, self.consent = store, signer, getattr(self, "consent", None)
        metadata = _ScopedMetadata.model_validate(ctx.client_metadata.model_dump())
        metadata._pinned = scope
        ctx.client_metadata = metadata
        original = ctx.prepare_token_auth
        ctx.update_token_expiry = lambda token: _set_expiry(ctx, token)
        ctx.prepare_token_auth = lambda data, headers=None: _token_auth(ctx, original, signer, data, headers)

    async def _initialize(self) -> None:
        await super()._initialize()  # type: ignore[misc]
        ctx = self.context
        if ctx.current_tokens is not None and ctx.current_tokens.expires_in is not None:  # G1: the kept expiry
            ctx.update_token_expiry(ctx.current_tokens)
        if ctx.current_tokens is not None and ctx.oauth_metadata is None:
            # Where to refresh them: without the metadata the SDK would post the refresh to <origin>/token.
            saved = await self.store.get_metadata()
            with contextlib.suppress(ValueError):
                if saved.get("server"):
                    ctx.oauth_metadata = OAuthMetadata.model_validate(saved["server"])
                if saved.get("resource"):
                    ctx.protected_resource_metadata = ProtectedResourceMetadata.model_validate(saved["resource"])
                ctx.auth_server_url = saved.get("auth_server_url") or ctx.auth_server_url

    async def _handle_token_response(self, response: httpx2.Response) -> None:
        await super()._handle_token_response(response)  # type: ignore[misc]
        ctx = self.context
        dump = lambda m: m.model_dump(mode="json", exclude_none=True) if m is not None else None  # noqa: E731
        await self.store.set_metadata({"server": dump(ctx.oauth_metadata), "auth_server_url": ctx.auth_server_url,
                                       "resource": dump(ctx.protected_resource_metadata)})  # fmt: skip

    async def _auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if self.store.changed():
            self._initialized = False  # reload what another loop or process stored
        flow = super()._auth_flow(request)  # type: ignore[misc]
        try:
            outgoing = await flow.__anext__()  # the lock is held from here on
            self.context.client_metadata._pin_next = False  # not left over from a flow that failed
            while True:
                response = yield outgoing
                if outgoing is request and response.status_code == 401 and self.context.client_metadata._pinned:
                    self.context.client_metadata._pin_next = True
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()

    def secrets(self) -> list[str]:
        """Every secret this provider holds now (to scrub from error text)."""
        ctx, out = self.context, list(getattr(self, "_config_secrets", []))
        if ctx.current_tokens is not None:
            out += [ctx.current_tokens.access_token, ctx.current_tokens.refresh_token or ""]
        if ctx.client_info is not None:
            out.append(ctx.client_info.client_secret or "")
        if self.consent is not None:
            out.append(self.consent.last_code or "")
        return [s for s in out if s and len(s) >= 4]


class AuthCodeProvider(_AWorld, OAuthClientProvider):
    """Authorization code with PKCE: DCR, CIMD or a pre-registered client; headless or pluggable consent."""

    def __init__(self, *args: Any, issuer: str | None = None, consent: Consent, **kwargs: Any) -> None:
        super().__init__(*args, redirect_handler=consent.redirect, callback_handler=consent.callback, **kwargs)
        self.issuer, self.consent = issuer, consent

    def _select_authorization_server(self, advertised: list[str]) -> str:
        return _pinned_server(advertised, self.issuer)

    async def _perform_authorization_code_grant(self) -> tuple[str, str]:
        self.step = "authorization request (consent)"
        metadata = self.context.oauth_metadata
        if metadata is not None and "S256" not in (metadata.code_challenge_methods_supported or []):  # G5
            raise OAuthFlowError("the authorization server's metadata does not list PKCE S256 in "
                                 "code_challenge_methods_supported: refusing to proceed (MCP authorization spec)")  # fmt: skip
        try:
            return await super()._perform_authorization_code_grant()
        except AuthorizationError as exc:
            info = self.context.client_info
            registered = info is not None and self.store.fixed_client is None
            if self.consent.client_refused and registered and info.client_id != self.context.client_metadata_url:
                # A registration the server refuses (it may have forgotten it) is dropped: the next connect registers.
                await self.store.forget_client()
                self.context.client_info = None
                raise AuthorizationError(exc.step, exc.detail + " (the dynamic registration was dropped; the next "
                                         "connect registers again)") from None  # fmt: skip
            raise


class ClientCredentialsProvider(_AWorld, ClientCredentialsOAuthProvider):
    """Client credentials (unattended runs): client_secret_basic, client_secret_post or private_key_jwt."""

    def __init__(self, url: str, store: StoreView, client_id: str, secret: str | None, method: str,
                 scope: str | None, issuer: str | None) -> None:  # fmt: skip
        with warnings.catch_warnings():  # issuer=None is the SDK's deprecated default; ours is documented
            warnings.simplefilter("ignore")
            super().__init__(url, store, client_id, secret or "", "client_secret_basic", scope, issuer)
        self._fixed_client_info = OAuthClientInformationFull(
            redirect_uris=None, client_id=client_id, client_secret=secret, grant_types=["client_credentials"],
            token_endpoint_auth_method=method, scope=scope)  # fmt: skip
        self.context.client_metadata.token_endpoint_auth_method = method


class _FixedClient(OAuthClientProvider):
    """A provider whose client is the configured one (no registration)."""

    fixed_client: OAuthClientInformationFull

    async def _initialize(self) -> None:
        self.context.current_tokens = await self.context.storage.get_tokens()
        self.context.client_info = self.fixed_client
        self._initialized = True


class IdJagProvider(_AWorld, _FixedClient):
    """SEP-990 cross-app access: the IdP exchanges its ID token for an ID-JAG (RFC 8693), which the authorization
    server (found through the resource's metadata, or pinned by ``issuer``) takes as a jwt-bearer grant (RFC 7523)."""

    def __init__(self, url: str, store: StoreView, client: OAuthClientInformationFull, idp: IdpConfig,
                 idp_secrets: tuple[str, str | None], scope: str | None, issuer: str | None, timeout: float) -> None:  # fmt: skip
        metadata = OAuthClientMetadata(redirect_uris=None, grant_types=[JWT_BEARER_GRANT_TYPE], scope=scope,
                                       token_endpoint_auth_method=client.token_endpoint_auth_method)  # fmt: skip
        super().__init__(url, metadata, store)
        self.fixed_client, self.idp, self.issuer, self.timeout = client, idp, issuer, timeout
        self._id_token, self._idp_secret = idp_secrets

    def _select_authorization_server(self, advertised: list[str]) -> str:
        return _pinned_server(advertised, self.issuer)

    async def _perform_authorization(self) -> httpx2.Request:
        ctx = self.context
        if ctx.oauth_metadata is None:
            raise OAuthFlowError("no authorization server metadata: the jwt-bearer grant needs the server's issuer")
        audience, resource = str(ctx.oauth_metadata.issuer), ctx.get_resource_url()
        self.step = "identity provider token exchange (ID-JAG)"
        id_jag = await self._exchange_at_idp(audience, resource)
        self.step = "token request (jwt-bearer, ID-JAG)"
        data = {"grant_type": JWT_BEARER_GRANT_TYPE, "assertion": id_jag, "client_id": self.fixed_client.client_id}
        if ctx.client_metadata.scope:
            data["scope"] = ctx.client_metadata.scope
        data, headers = ctx.prepare_token_auth(data, {"Content-Type": "application/x-www-form-urlencoded"})
        return httpx2.Request("POST", self._get_token_endpoint(), data=data, headers=headers)

    async def _exchange_at_idp(self, audience: str, resource: str) -> str:
        data = {"grant_type": TOKEN_EXCHANGE, "subject_token": self._id_token, "audience": audience,
                "subject_token_type": "urn:ietf:params:oauth:token-type:id_token", "resource": resource,
                "requested_token_type": "urn:ietf:params:oauth:token-type:id-jag", "client_id": self.idp.client_id}  # fmt: skip
        if self.idp.scope:
            data["scope"] = self.idp.scope
        auth = httpx2.BasicAuth(self.idp.client_id, self._idp_secret) if self._idp_secret else None
        try:
            async with httpx2.AsyncClient(timeout=self.timeout, follow_redirects=False) as client:
                response = await client.post(self.idp.token_endpoint, data=data, auth=auth)
        except httpx2.TimeoutException:
            raise AuthorizationError(self.step, f"the IdP did not answer within {self.timeout:g} s") from None
        except httpx2.HTTPError as exc:
            raise AuthorizationError(self.step, f"could not reach the IdP: {type(exc).__name__}") from None
        try:
            token = response.json().get("access_token") if response.status_code == 200 else None
        except ValueError:
            token = None
        if not isinstance(token, str) or not token:
            raise AuthorizationError(self.step, f"the IdP answered HTTP {response.status_code} without an ID-JAG")
        return token


def build_provider(url: str, cfg: AuthConfig, key: str, timeout: float) -> _AWorld:
    """The provider of one (server URL, identity) on the calling event loop."""
    secret = cfg.client_secret.reveal("auth.client_secret") if cfg.client_secret else None
    pem = cfg.private_key.reveal("auth.private_key") if cfg.private_key else None
    method = token_endpoint_auth_method(cfg)
    signer = _signer(cfg.client_id or "", pem, cfg.signing_algorithm) if pem else None
    store = backend(cfg.token_store)
    provider: _AWorld
    if cfg.grant == "client_credentials":
        view = StoreView(store, key, url)
        provider = ClientCredentialsProvider(url, view, cfg.client_id or "", secret, method or "client_secret_basic",
                                             cfg.scope, cfg.issuer)  # fmt: skip
    elif cfg.grant == "jwt_bearer_id_jag" and cfg.idp is not None:
        view = StoreView(store, key, url)
        client = OAuthClientInformationFull(redirect_uris=None, client_id=cfg.client_id or "", client_secret=secret,
                                            grant_types=[JWT_BEARER_GRANT_TYPE], token_endpoint_auth_method=method)  # fmt: skip
        idp_secrets = (cfg.idp.id_token.reveal("auth.idp.id_token"),
                       cfg.idp.client_secret.reveal("auth.idp.client_secret") if cfg.idp.client_secret else None)  # fmt: skip
        provider = IdJagProvider(url, view, client, cfg.idp, idp_secrets, cfg.scope, cfg.issuer, timeout)
        provider._config_secrets = [s for s in idp_secrets if s]  # type: ignore[attr-defined]
    else:
        grants = ["authorization_code", "refresh_token"]
        fixed = None
        if cfg.client_id:
            fixed = OAuthClientInformationFull(client_id=cfg.client_id, client_secret=secret, redirect_uris=[cfg.redirect_uri],
                                               grant_types=grants, token_endpoint_auth_method=method)  # fmt: skip
        loopback = (httpx2.URL(cfg.redirect_uri).host or "") in ("127.0.0.1", "localhost", "::1", "[::1]")
        metadata = OAuthClientMetadata(redirect_uris=[cfg.redirect_uri], grant_types=grants, scope=cfg.scope,
                                       token_endpoint_auth_method=cfg.token_endpoint_auth_method if not cfg.client_id else method,
                                       client_name=cfg.client_name, application_type="native" if loopback else "web")  # fmt: skip
        consent = Consent(cfg.consent, cfg.redirect_uri, timeout)
        provider = AuthCodeProvider(url, metadata, StoreView(store, key, url, fixed), issuer=cfg.issuer,
                                    consent=consent, client_metadata_url=cfg.client_metadata_url)  # fmt: skip
    provider._aworld_setup(provider.context.storage, cfg.scope, signer)
    provider._config_secrets = [*getattr(provider, "_config_secrets", []), *(s for s in (secret, pem) if s)]  # type: ignore[attr-defined]
    return provider


def _pinned_server(advertised: list[str], issuer: str | None) -> str:
    """The advertised authorization server that is the pinned ``issuer`` (refuse any other), else the first."""
    if issuer is None:
        return advertised[0]
    norm = lambda u: u.rstrip("/")  # noqa: E731
    for server in advertised:
        if norm(server) == norm(issuer):
            return server
    raise OAuthFlowError(f"the server names authorization servers {advertised}, not the configured issuer {issuer}")


def _set_expiry(ctx: Any, token: Any) -> None:
    """Expiry with a leeway (the SDK has none): a token is renewed a little before the server would refuse it."""
    if token.expires_in is None:
        ctx.token_expiry_time = None
        return
    lifetime = float(token.expires_in)
    ctx.token_expiry_time = time.time() + lifetime - min(LEEWAY_S, lifetime / 10)


def _token_auth(ctx: Any, original: Any, signer: Any, data: dict[str, str], headers: dict[str, str] | None) -> Any:
    """The SDK's client authentication at the token endpoint, plus ``private_key_jwt`` (RFC 7523 §2.2) for every
    grant and for refresh."""
    info = ctx.client_info
    if info is None or info.token_endpoint_auth_method != "private_key_jwt":
        return original(data, headers)
    if signer is None:
        raise OAuthTokenError("the client is registered for private_key_jwt, but no 'private_key' is configured")
    metadata = ctx.oauth_metadata
    audience = str(metadata.issuer) if metadata is not None else ctx.get_authorization_base_url(ctx.server_url)
    data = {**data, "client_id": info.client_id, "client_assertion_type": ASSERTION_TYPE,
            "client_assertion": signer(audience)}  # fmt: skip
    return data, headers if headers is not None else {}


def _signer(client_id: str, pem: str, algorithm: str) -> Any:
    def sign(audience: str) -> str:
        import jwt

        now = int(time.time())
        claims = {"iss": client_id, "sub": client_id, "aud": audience, "iat": now, "exp": now + 300,
                  "jti": uuid.uuid4().hex}  # fmt: skip
        try:
            return jwt.encode(claims, pem, algorithm=algorithm)
        except Exception as exc:  # noqa: BLE001 - a bad key is a configuration error; its text never holds the key
            raise OAuthTokenError(f"cannot sign the private_key_jwt assertion with the configured private_key "
                                  f"({algorithm}): {type(exc).__name__}") from None  # fmt: skip

    return sign
