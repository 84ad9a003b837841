"""A stdio server's pipes, made by us: the same kernel pipes (64 kB each) whatever event loop runs the transport.

Left to the event loop, a subprocess's stdin and stdout are not always pipes: uvloop (which uvicorn, Ray and vLLM
install as the loop policy) gives the child a Unix socket pair, whose buffers take hundreds of kB. There, a 190 kB
request to a server that has stopped reading its input is "written" at once, so nothing shows that the server has
stopped reading and every call waits for its timeout and a probe. And the pipes' inodes, by which the process tree
finds who holds them, could only be read from asyncio's own transport. So the transport makes the pipes itself
(:class:`ServerPipes`), hands the child its ends, and reads and writes the other ends without blocking
(:class:`PipeWriter`, :class:`PipeReader`), waiting on the loop for the fd to be ready.
"""

from __future__ import annotations

import os
from contextlib import suppress

import anyio

from aworld_gym.mcp.transports.proctree import pipe_inode

CHUNK = 65536


class _End:
    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self.fd: int | None = fd

    def _fd(self) -> int:
        if self.fd is None:
            raise anyio.ClosedResourceError
        return self.fd

    async def aclose(self) -> None:
        """Close the end (a task waiting on it is woken with ``ClosedResourceError``). Safe to call twice."""
        fd, self.fd = self.fd, None
        if fd is not None:
            with suppress(Exception):
                anyio.notify_closing(fd)
            os.close(fd)


class PipeWriter(_End):
    """Our end of the server's stdin."""

    async def send(self, data: bytes) -> None:
        """Write all of ``data``, waiting while the pipe is full (cancel the wait to give up).

        Raises:
            anyio.BrokenResourceError: the server has closed its end.
            anyio.ClosedResourceError: our end was closed.
        """
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._fd(), view) :]
            except BlockingIOError:
                await anyio.wait_writable(self._fd())
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise anyio.BrokenResourceError from exc


class PipeReader(_End):
    """Our end of the server's stdout."""

    async def receive(self, max_bytes: int = CHUNK) -> bytes:
        """The next bytes the server wrote (waiting for some).

        Raises:
            anyio.EndOfStream: every writer of the pipe has closed it.
            anyio.ClosedResourceError: our end was closed.
        """
        while True:
            try:
                data = os.read(self._fd(), max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self._fd())
                continue
            if not data:
                raise anyio.EndOfStream
            return data


class ServerPipes:
    """The pipes of one server: ``child_stdin``/``child_stdout`` go to the child (and are closed here once it has
    started, :meth:`started`); ``stdin``/``stdout`` are ours."""

    def __init__(self) -> None:
        in_read, in_write = os.pipe()  # not inheritable: only the ends handed to the child reach it
        out_read, out_write = os.pipe()
        self.child_stdin, self.child_stdout = in_read, out_write
        self.stdin, self.stdout = PipeWriter(in_write), PipeReader(out_read)
        # {pipe inode: the server's access mode} (the process tree finds who holds the server's ends by these)
        self.ends = {ino: mode for ino, mode in ((pipe_inode(in_read), os.O_RDONLY),
                                                 (pipe_inode(out_write), os.O_WRONLY)) if ino is not None}  # fmt: skip

    def started(self) -> None:
        """Close the child's ends here (the child holds its own copies): EOF then means the server's side closed."""
        for fd in (self.child_stdin, self.child_stdout):
            with suppress(OSError):
                os.close(fd)
        self.child_stdin = self.child_stdout = -1

    async def aclose(self) -> None:
        """Close every end still open here."""
        self.started()
        await self.stdin.aclose()
        await self.stdout.aclose()
