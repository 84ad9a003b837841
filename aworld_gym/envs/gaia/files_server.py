"""The GAIA file-reading MCP server: ``read_file`` and ``list_files`` for a task's attachments.

It runs unsandboxed, so it reads only the current task's attachments (the absolute paths the ToolHub sends in
each call's ``_meta["aworld_gym/files"]``) and files inside the ``--root`` folders, after resolving symlinks and
``..``. The parsers (``gaia`` extra) are imported when first needed and run in worker threads. Run it with::

    python -m aworld_gym.envs.gaia.files_server --transport streamable-http --port 8950 --root /data/gaia
"""

from __future__ import annotations

import argparse
import inspect
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent

from aworld_gym.base.version import __version__
from aworld_gym.envs.gaia import media
from aworld_gym.envs.gaia.media import Endpoint, how_to
from aworld_gym.envs.gaia.readers import LABELS, detect_kind, read_path, truncate
from aworld_gym.mcp.hub import META_PREFIX
from aworld_gym.mcp.serving import serve


class Access:
    """What one call may read: the task's attachments, and anything inside ``roots`` (both symlink-resolved)."""

    def __init__(self, files: Sequence[Any], roots: Sequence[Path]) -> None:
        self.files = [os.path.abspath(f) for f in files if isinstance(f, str) and f]
        self.real = {os.path.realpath(f) for f in self.files}
        self.roots = roots

    def names(self) -> str:
        return ", ".join(os.path.basename(f) for f in self.files) or "no files are attached to this task"

    def resolve(self, path: str) -> tuple[Path | None, str]:
        """(real path, name to show), or (None, an error) when the path may not be read."""
        path = path.strip().removeprefix("file://")
        if "\x00" in path:
            return None, "Error: the path contains a NUL character."
        if os.path.isabs(path):
            candidate = path
        else:
            by_name = [f for f in self.files if os.path.basename(f) == path]
            tries = by_name + [os.path.join(d, path) for d in dict.fromkeys(map(os.path.dirname, self.files))]
            tries += [os.path.join(r, path) for r in self.roots]
            candidate = next((t for t in tries if os.path.lexists(t)), tries[0] if tries else "")
        real = os.path.realpath(candidate) if path and candidate else ""
        if real and (real in self.real or any(Path(real).is_relative_to(r) for r in self.roots)):
            return Path(real), os.path.basename(candidate)
        return None, f"Error: access denied: only the task's attachments can be read ({self.names()})."


def _size(n: int) -> str:
    return f"{n} bytes" if n < 1024 else f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


def build_server(
    roots: Sequence[str | Path] = (),
    max_file_bytes: int = 50 << 20,
    max_chars: int = 20_000,
    ocr: bool = True,
    name: str = "files",
    vision_model: Mapping[str, Any] | None = None,
    audio_model: Mapping[str, Any] | None = None,
) -> MCPServer:
    """A GAIA file-reading MCP server object (serve it in-process, or with ``serve``).

    Args:
        roots: folders whose files may be read besides the task's attachments.
        max_file_bytes: larger files are refused.
        max_chars: longer output is cut, with a note saying so.
        ocr: run tesseract OCR on images (when it is installed).
        name: the server's name.
        vision_model, audio_model: the OpenAI-compatible endpoints of ``describe_image`` and ``transcribe_audio``
            (:mod:`aworld_gym.envs.gaia.media`; default: from the environment, else the tools say how to set one).
    """
    vision, audio = Endpoint.of("vision", vision_model), Endpoint.of("audio", audio_model)
    real_roots = [Path(os.path.realpath(r)) for r in roots]
    limiter = anyio.CapacityLimiter(max(2, os.cpu_count() or 1))
    server = MCPServer(name, version=__version__, log_level="WARNING")

    def access(ctx: Context) -> Access:
        files = dict(ctx.request_context.meta or {}).get(f"{META_PREFIX}files") or []
        return Access(files if isinstance(files, list | tuple) else [], real_roots)

    def read(real: Path, shown: str) -> str:
        try:
            st = os.stat(real)
            if stat.S_ISDIR(st.st_mode):
                return f"Error: {shown!r} is a directory, not a file."
            if not stat.S_ISREG(st.st_mode):
                return f"Error: {shown!r} is not a regular file."
            if st.st_size > max_file_bytes:
                return f"Error: {shown!r} is too large to read ({st.st_size} bytes; the limit is {max_file_bytes})."
            return read_path(real, shown, max_chars, ocr)
        except FileNotFoundError:
            return f"Error: file not found: {shown!r}."
        except Exception as exc:  # noqa: BLE001 - e.g. unreadable, or vanished meanwhile
            return f"Error: could not read {shown!r} ({type(exc).__name__}: {exc})."

    async def read_file(path: str, ctx: Context) -> CallToolResult:
        """Read a file attached to the task and return its content as text.

        Handles text, CSV, JSON, Excel, PDF, Word, PowerPoint, zip (lists the members) and images (metadata and
        OCR text). Long output is cut.

        Args:
            path: the file's name (as given in the task) or its absolute path.
        """
        try:
            real, shown = access(ctx).resolve(path)
            text = shown if real is None else await anyio.to_thread.run_sync(read, real, shown, limiter=limiter)
        except Exception as exc:  # noqa: BLE001 - never let a bad file or path take the server down
            text = f"Error: could not read {path!r} ({type(exc).__name__}: {exc})."
        return _reply(text)

    async def describe_image(
        path: str, ctx: Context, question: str = "Describe this image in detail."
    ) -> CallToolResult:
        """Ask a vision model about an image attached to the task (png, jpg, gif, webp, bmp); returns its answer.

        Args:
            path: the image's name (as given in the task) or its absolute path.
            question: what to ask about the image.
        """
        if vision is None:
            return _reply(how_to("vision", "describe_image"))
        real, shown = access(ctx).resolve(path)
        if real is None:
            return _reply(shown)
        return _reply(*await media.describe_image(vision, real, shown, question))

    async def transcribe_audio(path: str, ctx: Context) -> CallToolResult:
        """Transcribe an audio file attached to the task (mp3, wav, m4a, flac, ogg, webm) with a speech model.

        Args:
            path: the audio file's name (as given in the task) or its absolute path.
        """
        if audio is None:
            return _reply(how_to("audio", "transcribe_audio"))
        real, shown = access(ctx).resolve(path)
        if real is None:
            return _reply(shown)
        return _reply(*await media.transcribe_audio(audio, real, shown))

    async def list_files(ctx: Context) -> str:
        """List the files attached to the task: names, sizes and types."""
        files = access(ctx).files

        def describe() -> str:
            lines = []
            for f in files:
                try:
                    if not os.path.isfile(f):
                        raise FileNotFoundError(f)
                    kind, what = detect_kind(Path(f))
                    lines.append(f"- {os.path.basename(f)} ({_size(os.path.getsize(f))}, {LABELS.get(kind, what)})")
                except OSError:
                    lines.append(f"- {os.path.basename(f)} (missing or unreadable)")
            return truncate("\n".join(lines), max_chars) or "No files are attached to this task."

        return await anyio.to_thread.run_sync(describe, limiter=limiter)

    for tool in (read_file, list_files, describe_image, transcribe_audio):
        server.tool(description=inspect.cleandoc(tool.__doc__ or ""))(tool)
    return server


def _reply(text: str, error: bool | None = None) -> CallToolResult:
    """A tool result; a refusal or a failure (text starting ``Error: ``) is a tool error (counted as one in
    trajectories), its text unchanged."""
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          isError=text.startswith("Error: ") if error is None else error)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Serve the files server (stdio by default)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transport", default="stdio", choices=["stdio", "streamable-http", "sse"])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8950)
    ap.add_argument("--root", action="append", default=[], help="a folder whose files may be read (repeatable)")
    ap.add_argument("--max-file-mb", type=int, default=50)
    ap.add_argument("--max-chars", type=int, default=20_000)
    ap.add_argument("--no-ocr", action="store_true")
    args = ap.parse_args(argv)
    server = build_server(args.root, args.max_file_mb << 20, args.max_chars, not args.no_ocr)
    serve(server, args.transport, args.host, args.port)


if __name__ == "__main__":
    main()
