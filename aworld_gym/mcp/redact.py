"""Secrets of an ``mcp_config`` never leave the process: one redaction, applied wherever config-derived text does.

An outside attack round found credentials of MCP server entries (``https://user:pass@host/mcp``, ``?api_key=``,
``Authorization`` headers, a stdio server's ``env``) in trajectory records, reports, log lines and serve-env's
answers: error messages name the server by its URL, a stdio server's stderr tail is quoted, a server prints its env.
Here:

- :func:`redact_url` shows a URL without its userinfo and with every query value as ``***``;
- every :class:`~aworld_gym.mcp.config.ServerSpec` registers its secret *values* (:meth:`~aworld_gym.mcp.config.ServerSpec.secret_values`) in the
  process's :data:`SECRETS` as it is made, so :func:`redact` replaces them in any text, whatever produced it (an
  HTTP error quoting the URL, a server echoing its token, a traceback);
- the edges apply :func:`redact`: a connection's error message, a tool result's text, the ``repr`` of a spec, and
  every log record of this package (and of the HTTP and MCP client libraries, which log request URLs), through
  :class:`RedactFilter`.

What counts as a secret value: the userinfo of a URL; the value of a query parameter, header, environment variable
or ``--flag value`` argument whose name says so (``auth``, ``token``, ``key``, ``secret``, ``pass``, ``cookie``,
``session``, ``credential``, ``signature``), and the token of an ``Authorization`` value; any other value of those
that looks like a credential (16 or more characters of a token's alphabet, with letters and digits, not a path).
Values shorter than 6 characters are not registered: they would blank out ordinary words.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

MASK = "***"
MIN_SECRET_CHARS = 6
SENSITIVE = re.compile(r"auth|token|key|secret|pass|pwd|cookie|session|credential|signature|sig$|bearer", re.I)
_CREDENTIAL = re.compile(r"[A-Za-z0-9_\-.~+/=:]{16,}")
_USERINFO = re.compile(r"(?<=://)[^/\s@'\"<>]+@")  # scheme://user:pass@host in any text
_SCHEMES = re.compile(r"^(?:bearer|basic|token|apikey|api-key)\s+", re.I)
# Loggers outside this package that print request URLs (httpx2 at INFO, the SDK's clients at DEBUG).
FOREIGN_LOGGERS = ("httpx", "httpx2", "mcp.client.streamable_http", "mcp.client.sse", "mcp.client.auth.oauth2",
                   "mcp.client.stdio", "mcp.shared.session")  # fmt: skip


def looks_like_credential(value: str) -> bool:
    """Whether ``value`` looks like a token or key: 16+ characters of a token's alphabet, letters and digits, not a
    path (no leading ``/``, ``.`` or ``~``)."""
    return (
        _CREDENTIAL.fullmatch(value) is not None
        and value[0] not in "/.~"
        and any(c.isdigit() for c in value)
        and any(c.isalpha() for c in value)
    )


def named_secrets(name: str, value: str) -> list[str]:
    """The secret values of one named setting (a header, env variable, query parameter or flag)."""
    if SENSITIVE.search(name):
        token = _SCHEMES.sub("", value.strip())
        return [value, token] if token != value else [value]
    return [value] if looks_like_credential(value) else []


def url_secrets(url: str) -> list[str]:
    """The secret values in ``url``: its userinfo and password (and a user name that looks like a token), query
    values (by name or look) and path segments that look like credentials, each also %-decoded."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found: list[str] = []
    if "@" in parts.netloc:
        userinfo = parts.netloc.rpartition("@")[0]
        user, _, password = userinfo.partition(":")
        basic = base64.b64encode(
            unquote(userinfo).encode("utf-8", "surrogatepass")
        ).decode()  # as an HTTP client sends it
        found += [userinfo, password, basic] + ([user] if looks_like_credential(unquote(user)) else [])
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        found += named_secrets(key, value)
    found += [seg for seg in parts.path.split("/") if looks_like_credential(unquote(seg))]
    return found + [unquote(v) for v in found]


class Secrets:
    """The secret values this process has been configured with; :meth:`redact` hides them in any text.

    Values only accumulate (a config's secrets stay secret after its env closes); at most ``limit`` are kept.
    """

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._lock = threading.Lock()

    def add(self, values: Iterable[str]) -> None:
        """Register ``values`` (those shorter than :data:`MIN_SECRET_CHARS` are ignored)."""
        new = {v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET_CHARS and v != MASK}
        with self._lock:
            new -= self._values
            if not new or len(self._values) >= self.limit:
                return
            self._values |= new
            ordered = sorted(self._values, key=len, reverse=True)  # longest first: a secret within a secret
            self._pattern = re.compile("|".join(re.escape(v) for v in ordered))
        guard_logs()

    def redact(self, text: str) -> str:
        """``text`` with every registered value, and the userinfo of any URL in it, replaced by ``***``."""
        if not isinstance(text, str) or not text:
            return text
        pattern = self._pattern
        if pattern is not None:
            text = pattern.sub(MASK, text)
        return _USERINFO.sub(MASK + "@", text) if "@" in text else text

    def __len__(self) -> int:
        return len(self._values)


SECRETS = Secrets()


def redact(text: str) -> str:
    """``text`` without the secrets of any server entry this process has read (see :class:`Secrets`)."""
    return SECRETS.redact(text)


def redact_json(value: Any) -> Any:
    """``value`` (JSON-ready data, e.g. a tool's ``structuredContent``) with the registered secrets hidden in its
    strings; ``None`` when it cannot be encoded (nested past Python's recursion limit)."""
    if value is None or not len(SECRETS):
        return value
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return None
    clean = redact(text)
    return value if clean == text else json.loads(clean)


def redact_url(url: str | None) -> str:
    """``url`` as it may be shown: no userinfo, every query value ``***``, registered secrets hidden."""
    if not url:
        return url or ""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = MASK + "@" + netloc.rpartition("@")[2]
    query = "&".join(f"{k}={MASK}" for k, _ in parse_qsl(parts.query, keep_blank_values=True)) or parts.query
    return redact(urlunsplit((parts.scheme, netloc, parts.path, query if parts.query else "", parts.fragment)))


class RedactFilter(logging.Filter):
    """A log filter that hides the registered secrets in a record's message and its exception text."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not len(SECRETS):
            return True
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a record that cannot be formatted is left to the handler's own error
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


_FILTER = RedactFilter()


def module_logger(name: str) -> logging.Logger:
    """The logger of one of our modules, with :class:`RedactFilter` on the object the module keeps.

    Attached at import to the very object the module logs through: a filter attached later by name reaches only
    the object ``logging.getLogger(name)`` returns then, which need not be the module's (a full ``make test`` run
    logged a server's stdout line with its secret through ``aworld_gym.mcp.transports.stdio`` after :func:`guard_logs` ran)."""
    logger = logging.getLogger(name)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger


def guard_logs() -> None:
    """Attach :class:`RedactFilter` (once) to the loggers of this package and to :data:`FOREIGN_LOGGERS`. A logger's
    filter sees only its own records, so each module's logger gets it by name."""
    package = __name__.rpartition(".")[0]  # aworld_gym.mcp, and every module of its sub-packages (not imported here)
    root = Path(__file__).parent
    names = [".".join((package, *f.relative_to(root).with_suffix("").parts)) for f in root.rglob("*.py")]
    names = [n.removesuffix(".__init__") for n in names]
    for name in (package, *names, *FOREIGN_LOGGERS):
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


def redact_config(text: str, mcp_config: Any, sampling: Any = None) -> str:
    """``text`` with every literal secret of ``mcp_config`` (``auth`` secrets, ``headers`` and ``env`` values, a
    server's ``sampling`` API key) and of the env's ``sampling`` option replaced by ``***``: for messages that
    repeat a config (gymnasium's TypeError repeats every kwarg)."""
    if isinstance(mcp_config, str) and mcp_config.lstrip().startswith("{"):
        with contextlib.suppress(ValueError):
            mcp_config = json.loads(mcp_config)
    entries = mcp_config.get("mcpServers", {}) if isinstance(mcp_config, Mapping) else {}
    found: list[str] = [sampling["api_key"]] if isinstance(sampling, Mapping) and "api_key" in sampling else []
    for entry in entries.values() if isinstance(entries, Mapping) else ():
        if not isinstance(entry, Mapping):
            continue
        if isinstance(entry.get("sampling"), Mapping) and "api_key" in entry["sampling"]:
            found.append(entry["sampling"]["api_key"])
        for key in ("headers", "env"):
            if isinstance(entry.get(key), Mapping):
                found += [str(v) for v in entry[key].values()]
        if isinstance(entry.get("url"), str):
            found += url_secrets(entry["url"])  # userinfo, query values
        auth = entry.get("auth")
        if isinstance(auth, Mapping):
            idp = auth.get("idp") if isinstance(auth.get("idp"), Mapping) else {}
            found += [v for v in (auth.get("client_secret"), auth.get("private_key"), idp.get("id_token"),
                                  idp.get("client_secret")) if isinstance(v, str)]  # fmt: skip
    for secret in sorted((s for s in found if isinstance(s, str) and len(s) >= 4), key=len, reverse=True):
        for form in (secret, repr(secret)[1:-1], json.dumps(secret)[1:-1]):  # as is, in a repr, in JSON
            text = text.replace(form, "***")
    return redact(text)  # and every secret of the configs this process has read
