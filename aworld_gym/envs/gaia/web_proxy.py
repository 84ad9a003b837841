"""The web guard of GAIA's browser: a small HTTP proxy that Chromium must use for every request.

It allows ``http``/``https`` to public addresses only (the rule of ``fetch_url``): a host that resolves to a
private, loopback, link-local or reserved address is refused, and so is a host of ``deny`` (``fnmatch`` patterns
over ``host`` or ``host:port``); ``allow`` (the same patterns) admits hosts past that rule, e.g. a test site on
127.0.0.1. The proxy connects to the very address it checked (no second DNS answer can move the request), so
redirects, subresources and scripts are checked one connection at a time. ``hosts`` maps names to where they
are served (the bundled sample site, ``archive.sample.test``), so a task can name a site that needs no DNS. HTTPS goes through ``CONNECT`` (the
proxy sees the host, not the content). Chromium is started with ``--proxy-bypass-list=<-loopback>`` so that even
``localhost`` goes through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import ipaddress
import socket
import threading
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

REFUSED = b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"


class WebGuard:
    """The proxy, on its own thread and event loop; ``url`` is what Chromium's ``--proxy-server`` takes."""

    def __init__(self, allow: Sequence[str] = (), deny: Sequence[str] = (),
                 hosts: Mapping[str, tuple[str, int]] | None = None) -> None:  # fmt: skip
        self.allow, self.deny = tuple(allow), tuple(deny)
        self.hosts = dict(hosts or {})  # host name -> (address, port) it is served at (e.g. a bundled local site)
        self.refused: list[str] = []  # what was refused, most recent last (for tests and logs)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="aworld-gym-web-guard", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    def close(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._server.close)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    def check(self, host: str, port: int) -> tuple[str | None, str]:
        """(the address to connect to, "") or (None, why it is refused)."""
        names = (host, f"{host}:{port}")
        if any(fnmatch.fnmatchcase(n, p) for n in names for p in self.deny):
            return None, f"{host} is on the deny list"
        if host in self.hosts:
            return self.hosts[host][0], ""
        try:
            infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
        except OSError as exc:
            return None, f"cannot resolve {host}: {exc}"
        allowed = any(fnmatch.fnmatchcase(n, p) for n in names for p in self.allow)
        for info in infos:
            ip = ipaddress.ip_address(info[4][0])
            if not ip.is_global and not allowed:
                return None, f"{host} is a private or local address ({ip})"
        return str(infos[0][4][0]), ""

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            writer.close()
            return
        line, _, rest = head.partition(b"\r\n")
        try:
            method, target, version = line.decode("latin-1").split(" ", 2)
        except ValueError:
            writer.close()
            return
        if method.upper() == "CONNECT":
            host, _, port_text = target.rpartition(":")
            port, tail = int(port_text or 443), b""
        else:
            parts = urlsplit(target)
            if parts.scheme != "http" or not parts.hostname:
                return await self._refuse(writer, target, "only http:// and https:// URLs")
            host, port = parts.hostname, parts.port or 80
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            # One request per connection (the next could name another host): the hop headers become a close.
            kept = [h for h in rest.split(b"\r\n") if h and not h.lower().startswith((b"connection:", b"proxy-"))]
            tail = f"{method} {path} {version}\r\n".encode("latin-1") + b"\r\n".join([*kept, b"Connection: close"])
            tail += b"\r\n\r\n"
        host = host.strip("[]")
        address, why = await asyncio.to_thread(self.check, host, port)
        if address is None:
            return await self._refuse(writer, target, why)
        port = self.hosts[host][1] if host in self.hosts else port
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(address, port), 30)
        except (OSError, TimeoutError) as exc:
            return await self._refuse(writer, target, f"cannot connect: {exc}", status=b"502 Bad Gateway")
        if method.upper() == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        else:
            up_writer.write(tail)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    async def _refuse(self, writer: asyncio.StreamWriter, target: str, why: str, status: bytes = b"") -> None:
        self.refused.append(f"{target}: {why}")
        del self.refused[:-100]
        body = f"aworld-gym refused {target}: {why}".encode()
        data = REFUSED % (len(body), body)
        if status:
            data = data.replace(b"403 Forbidden", status, 1)
        with contextlib.suppress(ConnectionError):
            writer.write(data)
            await writer.drain()
        writer.close()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while chunk := await src.read(65536):
            dst.write(chunk)
            await dst.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(Exception):
            dst.close()
