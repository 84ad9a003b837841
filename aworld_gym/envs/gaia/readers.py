"""Attachment readers of the GAIA file server: every file kind GAIA ships (documents, sheets, slides, images with
offline OCR, archives, text) rendered as text for the model."""

from __future__ import annotations

import csv
import functools
import importlib.util
import io
import itertools
import json
import logging
import shutil
import zipfile
from collections.abc import Callable
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

MAX_ROWS = 1000  # rows shown per sheet or CSV file

_TEXT = ["txt", "md", "py", "html", "htm", "xml", "yaml", "yml", "log", "jsonl", "jsonld", "ini", "toml", "cfg"]
_EXT_KINDS: dict[str, str] = {
    **dict.fromkeys(_TEXT, "text"),
    **{"json": "json", "csv": "csv", "tsv": "tsv", "xlsx": "xlsx", "xlsm": "xlsx", "xls": "xls", "pdf": "pdf"},
    **{"docx": "docx", "pptx": "pptx", "zip": "zip"},
    **dict.fromkeys(["png", "jpg", "jpeg", "gif", "bmp", "webp", "tif", "tiff"], "image"),
    **dict.fromkeys(["mp3", "wav", "m4a", "flac", "ogg", "aac", "opus"], "audio"),
}
LABELS = {"text": "text", "json": "JSON", "csv": "CSV table", "tsv": "TSV table", "xlsx": "Excel workbook",
           "xls": "Excel 97-2003 workbook", "pdf": "PDF document", "docx": "Word document",
           "pptx": "PowerPoint presentation", "image": "image", "audio": "audio", "zip": "zip archive"}  # fmt: skip
_MAGIC: list[tuple[bytes, str, str]] = [  # (prefix, kind, description); kind "" = not readable here
    (b"%PDF-", "pdf", "PDF"), (b"\x89PNG\r\n\x1a\n", "image", "PNG image"), (b"\xff\xd8\xff", "image", "JPEG image"),
    (b"GIF87a", "image", "GIF image"), (b"GIF89a", "image", "GIF image"), (b"II*\x00", "image", "TIFF image"),
    (b"MM\x00*", "image", "TIFF image"), (b"ID3", "audio", "MP3 audio"), (b"fLaC", "audio", "FLAC audio"),
    (b"OggS", "audio", "Ogg audio"), (b"PK\x03\x04", "zip", "zip archive"), (b"PK\x05\x06", "zip", "zip archive"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "xls", "OLE2 file (old Office format)"), (b"\x1f\x8b", "", "gzip data"),
    (b"7z\xbc\xaf\x27\x1c", "", "7-Zip archive"), (b"Rar!", "", "RAR archive"), (b"\x7fELF", "", "ELF executable"),
    (b"MZ", "", "Windows executable"), (b"\x1aE\xdf\xa3", "", "Matroska/WebM video"),
    (b"SQLite format 3\x00", "", "SQLite database"),
]  # fmt: skip


def _sniff(path: Path, head: bytes) -> tuple[str, str] | None:
    """(kind, description) from a file's first bytes, or None."""
    if head[:4] == b"RIFF" and head[8:12] in (b"WAVE", b"WEBP"):
        return ("audio", "WAV audio") if head[8:12] == b"WAVE" else ("image", "WebP image")
    if head[4:8] == b"ftyp":
        m4a = head[8:11] in (b"M4A", b"M4B") or path.suffix.lower() in (".m4a", ".aac")
        return ("audio", "MPEG-4 audio") if m4a else ("", "MP4 video")
    kind, what = next(((k, w) for prefix, k, w in _MAGIC if head.startswith(prefix)), (None, ""))
    if kind == "xls" and path.suffix.lower() != ".xls":
        return "", what  # .doc, .ppt, .msg ...
    if kind == "zip":
        try:
            with zipfile.ZipFile(path) as zf:
                names = set(zf.namelist())
        except (zipfile.BadZipFile, OSError):
            return None
        for member, office in (("word/document.xml", "docx"), ("ppt/presentation.xml", "pptx"), ("xl/workbook.xml", "xlsx")):  # fmt: skip
            if member in names:
                return office, LABELS[office]
    return None if kind is None else (kind, what)


def _decode(data: bytes, strict: bool) -> str | None:
    """UTF-8 (or BOM-marked UTF-16) text, else latin-1 unless ``strict``; None for binary data (NUL bytes)."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            return None
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        if not strict:
            return data.decode("latin-1")
        if exc.start >= len(data) - 3:  # a character cut short at the end of a file's first bytes
            return data[: exc.start].decode("utf-8-sig")
        return None


def detect_kind(path: Path) -> tuple[str, str]:
    """(kind, description) of a file: its magic bytes first, then its extension, then whether it is text."""
    with open(path, "rb") as fh:
        head = fh.read(8192)
    ext = path.suffix.lower().lstrip(".")
    is_text = _decode(head, strict=True) is not None
    sniffed = _sniff(path, head)
    if sniffed is not None and (sniffed[0] or ext not in _EXT_KINDS or not is_text):
        return sniffed
    if ext in _EXT_KINDS:
        return _EXT_KINDS[ext], LABELS[_EXT_KINDS[ext]]
    return ("text", "text") if is_text else ("", "unknown binary data")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    elif isinstance(value, datetime):
        value = value.isoformat(" ")
    elif isinstance(value, date | time):
        value = value.isoformat()
    return str(value).replace("|", "\\|").replace("\r\n", " ").replace("\n", " ")


def _table(rows: list[list[Any]], header: list[Any] | None = None, numbered: bool = False) -> str:
    """A markdown-style table; ``numbered`` adds spreadsheet column letters and row numbers."""
    cells = [[_cell(v) for v in row] for row in rows]
    width = max((max((i + 1 for i, c in enumerate(r) if c), default=0) for r in cells), default=0)
    width = max(width, len(header or ()))
    if width == 0:
        return "(empty)"
    if numbered:
        from openpyxl.utils import get_column_letter

        header = ["", *(get_column_letter(i + 1) for i in range(width))]
        cells = [[str(n), *r] for n, r in enumerate(cells, 1)]
        width += 1
    lines = [] if header is None else ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * width]
    lines += ["| " + " | ".join((r + [""] * width)[:width]) + " |" for r in cells]
    return "\n".join(lines)


def _sheet(name: str, rows: list[list[Any]], more: bool, total: int | None) -> str:
    while rows and all(v is None or v == "" for v in rows[-1]):
        rows.pop()
    note = f"\n[... only the first {MAX_ROWS} rows are shown" + (f" of {total}]" if total else "]") if more else ""
    return f"## Sheet: {name} ({len(rows)} rows)\n{_table(rows, numbered=True)}{note}"


def _read_xlsx(path: Path, _: int) -> str:
    import openpyxl

    with open(path, "rb") as fh:  # (a file object: openpyxl refuses an xlsx named .xls)
        wb = openpyxl.load_workbook(fh, read_only=True, data_only=True)
        parts = []
        for ws in wb.worksheets:
            total = ws.max_row
            ws.reset_dimensions()  # some writers store wrong dimensions, which would cut the data
            rows = [list(r) for r in itertools.islice(ws.iter_rows(values_only=True), MAX_ROWS + 1)]
            parts.append(_sheet(ws.title, rows[:MAX_ROWS], len(rows) > MAX_ROWS, total))
        wb.close()
    return "\n\n".join(parts) or "(the workbook has no worksheets)"


def _read_xls(path: Path, _: int) -> str:
    import xlrd

    def value(c: Any, datemode: int) -> Any:
        if c.ctype == xlrd.XL_CELL_DATE:
            try:
                return xlrd.xldate.xldate_as_datetime(c.value, datemode)
            except (ValueError, OverflowError, xlrd.xldate.XLDateError):
                return c.value
        return bool(c.value) if c.ctype == xlrd.XL_CELL_BOOLEAN else c.value

    book = xlrd.open_workbook(str(path))
    parts = []
    for sh in book.sheets():
        rows = [[value(c, book.datemode) for c in sh.row(r)] for r in range(min(sh.nrows, MAX_ROWS))]
        parts.append(_sheet(sh.name, rows, sh.nrows > MAX_ROWS, sh.nrows))
    return "\n\n".join(parts) or "(the workbook has no sheets)"


def _read_csv(path: Path, _: int, delimiter: str = ",") -> str:
    text = _read_text(path)
    try:
        rows = list(itertools.islice(csv.reader(io.StringIO(text), delimiter=delimiter), MAX_ROWS + 2))
    except csv.Error:
        return text
    if not rows:
        return "(empty file)"
    table = _table(rows[1 : MAX_ROWS + 1], rows[0])
    if len(rows) <= MAX_ROWS + 1:
        return f"({len(rows) - 1} rows; the first line is the header)\n{table}"
    return f"(the first line is the header)\n{table}\n[... only the first {MAX_ROWS} of about {text.count(chr(10))} rows are shown]"


def _read_pdf(path: Path, max_chars: int) -> str:
    from pypdf import PdfReader

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # pypdf warns on stderr about every oddity
    reader = PdfReader(path)
    if reader.is_encrypted:
        reader.decrypt("")
    n = len(reader.pages)
    parts, size = [f"(PDF, {n} pages)"], 0
    for i, page in enumerate(reader.pages, 1):
        if size > max_chars:  # the rest would be cut anyway
            parts.append(f"[... pages {i}-{n} not extracted: the output limit was reached]")
            break
        text = (page.extract_text() or "").strip() or "(no extractable text on this page)"
        parts.append(f"--- Page {i} of {n} ---\n{text}")
        size += len(parts[-1])
    return "\n\n".join(parts)


def _read_docx(path: Path, _: int) -> str:
    import docx
    from docx.table import Table

    parts = []
    for block in docx.Document(str(path)).iter_inner_content():
        if isinstance(block, Table):
            parts.append(_table([[c.text for c in row.cells] for row in block.rows]))
        elif block.text.strip():
            style = block.style.name if block.style is not None else ""
            level = style.removeprefix("Heading ").strip() if style.startswith("Heading ") else ""
            parts.append(("#" * int(level) + " " if level.isdigit() else "") + block.text)
    return "\n\n".join(parts) or "(the document has no text)"


def _shape_text(shape: Any) -> list[str]:
    from pptx.shapes.group import GroupShape

    if isinstance(shape, GroupShape):
        return [t for s in shape.shapes for t in _shape_text(s)]
    if getattr(shape, "has_table", False):
        return [_table([[c.text for c in row.cells] for row in shape.table.rows])]
    if getattr(shape, "has_text_frame", False) and shape.text_frame.text.strip():
        return [shape.text_frame.text]
    return []


def _read_pptx(path: Path, _: int) -> str:
    from pptx import Presentation

    parts = []
    for i, slide in enumerate(Presentation(str(path)).slides, 1):
        texts = [t for shape in slide.shapes for t in _shape_text(shape)]
        notes = slide.notes_slide.notes_text_frame if slide.has_notes_slide else None
        if notes is not None and notes.text.strip():
            texts.append(f"Notes: {notes.text.strip()}")
        parts.append(f"--- Slide {i} ---\n" + ("\n".join(texts) or "(no text)"))
    return "\n\n".join(parts) or "(the presentation has no slides)"


@functools.cache
def _tesseract() -> bool:
    return shutil.which("tesseract") is not None and importlib.util.find_spec("pytesseract") is not None


def _read_image(path: Path, ocr: bool) -> str:
    from PIL import ExifTags, Image

    with Image.open(path) as img:
        frames = getattr(img, "n_frames", 1)
        lines = [f"Image: {img.format}, {img.width}x{img.height} pixels, mode {img.mode}"]
        lines[0] += f", {frames} frames" if frames > 1 else ""
        exif = img.getexif()
        tags = {ExifTags.TAGS.get(k, str(k)): v for k, v in exif.items()}
        tags |= {ExifTags.TAGS.get(k, str(k)): v for k, v in exif.get_ifd(ExifTags.IFD.Exif).items()}
        tags |= {ExifTags.GPSTAGS.get(k, str(k)): v for k, v in exif.get_ifd(ExifTags.IFD.GPSInfo).items()}
        shown = [f"{k}={str(v)[:80]}" for k, v in tags.items() if not isinstance(v, bytes | dict) and k != "ExifOffset"]
        if shown:
            lines.append("EXIF: " + "; ".join(shown[:30]))
        if not ocr or not _tesseract():
            why = "turned off on this server" if not ocr else "unavailable (tesseract is not installed)"
            lines.append(f"OCR is {why}; the picture itself cannot be described.")
            return "\n".join(lines)
        import pytesseract

        try:
            frame = Image.new("RGB", img.size, "white")
            rgba = img.convert("RGBA")
            frame.paste(rgba, mask=rgba.getchannel("A"))  # transparent parts become white, not black
            text = pytesseract.image_to_string(frame, timeout=45)
            text = "\n".join(ln for ln in text.splitlines() if ln.strip()) or "(none)"
        except Exception as exc:  # noqa: BLE001 - keep the metadata when OCR fails
            text = f"(OCR failed: {type(exc).__name__}: {exc})"
    return "\n".join([*lines, "Text found by OCR (may contain errors; the picture itself cannot be described):", text])


def _read_audio(path: Path, _: int) -> str:
    detail = f"{path.name}, size {path.stat().st_size} bytes"
    if path.suffix.lower() == ".wav":
        import wave

        try:
            with wave.open(str(path), "rb") as w:
                detail += f", duration {w.getnframes() / w.getframerate():.2f} s"
        except (wave.Error, EOFError, ZeroDivisionError):
            pass
    return (
        "Error: audio transcription is not supported offline (no offline transcriber is installed); "
        f"transcribe_audio does it with a speech model endpoint; file: {detail}"
    )


def _read_zip(path: Path, _: int) -> str:
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
    lines = [f"Zip archive with {len(infos)} members (name, uncompressed size in bytes):"]
    lines += [f"- {i.filename}" + ("" if i.is_dir() else f" ({i.file_size})") for i in infos[:500]]
    return "\n".join(lines + ([f"[... {len(infos) - 500} more members]"] if len(infos) > 500 else []))


def _read_text(path: Path, pretty_json: bool = False) -> str:
    text = _decode(path.read_bytes(), strict=False)
    if text is None:
        raise ValueError("the file holds binary data, not text")
    if pretty_json and len(text) < 200_000:
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pass
    return text


_READERS: dict[str, tuple[str, Callable[[Path, int], str]]] = {
    "xlsx": ("an Excel workbook", _read_xlsx), "xls": ("an Excel 97-2003 workbook", _read_xls),
    "csv": ("CSV", _read_csv), "tsv": ("TSV", lambda p, n: _read_csv(p, n, "\t")), "pdf": ("a PDF", _read_pdf),
    "docx": ("a Word document", _read_docx), "pptx": ("a PowerPoint presentation", _read_pptx),
    "audio": ("audio", _read_audio), "zip": ("a zip archive", _read_zip), "text": ("text", lambda p, _: _read_text(p)),
    "json": ("JSON", lambda p, _: _read_text(p, pretty_json=True)),
}  # fmt: skip


def truncate(text: str, max_chars: int) -> str:
    """Cut ``text`` so that it and the note saying so fit in ``max_chars``."""
    if len(text) <= max_chars:
        return text
    keep = max(0, max_chars - 80)
    return text[:keep] + f"\n[... truncated: {keep} of {len(text)} characters shown]"


PLAIN_KINDS = frozenset({"text", "json", "csv", "tsv", "audio"})  # readers linear in the file's size: no parser
MAX_EXPANDED_BYTES = 256 << 20  # what a zip-based document (docx, xlsx, pptx) may declare uncompressed
_ZIPPED = ("docx", "xlsx", "pptx")


def expanded_size(path: Path) -> int:
    """The uncompressed size a zip file declares for all its members (Python's zipfile never inflates a member
    past its declared size, so this bounds what the parsers of a zip-based document can be made to hold)."""
    with zipfile.ZipFile(path) as zf:
        return sum(i.file_size for i in zf.infolist())


def read_path(path: Path, shown: str, max_chars: int, ocr: bool, max_expanded_bytes: int = MAX_EXPANDED_BYTES) -> str:
    """Render one access-checked regular file as text; problems come back as ``Error: ...``.

    Run it in a bounded process (:mod:`aworld_gym.envs.gaia.read_worker`): a hostile file can still take long.
    """
    kind, what = detect_kind(path)
    if kind in _ZIPPED:
        try:
            size = expanded_size(path)
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            return f"Error: could not read {shown!r} as {_READERS[kind][0]}; the file may be corrupt ({type(exc).__name__}: {exc})"
        if size > max_expanded_bytes:
            return (f"Error: cannot read {shown!r}: it expands to {size} bytes uncompressed (the limit is "
                    f"{max_expanded_bytes}); a document this large is refused.")  # fmt: skip
    try:
        if kind == "image":
            text = _read_image(path, ocr)
        elif kind in _READERS:
            what, reader = _READERS[kind]
            text = reader(path, max_chars)
        else:
            return f"Error: cannot read {shown!r}: unsupported binary file (detected type: {what})."
    except Exception as exc:  # noqa: BLE001 - a corrupt file is a tool answer, not a crash
        return f"Error: could not read {shown!r} as {what}; the file may be corrupt ({type(exc).__name__}: {exc})"
    return truncate(text or "(empty file)", max_chars)
