"""An ASGI app served by uvicorn in a daemon thread of this process (the endpoint, the tool bridge)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any


class ThreadedServer:
    """``start(app, host, port)`` serves ``app`` until ``stop()``; ``url`` is where (``http://host:port``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.url: str | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self, app: Any, host: str = "127.0.0.1", port: int = 0, lifespan: str = "off") -> str:
        import uvicorn

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        config = uvicorn.Config(app, log_level="warning", lifespan=lifespan, timeout_keep_alive=30)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True,
                                        name=self.name)  # fmt: skip
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"{self.name} did not start")
            time.sleep(0.01)
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{sock.getsockname()[1]}"
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None
        self.url = None
