"""Where OAuth tokens and registered clients are kept: in memory for the process (the default), or in a folder
(``"token_store": PATH``) so later runs and other processes reuse them without another login.

The SDK's ``OAuthToken`` keeps only the relative ``expires_in``; a stored token would look valid forever after a
restart (gap G1). Entries here keep the absolute ``expires_at`` and hand back a token whose ``expires_in`` is what
is left of it. Files are written atomically with mode 0600 in a folder of mode 0700.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from aworld_gym.mcp.redact import module_logger

logger = module_logger(__name__)


class MemoryBackend:
    """The process's tokens, one entry per identity; shared by every event loop (hence the thread lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, Any]] = {}
        self._versions: dict[str, int] = {}

    def read(self, key: str) -> tuple[dict[str, Any], Any]:
        with self._lock:
            return dict(self._data.get(key, {})), self._versions.get(key, 0)

    def write(self, key: str, update: dict[str, Any]) -> Any:
        with self._lock:
            self._data[key] = {**self._data.get(key, {}), **update}
            self._versions[key] = self._versions.get(key, 0) + 1
            return self._versions[key]

    def version(self, key: str) -> Any:
        with self._lock:
            return self._versions.get(key, 0)


class FileBackend:
    """One JSON file per identity in ``folder``, written atomically (mode 0600; the folder 0700)."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder).expanduser()
        self._lock = threading.Lock()

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def read(self, key: str) -> tuple[dict[str, Any], Any]:
        path = self._path(key)
        with self._lock:
            version = self._version(path)
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                return {}, version
            except (OSError, ValueError) as exc:
                logger.warning("OAuth token store %s is unreadable (%s); starting afresh", path, type(exc).__name__)
                return {}, version
            return (data if isinstance(data, dict) else {}), version

    def write(self, key: str, update: dict[str, Any]) -> Any:
        path = self._path(key)
        with self._lock:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                data = {}
            data = {**(data if isinstance(data, dict) else {}), **update}
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.folder)  # mkstemp: mode 0600
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(data, f)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            return self._version(path)

    def version(self, key: str) -> Any:
        return self._version(self._path(key))

    @staticmethod
    def _version(path: Path) -> Any:
        try:
            st = path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)


_memory = MemoryBackend()
_files: dict[str, FileBackend] = {}
_files_lock = threading.Lock()


def backend(token_store: str | None) -> MemoryBackend | FileBackend:
    """The process's backend for a ``token_store`` setting (``None``: memory)."""
    if token_store is None:
        return _memory
    folder = str(Path(token_store).expanduser().resolve())
    with _files_lock:
        return _files.setdefault(folder, FileBackend(folder))


class StoreView:
    """The SDK's ``TokenStorage`` for one identity. A pre-registered client (``fixed_client``) is always the client;
    a registered one is kept with the tokens (with the issuer the SDK binds it to)."""

    def __init__(self, store: MemoryBackend | FileBackend, key: str, server_url: str, fixed_client: Any = None):
        self.store, self.key, self.server_url, self.fixed_client = store, key, server_url, fixed_client
        self._seen: Any = None

    async def get_tokens(self) -> Any:
        from mcp.shared.auth import OAuthToken

        data, self._seen = self.store.read(self.key)
        raw = data.get("tokens")
        if not isinstance(raw, dict):
            return None
        raw = dict(raw)
        expires_at = raw.pop("expires_at", None)
        if isinstance(expires_at, int | float):
            raw["expires_in"] = max(0, int(expires_at - time.time()))
        try:
            return OAuthToken.model_validate(raw)
        except ValueError:
            return None

    async def set_tokens(self, tokens: Any) -> None:
        dump = tokens.model_dump(mode="json", exclude_none=True)
        if tokens.expires_in is not None:
            dump["expires_at"] = time.time() + int(tokens.expires_in)
        self._seen = self.store.write(self.key, {"server": self.server_url, "tokens": dump})

    async def get_client_info(self) -> Any:
        if self.fixed_client is not None:
            return self.fixed_client
        from mcp.shared.auth import OAuthClientInformationFull

        data, _ = self.store.read(self.key)
        raw = data.get("client_info")
        if not isinstance(raw, dict):
            return None
        expires = raw.get("client_secret_expires_at")
        if isinstance(expires, int) and 0 < expires < time.time():
            return None  # a registration whose secret expired: register again
        try:
            return OAuthClientInformationFull.model_validate(raw)
        except ValueError:
            return None

    async def set_client_info(self, client_info: Any) -> None:
        if self.fixed_client is None:
            dump = client_info.model_dump(mode="json", exclude_none=True)
            self._seen = self.store.write(self.key, {"server": self.server_url, "client_info": dump})

    async def get_metadata(self) -> dict[str, Any]:
        """The resource's and the authorization server's metadata kept with the tokens (JSON)."""
        data, _ = self.store.read(self.key)
        return data.get("metadata") if isinstance(data.get("metadata"), dict) else {}

    async def set_metadata(self, metadata: dict[str, Any]) -> None:
        self._seen = self.store.write(self.key, {"metadata": metadata})

    async def forget_client(self) -> None:
        """Drop a dynamic registration (and the tokens issued to it)."""
        self._seen = self.store.write(self.key, {"client_info": None, "tokens": None})

    def changed(self) -> bool:
        """Whether another provider (another event loop or process) wrote this identity since this view last read
        or wrote it: the provider then reloads instead of logging in again or using a rotated-out refresh token."""
        return self._seen is not None and self.store.version(self.key) != self._seen
