"""OAuth 2.1 for HTTP MCP servers: the ``"auth"`` object of an ``mcp_config`` entry (MCP authorization spec).

::

    {"mcpServers": {"remote": {"type": "streamable-http", "url": "https://mcp.example.com/mcp",
        "auth": {"grant": "client_credentials", "client_id": "trainer", "client_secret": {"env": "REMOTE_SECRET"},
                 "issuer": "https://auth.example.com"}}}}

This module parses and checks that object (:func:`parse_auth`, at ``gym.make``) ; :mod:`~aworld_gym.mcp.auth.connect` gives each connection its
``httpx2.Auth`` (at connect, on the connection's event loop). The flow itself is the MCP
SDK's (``mcp.client.auth``: discovery, registration, PKCE, refresh, step-up) with the gaps filled in
:mod:`aworld_gym.mcp.auth.providers`, :mod:`~aworld_gym.mcp.auth.store`, :mod:`~aworld_gym.mcp.auth.consent` and
:mod:`~aworld_gym.mcp.auth.transport`. Nothing here imports the SDK or httpx2 until a connection needs them.

Secrets (``client_secret``, ``private_key``, ``idp.id_token``) are :class:`Secret` objects: a literal or where to
read it (``{"env": NAME}``, ``{"file": PATH}``), resolved at connect time in the process that connects (a Ray
worker resolves the reference from its own environment); their ``repr`` never shows a value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aworld_gym.base.errors import AWorldGymError, ConfigError

GRANTS = ("authorization_code", "client_credentials", "jwt_bearer_id_jag")
AUTH_METHODS = ("client_secret_basic", "client_secret_post", "none", "private_key_jwt")
DEFAULT_REDIRECT_URI = "http://127.0.0.1:33418/callback"
# The bound on each authorization request (metadata, registration, consent page, token); a smaller server timeout wins.
REQUEST_TIMEOUT_S = 20.0
_KEYS = ("grant", "client_id", "client_secret", "token_endpoint_auth_method", "private_key", "signing_algorithm",
         "client_metadata_url", "client_name", "redirect_uri", "scope", "consent", "token_store", "issuer", "idp")  # fmt: skip
_IDP_KEYS = ("token_endpoint", "client_id", "id_token", "client_secret", "issuer", "scope")
_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


class AuthorizationError(AWorldGymError):
    """An OAuth step failed; ``step`` names it (e.g. ``"token request (authorization code)"``). The text is scrubbed
    of secrets and cut short."""

    def __init__(self, step: str, detail: str) -> None:
        super().__init__(f"OAuth authorization failed at {step}: {detail}")
        self.step, self.detail = step, detail


@dataclass(frozen=True, repr=False)
class Secret:
    """A secret: a literal ``value``, or the name of an environment variable (``env``) or a file (``file``) that
    holds it. ``repr``/``str`` show only where it comes from."""

    value: str | None = None
    env: str | None = None
    file: str | None = None

    def __repr__(self) -> str:
        if self.env:
            return f"Secret(env={self.env!r})"
        return f"Secret(file={self.file!r})" if self.file else "Secret(***)"

    __str__ = __repr__

    def reveal(self, what: str) -> str:
        """The secret's value; a :class:`ConfigError` naming ``what`` (never the value) when it cannot be read."""
        if self.env:
            value = os.environ.get(self.env, "")
            if not value:
                raise ConfigError(f"{what}: the environment variable {self.env} is not set")
            return value
        if self.file:
            path = Path(self.file).expanduser()
            try:
                value = path.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigError(f"{what}: cannot read {str(path)!r}: {exc.strerror}") from None
            if not value:
                raise ConfigError(f"{what}: {str(path)!r} is empty")
            return value
        return self.value or ""


@dataclass(frozen=True, repr=False)
class IdpConfig:
    """The enterprise identity provider of the ``jwt_bearer_id_jag`` grant (SEP-990): where the ID-JAG comes from."""

    token_endpoint: str
    client_id: str
    id_token: Secret
    client_secret: Secret | None = None
    issuer: str | None = None
    scope: str | None = None

    def __repr__(self) -> str:
        return f"IdpConfig(token_endpoint={self.token_endpoint!r}, client_id={self.client_id!r}, id_token=***)"


@dataclass(frozen=True, repr=False)
class AuthConfig:
    """A server entry's ``"auth"`` object, checked (see the module doc and docs/env-mcp.md for each key)."""

    grant: str = "authorization_code"
    client_id: str | None = None
    client_secret: Secret | None = None
    token_endpoint_auth_method: str | None = None  # None: what dynamic registration assigns
    private_key: Secret | None = None
    signing_algorithm: str = "RS256"
    client_metadata_url: str | None = None
    client_name: str = "aworld-gym"
    redirect_uri: str = DEFAULT_REDIRECT_URI
    scope: str | None = None
    consent: str = "headless"
    token_store: str | None = None
    issuer: str | None = None
    idp: IdpConfig | None = None

    def __repr__(self) -> str:
        shown = {k: v for k, v in self.describe().items() if v is not None}
        return "AuthConfig(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"

    def describe(self) -> dict[str, Any]:
        """The configuration with every secret shown as ``"***"`` (or where it is read from)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = str(value) if isinstance(value, Secret | IdpConfig) else value
        return out


def parse_auth(server: str, kind: str, value: Any) -> AuthConfig | Any:
    """Check an entry's ``"auth"`` value: an object (-> :class:`AuthConfig`), an ``httpx2.Auth`` (used as given),
    or a zero-argument callable returning one (called once per event loop). Error messages never repeat a value
    that could be a secret."""
    where = f"mcpServers[{server!r}].auth"
    if kind not in ("sse", "streamable-http"):
        raise ConfigError(f"{where}: OAuth is for HTTP servers (sse, streamable-http); a {kind} server gets "
                          "credentials through its 'env'")  # fmt: skip
    if isinstance(value, AuthConfig):
        return _checked(where, value)
    if not isinstance(value, Mapping):
        if is_httpx_auth(value) or (callable(value) and not isinstance(value, type)):
            return value
        raise ConfigError(f"{where} must be an object (see docs/env-mcp.md, Authorization) or an httpx2.Auth, "
                          f"got {type(value).__name__}")  # fmt: skip
    unknown = set(value) - set(_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; known: {list(_KEYS)}")
    grant = value.get("grant", "authorization_code")
    if grant not in GRANTS:
        raise ConfigError(f"{where}: 'grant' must be one of {list(GRANTS)}, got {grant!r}")
    text = lambda key, default=None: _text(where, key, value.get(key, default))  # noqa: E731
    cfg = AuthConfig(
        grant=grant,
        client_id=text("client_id"),
        client_secret=_secret(where, "client_secret", value.get("client_secret")),
        token_endpoint_auth_method=text("token_endpoint_auth_method"),
        private_key=_secret(where, "private_key", value.get("private_key")),
        signing_algorithm=text("signing_algorithm", "RS256") or "RS256",
        client_metadata_url=text("client_metadata_url"),
        client_name=text("client_name", "aworld-gym") or "aworld-gym",
        redirect_uri=text("redirect_uri", DEFAULT_REDIRECT_URI) or DEFAULT_REDIRECT_URI,
        scope=_scope(where, value.get("scope")),
        consent=text("consent", "headless") or "headless",
        token_store=text("token_store"),
        issuer=text("issuer"),
        idp=_idp(where, value.get("idp")),
    )
    return _checked(where, cfg)


def _checked(where: str, cfg: AuthConfig) -> AuthConfig:
    method = cfg.token_endpoint_auth_method
    if method is not None and method not in AUTH_METHODS:
        raise ConfigError(f"{where}: 'token_endpoint_auth_method' must be one of {list(AUTH_METHODS)}, got {method!r}")
    if cfg.signing_algorithm not in _ALGORITHMS:
        raise ConfigError(f"{where}: 'signing_algorithm' must be one of {list(_ALGORITHMS)}")
    for key in ("redirect_uri", "issuer"):
        if getattr(cfg, key) is not None and not _http_url(getattr(cfg, key)):
            raise ConfigError(f"{where}: {key!r} must be an http(s) URL")
    url = cfg.client_metadata_url
    if url is not None and (urlsplit(url).scheme != "https" or urlsplit(url).path in ("", "/")):
        raise ConfigError(f"{where}: 'client_metadata_url' must be an https URL with a path (the client ID metadata "
                          "document you host)")  # fmt: skip
    consent = cfg.consent
    if consent != "headless" and (consent.count(":") != 1 or not all(consent.split(":"))):
        raise ConfigError(f'{where}: \'consent\' must be "headless" or "module.path:callable", got {consent!r}')
    if method == "private_key_jwt" and cfg.private_key is None:
        raise ConfigError(f"{where}: token_endpoint_auth_method private_key_jwt needs a 'private_key' (PEM)")
    if method == "none" and cfg.client_secret is not None:
        raise ConfigError(f"{where}: token_endpoint_auth_method none is a public client: remove 'client_secret'")
    if method in ("client_secret_basic", "client_secret_post") and cfg.client_id and cfg.client_secret is None:
        raise ConfigError(f"{where}: token_endpoint_auth_method {method} needs a 'client_secret'")
    if (cfg.client_secret is not None or cfg.private_key is not None) and not cfg.client_id:
        raise ConfigError(f"{where}: a 'client_secret' or 'private_key' goes with the 'client_id' it belongs to")
    if cfg.grant != "authorization_code":
        if not cfg.client_id:
            raise ConfigError(f"{where}: the {cfg.grant} grant needs a pre-registered 'client_id'")
        if cfg.client_secret is None and cfg.private_key is None:
            raise ConfigError(f"{where}: the {cfg.grant} grant needs a 'client_secret' or a 'private_key'")
        if method == "none":
            raise ConfigError(f"{where}: the {cfg.grant} grant needs client authentication (not 'none')")
    if (cfg.grant == "jwt_bearer_id_jag") != (cfg.idp is not None):
        raise ConfigError(f"{where}: 'idp' goes with (and only with) the jwt_bearer_id_jag grant")
    if cfg.grant == "jwt_bearer_id_jag" and cfg.client_secret is None:
        raise ConfigError(f"{where}: the jwt_bearer_id_jag grant needs the client's 'client_secret'")
    return cfg


def token_endpoint_auth_method(cfg: AuthConfig) -> str | None:
    """The method the client authenticates with (``None``: the one dynamic registration assigns)."""
    if cfg.token_endpoint_auth_method:
        return cfg.token_endpoint_auth_method
    if cfg.private_key is not None:
        return "private_key_jwt"
    if cfg.client_secret is not None:
        return "client_secret_basic"
    return "none" if cfg.client_id else None


def _text(where: str, key: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: {key!r} must be a non-empty string")
    return value.strip()


def _scope(where: str, value: Any) -> str | None:
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) and v.strip() for v in value):
        return " ".join(v.strip() for v in value)
    return _text(where, "scope", value)


def _secret(where: str, key: str, value: Any) -> Secret | None:
    if value is None:
        return None
    if isinstance(value, Secret):
        return value
    if isinstance(value, str) and value.strip():
        return Secret(value=value.strip() if key != "private_key" else value)
    if isinstance(value, Mapping) and len(value) == 1:
        (kind, ref), = value.items()  # fmt: skip
        if kind in ("env", "file") and isinstance(ref, str) and ref.strip():
            return Secret(**{kind: ref.strip()})
    raise ConfigError(f'{where}: {key!r} must be a string, {{"env": "NAME"}} or {{"file": "PATH"}}')


def _idp(where: str, value: Any) -> IdpConfig | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: 'idp' must be an object with token_endpoint, client_id and id_token")
    unknown = set(value) - set(_IDP_KEYS)
    if unknown:
        raise ConfigError(f"{where}.idp: unknown keys {sorted(unknown)}; known: {list(_IDP_KEYS)}")
    endpoint, client_id = _text(where, "idp.token_endpoint", value.get("token_endpoint")), value.get("client_id")
    token = _secret(where, "idp.id_token", value.get("id_token"))
    if not endpoint or not _http_url(endpoint) or token is None or not isinstance(client_id, str) or not client_id:
        raise ConfigError(f"{where}: 'idp' needs an http(s) 'token_endpoint', a 'client_id' and an 'id_token'")
    return IdpConfig(endpoint, client_id, token, _secret(where, "idp.client_secret", value.get("client_secret")),
                     _text(where, "idp.issuer", value.get("issuer")), _scope(where, value.get("scope")))  # fmt: skip


def _http_url(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def is_httpx_auth(value: Any) -> bool:
    try:
        import httpx2
    except ImportError:  # pragma: no cover - httpx2 is a dependency
        return False
    return isinstance(value, httpx2.Auth)
