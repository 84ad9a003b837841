"""Client capabilities of an env's MCP sessions: how the env answers a server that asks it for input
(elicitation), for a language model's completion (sampling) or for its roots, and the ``clientInfo`` it sends.

Configured per env (``MCPEnv(elicitation=..., sampling=..., roots=...)``) and per server in ``mcp_config`` (the
same three keys; a server's own key wins over the env's, as its ``timeout`` does)::

    elicitation="decline"            # the default: every request for input is declined
    elicitation="accept_defaults"    # accept with each field's schema "default" (decline if a required one has none)
    elicitation=fn                   # fn(message, requested_schema) -> dict (accept with it) | None (decline)
    sampling=None                    # the default: refused
    sampling={"base_url": ..., "model": ..., "api_key": ...}   # an OpenAI-compatible chat endpoint
    sampling=fn                      # fn(messages, options) -> str | None (refuse); messages in OpenAI chat format
    roots=["/data", "file:///srv/docs", "{work}"]   # "{work}": the env's work folders (GAIA-v0: its data folder)

What the env answered is recorded on the tool call that asked (``info["tool_results"][i]["client_requests"]``), and
a request the env refused turns that call's result into an error the model sees (:mod:`.client_requests`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aworld_gym.base.errors import ConfigError
from aworld_gym.mcp.config import seconds

CLIENT_NAME = "aworld-gym"
ELICITATION_MODES = ("decline", "accept_defaults")
WORK_FOLDER = "{work}"
KEYS = ("elicitation", "sampling", "roots")  # the keys of a server entry (and of MCPEnv) this module reads
_ENDPOINT_KEYS = {"base_url", "model", "api_key", "timeout_s", "max_tokens"}

Root = tuple[str, str]  # (file:// URI, name)


@dataclass(frozen=True)
class SamplingEndpoint:
    """An OpenAI-compatible chat endpoint that answers servers' sampling requests.

    Attributes:
        base_url: ``.../v1`` (``/chat/completions`` is appended).
        model: the model name sent with every request.
        api_key: the bearer token (none sent when empty); never shown in a repr, a record or a log.
        timeout_s: per-request timeout.
        max_tokens: a cap on the ``maxTokens`` a server may ask for (``None``: the server's value).
    """

    base_url: str
    model: str
    api_key: str = field(default="", repr=False)
    timeout_s: float = 120.0
    max_tokens: int | None = None

    def fingerprint(self) -> tuple[Any, ...]:
        """What tells two endpoints apart (the key's digest, never the key)."""
        digest = hashlib.sha256(self.api_key.encode()).hexdigest()[:16] if self.api_key else ""
        return (self.base_url, self.model, digest, self.timeout_s, self.max_tokens)


@dataclass(frozen=True)
class Capabilities:
    """How an env answers the requests its MCP servers make to it (see the module docstring).

    Attributes:
        elicitation: ``"decline"``, ``"accept_defaults"`` or ``fn(message, requested_schema) -> dict | None``.
        sampling: ``None`` (refused), a :class:`SamplingEndpoint`, or ``fn(messages, options) -> str | None``.
        roots: the roots listed to servers (``(uri, name)`` pairs); ``None``: the roots capability is not declared.
        work_folders: what ``"{work}"`` in a server entry's own ``roots`` stands for.
    """

    elicitation: str | Callable[..., Any] = "decline"
    sampling: SamplingEndpoint | Callable[..., Any] | None = None
    roots: tuple[Root, ...] | None = None
    work_folders: tuple[str, ...] = field(default=(), compare=False)

    def key(self) -> tuple[Any, ...]:
        """Equal for envs that answer alike: only such envs share a pooled connection (a callable by identity)."""
        return (_ident(self.elicitation), _ident(self.sampling), self.roots)

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary (no secrets), for records and messages."""
        sampling = self.sampling
        return {
            "elicitation": self.elicitation if isinstance(self.elicitation, str) else "callable",
            "sampling": "refused" if sampling is None else
                        f"endpoint {sampling.model}" if isinstance(sampling, SamplingEndpoint) else "callable",
            "roots": None if self.roots is None else [uri for uri, _ in self.roots],
        }  # fmt: skip

    def merged(self, overrides: Mapping[str, Any], where: str) -> Capabilities:
        """These capabilities with a server entry's own ``elicitation`` / ``sampling`` / ``roots`` in their place;
        raises :class:`ConfigError` naming ``where`` for a bad one."""
        if not overrides:
            return self
        return Capabilities(
            _elicitation(overrides["elicitation"], where) if "elicitation" in overrides else self.elicitation,
            _sampling(overrides["sampling"], where) if "sampling" in overrides else self.sampling,
            _roots(overrides["roots"], where, self.work_folders) if "roots" in overrides else self.roots,
            self.work_folders,
        )


DEFAULT = Capabilities()


def parse_capabilities(
    elicitation: Any = "decline",
    sampling: Any = None,
    roots: Any = None,
    *,
    work_folders: Iterable[str | Path] = (),
    where: str = "MCPEnv",
) -> Capabilities:
    """Check and normalize the three settings; raises :class:`ConfigError` saying what to change.

    ``work_folders`` is what ``"{work}"`` in ``roots`` stands for (none: ``"{work}"`` is an error).
    """
    folders = tuple(str(f) for f in work_folders)
    return Capabilities(
        _elicitation(elicitation, where), _sampling(sampling, where), _roots(roots, where, folders), folders
    )


def client_info() -> Any:
    """The ``clientInfo`` of every session: ``aworld-gym`` and ``aworld_gym.__version__``."""
    from mcp_types import Implementation

    from aworld_gym.base.version import __version__

    return Implementation(name=CLIENT_NAME, version=__version__)


def _ident(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, SamplingEndpoint):
        return value.fingerprint()
    func = getattr(value, "__func__", None)  # a bound method is a new object at every access: key its parts
    return ("method", id(value.__self__), id(func)) if func is not None else ("callable", id(value))


def _elicitation(value: Any, where: str) -> str | Callable[..., Any]:
    if value is None:
        return "decline"
    if isinstance(value, str):
        if value not in ELICITATION_MODES:
            raise ConfigError(
                f"{where}: elicitation must be 'decline', 'accept_defaults' or a function "
                f"(message, requested_schema) -> dict | None; got {value!r}"
            )
        return value
    if callable(value):
        return value
    raise ConfigError(
        f"{where}: elicitation must be 'decline', 'accept_defaults' or a function, got {type(value).__name__}"
    )


def _sampling(value: Any, where: str) -> SamplingEndpoint | Callable[..., Any] | None:
    if value is None or value is False:
        return None
    if isinstance(value, SamplingEndpoint):
        return value
    if isinstance(value, Mapping):
        unknown = set(value) - _ENDPOINT_KEYS
        if unknown or not value.get("base_url") or not value.get("model"):
            raise ConfigError(
                f"{where}: sampling needs 'base_url' and 'model' (optional 'api_key', 'timeout_s', 'max_tokens'); "
                f"got keys {sorted(value)}"
            )
        base_url = str(value["base_url"]).rstrip("/")
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"{where}: sampling's base_url must be an http(s) URL, got {base_url!r}")
        timeout, cap = value.get("timeout_s", 120.0), value.get("max_tokens")
        timeout = seconds(timeout, f"{where}: sampling's timeout_s")
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ConfigError(f"{where}: sampling's max_tokens must be a positive integer, got {cap!r}")
        return SamplingEndpoint(base_url, str(value["model"]), str(value.get("api_key") or ""), float(timeout), cap)
    if callable(value):
        return value
    raise ConfigError(
        f"{where}: sampling must be None (refused), {{'base_url', 'model', 'api_key'?}} or a function "
        f"(messages, options) -> str | None; got {type(value).__name__}"
    )


def _roots(value: Any, where: str, work_folders: Iterable[str | Path]) -> tuple[Root, ...] | None:
    if value is None:
        return None
    if isinstance(value, str | Path) or not isinstance(value, Iterable):
        raise ConfigError(f"{where}: roots must be a list of folders or file:// URIs, got {type(value).__name__}")
    out: list[Root] = []
    for entry in value:
        if entry == WORK_FOLDER:
            folders = list(work_folders)
            if not folders:
                raise ConfigError(
                    f"{where}: roots has {WORK_FOLDER!r} (the env's work folders), and this env has none; "
                    "list the folders themselves"
                )
            out.extend(_root(f, where) for f in folders)
        else:
            out.append(_root(entry, where))
    return tuple(dict.fromkeys(out))  # the same root once


def _root(entry: Any, where: str) -> Root:
    if isinstance(entry, Path) or (isinstance(entry, str) and "://" not in entry):
        path = Path(entry).expanduser().resolve()
        return path.as_uri(), path.name or str(path)
    if isinstance(entry, str) and entry.startswith("file://"):
        from urllib.parse import unquote, urlparse

        path = unquote(urlparse(entry).path)
        if not path.startswith("/"):
            raise ConfigError(f"{where}: root {entry!r} is not an absolute file:// URI")
        return entry, Path(path).name or path
    raise ConfigError(f"{where}: a root is a folder path or a file:// URI (MCP roots are file:// only), got {entry!r}")
