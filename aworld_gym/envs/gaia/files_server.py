"""The GAIA file-reading MCP server: ``read_file`` and ``list_files`` for a task's attachments.

It runs unsandboxed, so it reads only the current task's attachments: the files the ToolHub names in each call's
``_meta["aworld_gym/files"]`` (the env sets them when the episode begins), bounded by the server's ``roots`` and
``deny`` list (:mod:`aworld_gym.envs.gaia.access`). The model's ``path`` only picks one of them by name. Documents
are parsed in a child process bounded in memory, CPU, expansion and time, killed when the call ends
(:mod:`aworld_gym.envs.gaia.read_worker`). Run it with::

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
from aworld_gym.envs.gaia.access import Access, quoted
from aworld_gym.envs.gaia.loader import METADATA_NAMES, SPLITS
from aworld_gym.envs.gaia.media import Endpoint, how_to
from aworld_gym.envs.gaia.read_worker import ReadLimits, read_isolated
from aworld_gym.envs.gaia.readers import LABELS, MAX_EXPANDED_BYTES, PLAIN_KINDS, detect_kind, read_path, truncate
from aworld_gym.mcp.cache import SCOPE_META
from aworld_gym.mcp.hub import META_PREFIX
from aworld_gym.mcp.serving import serve


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
    *,
    deny: Sequence[str | Path] = (),
    read_timeout_s: float = 30.0,
    read_memory_mb: int = 2048,
    max_expanded_bytes: int = MAX_EXPANDED_BYTES,
) -> MCPServer:
    """A GAIA file-reading MCP server object (serve it in-process, or with ``serve``).

    Args:
        roots: when given, the folders the task's attachments must lie in (an attachment named outside them is not
            readable); they grant nothing else: only the task's own attachments are ever read.
        max_file_bytes: larger files are refused.
        max_chars: longer output is cut, with a note saying so.
        ocr: run tesseract OCR on images (when it is installed).
        name: the server's name.
        vision_model, audio_model: the OpenAI-compatible endpoints of ``describe_image`` and ``transcribe_audio``
            (:mod:`aworld_gym.envs.gaia.media`; default: from the environment, else the tools say how to set one).
        deny: files never read, even when named as an attachment (GAIA-v0: the split's answer key).
        read_timeout_s: a document read is stopped after this many seconds (keep it below the hub's call timeout).
        read_memory_mb: the memory limit of the process that parses a document.
        max_expanded_bytes: a docx, xlsx or pptx declaring more bytes uncompressed is refused.
    """
    vision, audio = Endpoint.of("vision", vision_model), Endpoint.of("audio", audio_model)
    roots, deny = tuple(roots), tuple(deny)
    limits = ReadLimits(read_timeout_s, read_memory_mb, max_expanded_bytes)
    limiter = anyio.CapacityLimiter(max(2, os.cpu_count() or 1))
    server = MCPServer(name, version=__version__, log_level="WARNING")

    def access(ctx: Context) -> Access:
        files = dict(ctx.request_context.meta or {}).get(f"{META_PREFIX}files") or []
        return Access(files if isinstance(files, list | tuple) else [], roots, deny)

    def check(real: Path, shown: str) -> tuple[str | None, str]:
        """(why ``real`` cannot be read, or None; its kind)."""
        try:
            st = os.stat(real)
        except FileNotFoundError:
            return f"Error: file not found: {shown!r}.", ""
        if stat.S_ISDIR(st.st_mode):
            return f"Error: {shown!r} is a directory, not a file.", ""
        if not stat.S_ISREG(st.st_mode):
            return f"Error: {shown!r} is not a regular file.", ""
        if st.st_size > max_file_bytes:
            return f"Error: {shown!r} is too large to read ({st.st_size} bytes; the limit is {max_file_bytes}).", ""
        return None, detect_kind(real)[0]

    async def read(real: Path, shown: str) -> str:
        async with limiter:
            problem, kind = await anyio.to_thread.run_sync(check, real, shown)
            if problem is not None:
                return problem
            if kind in PLAIN_KINDS:  # work linear in the file's (bounded) size: no parser to stop
                return await anyio.to_thread.run_sync(read_path, real, shown, max_chars, ocr)
            return await read_isolated(Path(os.path.realpath(real)), shown, max_chars, ocr, limits)

    async def read_file(path: str, ctx: Context) -> CallToolResult:
        """Read a file attached to the task and return its content as text.

        Handles text, CSV, JSON, Excel, PDF, Word, PowerPoint, zip (lists the members) and images (metadata and
        OCR text). Long output is cut.

        Args:
            path: the file's name, as the task or list_files gives it.
        """
        try:
            real, shown = access(ctx).resolve(path)
            text = shown if real is None else await read(real, shown)
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
        """List the files attached to the task: names (as JSON strings), sizes and types."""
        files = access(ctx).files

        def describe() -> str:
            lines = []
            for f in files:
                try:
                    if not os.path.isfile(f):
                        raise FileNotFoundError(f)
                    kind, what = detect_kind(Path(f))
                    lines.append(
                        f"- {quoted(os.path.basename(f))} ({_size(os.path.getsize(f))}, {LABELS.get(kind, what)})"
                    )
                except OSError:
                    lines.append(f"- {quoted(os.path.basename(f))} (missing or unreadable)")
            return truncate("\n".join(lines), max_chars) or "No files are attached to this task."

        return await anyio.to_thread.run_sync(describe, limiter=limiter)

    for tool in (read_file, list_files, describe_image, transcribe_audio):
        # the tool cache may serve a result again within its task only (the task's files, its questions on them)
        server.tool(description=inspect.cleandoc(tool.__doc__ or ""), meta={SCOPE_META: "task"})(tool)
    return server


def _reply(text: str, error: bool | None = None) -> CallToolResult:
    """A tool result; a refusal or a failure (text starting ``Error: ``) is a tool error (counted as one in
    trajectories), its text unchanged."""
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          isError=text.startswith("Error: ") if error is None else error)  # fmt: skip


_SPLIT_FOLDERS = [(), *((s,) for s in SPLITS), *(("2023", s) for s in SPLITS)]  # where load_gaia looks


def main(argv: list[str] | None = None) -> None:
    """Serve the files server (stdio by default)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transport", default="stdio", choices=["stdio", "streamable-http", "sse"])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8950)
    ap.add_argument("--root", action="append", required=True,
                    help="the folder the task attachments lie in (repeatable); its GAIA answer keys are never read")  # fmt: skip
    ap.add_argument("--max-file-mb", type=int, default=50)
    ap.add_argument("--max-chars", type=int, default=20_000)
    ap.add_argument("--no-ocr", action="store_true")
    args = ap.parse_args(argv)
    deny = [Path(r, *sub, name) for r in args.root for sub in _SPLIT_FOLDERS for name in METADATA_NAMES]
    server = build_server(args.root, args.max_file_mb << 20, args.max_chars, not args.no_ocr, deny=deny)
    serve(server, args.transport, args.host, args.port)


if __name__ == "__main__":
    main()
