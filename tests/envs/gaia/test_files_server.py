"""The GAIA files server through the real MCP client path: every format, access control, errors, limits."""

import json
import os
import shutil
import sys
import wave
import zipfile
from pathlib import Path

import pytest

from aworld_gym.base.calls import ToolCall
from aworld_gym.envs.gaia.files_server import build_server
from aworld_gym.mcp.hub import ToolHub

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"


def make_files(d: Path) -> dict[str, Path]:
    """Write one fixture per format into ``d``; returns them by name."""
    import docx
    import openpyxl
    from fpdf import FPDF
    from PIL import Image, ImageDraw, ImageFont
    from pptx import Presentation
    from pptx.util import Inches

    d.mkdir(parents=True, exist_ok=True)
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Sales"
    ws.append(["Region", "Units"])
    ws.append(["North", 1234])
    ws.append(["South", 567.5])
    wb.create_sheet("Notes")["B2"] = "hidden gem"
    wb.save(d / "data.xlsx")

    (d / "table.csv").write_text("name,age\nAlice,30\nBob,41\n")
    pdf = FPDF()
    for text in ("First page says hello", "Second page says goodbye"):
        pdf.add_page()
        pdf.set_font("helvetica", size=14)
        pdf.cell(text=text)
    pdf.output(str(d / "doc.pdf"))

    document = docx.Document()
    document.add_paragraph("A paragraph about penguins.")
    table = document.add_table(rows=2, cols=2)
    for (r, c), text in {(0, 0): "Species", (0, 1): "Count", (1, 0): "Emperor", (1, 1): "77"}.items():
        table.cell(r, c).text = text
    document.save(str(d / "report.docx"))

    prs = Presentation()
    for i, title in enumerate(("Opening slide", "Closing slide")):
        slide = prs.slides.add_slide(prs.slide_layouts[5])
        slide.shapes.title.text = title
        if i == 1:
            box = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(4), Inches(1))
            box.text_frame.text = "Thanks for watching"
            slide.notes_slide.notes_text_frame.text = "speaker note here"
            grid = slide.shapes.add_table(2, 2, Inches(1), Inches(4), Inches(4), Inches(1)).table
            for (r, c), text in {(0, 0): "Q1", (0, 1): "Q2", (1, 0): "10", (1, 1): "20"}.items():
                grid.cell(r, c).text = text
    prs.save(str(d / "deck.pptx"))

    (d / "config.json").write_text(json.dumps({"answer": 42, "items": [1, 2]}))
    (d / "script.py").write_text("def f():\n    return 'snake'\n")
    (d / "notes.txt").write_text("plain text notes\n")
    (d / "long.txt").write_text("abcdefghij" * 5000)

    img = Image.new("RGB", (900, 220), "white")
    font = ImageFont.truetype(FONT, 96) if os.path.exists(FONT) else ImageFont.load_default(size=96)
    ImageDraw.Draw(img).text((30, 50), "AWORLD 42", fill="black", font=font)
    img.save(d / "sign.png")

    with wave.open(str(d / "tone.wav"), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"\x00\x00" * 12000)  # 1.5 s
    (d / "song.mp3").write_bytes(b"ID3\x03\x00\x00\x00" + bytes(300))

    with zipfile.ZipFile(d / "bundle.zip", "w") as zf:
        zf.writestr("inner/readme.txt", "hi")
        zf.writestr("data.bin", b"\x00" * 10)
    (d / "broken.pdf").write_bytes(b"garbage bytes, not a PDF \xff\xfe\x00" * 50)
    (d / "broken.xlsx").write_bytes(b"this is not a workbook" + bytes(range(256)))
    (d / "blob.bin").write_bytes(b"\x7fELF" + bytes(range(256)) * 4)
    shutil.copy(d / "data.xlsx", d / "misnamed.xls")  # really an xlsx: read by its content
    (d / "broken.xls").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(600))
    (d / "protein.pdb").write_text("HEADER    PROTEIN\nATOM      1  N   MET A   1\n")
    (d / "latin1.txt").write_bytes("café crème".encode("latin-1"))
    (d / "subdir").mkdir(exist_ok=True)
    return {p.name: p for p in d.iterdir()}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    base = tmp_path_factory.mktemp("gaia")
    found = make_files(base / "attachments")
    (base / "secret.txt").write_text("top secret")
    (base / "attachments" / "other_task.txt").write_text("another task's file")  # not an attachment
    (base / "attachments" / "link.txt").symlink_to("/etc/passwd")
    return found


@pytest.fixture(scope="module")
def hub(files):
    h = ToolHub(servers={"files": build_server()}).start()
    h.begin_episode(files=[str(p) for p in files.values()])
    yield h
    h.close()


def read(hub, path):
    result = hub.call([ToolCall("read_file", {"path": path})])[0]
    # a refusal or a failed read is a tool error; its text says why
    assert result.error == ("tool_error" if result.text.startswith("Error: ") else None), (result.error, result.text)
    return result.text


def test_tools_are_listed(hub):
    assert set(hub.tool_names) == {"read_file", "list_files", "describe_image", "transcribe_audio"}
    doc = next(t for t in hub.tool_schemas() if t["function"]["name"] == "read_file")["function"]["description"]
    assert "attached" in doc and len(doc) < 400


def test_xlsx_every_sheet_as_table(hub):
    text = read(hub, "data.xlsx")
    assert "## Sheet: Sales" in text and "## Sheet: Notes" in text
    assert "| 2 | North | 1234 |" in text and "567.5" in text
    assert "hidden gem" in text and "| A | B |" in text


def test_csv_as_table(hub):
    text = read(hub, "table.csv")
    assert "| name | age |" in text and "| Bob | 41 |" in text


def test_pdf_text_per_page(hub, files):
    text = read(hub, str(files["doc.pdf"]))  # an absolute path works too
    assert "--- Page 1 of 2 ---" in text and "--- Page 2 of 2 ---" in text
    assert text.index("First page says hello") < text.index("Page 2 of 2") < text.index("Second page says goodbye")


def test_docx_paragraphs_and_tables(hub):
    text = read(hub, "report.docx")
    assert "A paragraph about penguins." in text
    assert "| Species | Count |" in text and "| Emperor | 77 |" in text


def test_pptx_slides_tables_and_notes(hub):
    text = read(hub, "deck.pptx")
    assert "--- Slide 1 ---" in text and "Opening slide" in text
    assert text.index("--- Slide 2 ---") < text.index("Thanks for watching")
    assert "Notes: speaker note here" in text
    assert "| Q1 | Q2 |" in text and "| 10 | 20 |" in text


def test_text_formats(hub):
    assert json.loads(read(hub, "config.json")) == {"answer": 42, "items": [1, 2]}
    assert '  "answer": 42' in read(hub, "config.json")  # pretty-printed
    assert "return 'snake'" in read(hub, "script.py")
    assert read(hub, "notes.txt").strip() == "plain text notes"


def test_image_metadata_and_ocr(hub):
    text = read(hub, "sign.png")
    assert "PNG, 900x220 pixels" in text
    if shutil.which("tesseract") is None:
        pytest.skip("tesseract is not installed")
    assert "AWORLD" in text and "42" in text


def test_image_without_ocr(files):
    with ToolHub(servers={"files": build_server(ocr=False)}) as h:
        h.begin_episode(files=[str(files["sign.png"])])
        text = h.call([ToolCall("read_file", {"path": "sign.png"})])[0].text
    assert "PNG" in text and "OCR is turned off" in text and "AWORLD" not in text


def test_sniffing_and_encodings(hub):
    assert "## Sheet: Sales" in read(hub, "misnamed.xls") and "North" in read(hub, "misnamed.xls")
    assert read(hub, "broken.xls").startswith("Error: could not read 'broken.xls' as an Excel 97-2003 workbook")
    assert "ATOM      1  N   MET" in read(hub, "protein.pdb")  # unknown extension, but text
    assert read(hub, "latin1.txt") == "café crème"


def test_audio_is_a_clear_error(hub):
    text = read(hub, "tone.wav")
    assert text.startswith("Error: audio transcription is not supported offline")
    assert "tone.wav" in text and "duration 1.50 s" in text and "size" in text
    assert read(hub, "song.mp3").startswith("Error: audio transcription is not supported offline")


def test_zip_lists_members(hub):
    text = read(hub, "bundle.zip")
    assert "inner/readme.txt" in text and "data.bin (10)" in text


def test_corrupt_unknown_missing_and_directory(hub, files):
    text = read(hub, "broken.pdf")
    assert text.startswith("Error: could not read 'broken.pdf' as a PDF")
    assert read(hub, "broken.xlsx").startswith("Error: could not read 'broken.xlsx' as an Excel workbook")
    assert read(hub, "blob.bin").startswith(
        "Error: cannot read 'blob.bin': unsupported binary file (detected type: ELF"
    )
    assert read(hub, "subdir") == "Error: 'subdir' is a directory, not a file."
    gone = files["notes.txt"].parent / "gone.txt"
    hub.begin_episode(files=[*map(str, files.values()), str(gone)])  # attached, but missing on disk
    try:
        assert read(hub, "gone.txt") == "Error: file not found: 'gone.txt'."
    finally:
        hub.begin_episode(files=[str(p) for p in files.values()])


def test_access_control(hub, files):
    folder = files["notes.txt"].parent
    for path in ("/etc/passwd", "../secret.txt", str(folder / ".." / "secret.txt"), "link.txt", "other_task.txt",
                 str(folder / "link.txt"), "subdir/../../secret.txt", "/etc"):  # fmt: skip
        text = read(hub, path)
        assert text.startswith("Error: access denied: only the task's attachments can be read ("), path
        assert "data.xlsx" in text and "root:" not in text and "top secret" not in text
    assert read(hub, "/etc/passwd\x00.txt").startswith("Error:")


def test_roots_bound_the_attachments_and_grant_nothing(files, tmp_path):
    """``roots`` once made every file under them readable (GAIA's answer key included); now they only bound which
    attachments the hub may name: a file under a root that is not attached stays unreadable."""
    (tmp_path / "shared.txt").write_text("shared content")
    (tmp_path / "attached.txt").write_text("attached content")
    (tmp_path / "escape").symlink_to(files["notes.txt"].parent.parent / "secret.txt")
    with ToolHub(servers={"files": build_server(roots=[tmp_path])}) as h:
        h.begin_episode(files=[str(tmp_path / "attached.txt"), str(files["notes.txt"])])  # notes.txt: outside
        call = lambda p: h.call([ToolCall("read_file", {"path": p})])[0].text  # noqa: E731
        assert call("attached.txt") == call(str(tmp_path / "attached.txt")) == "attached content"
        for path in (str(tmp_path / "shared.txt"), "shared.txt", "escape", "notes.txt", str(files["notes.txt"]),
                     str(tmp_path / ".." / "x.txt"), "/etc/passwd"):  # fmt: skip
            assert call(path) == 'Error: access denied: only the task\'s attachments can be read ("attached.txt").'
        h.begin_episode(files=[])  # a task with no attachments: nothing under the root is readable
        assert call("shared.txt").startswith("Error: access denied") and "no files are attached" in call("/etc/passwd")


def test_truncation(hub):
    result = hub.call([ToolCall("read_file", {"path": "long.txt"})])[0]
    assert "[... truncated: " in result.text and " of 50000 characters shown]" in result.text
    assert len(result.text) <= 20_000 and not result.truncated  # fits the hub's own limit


def test_oversized_file(files):
    with ToolHub(servers={"files": build_server(max_file_bytes=1000, max_chars=500)}) as h:
        h.begin_episode(files=[str(files["long.txt"]), str(files["notes.txt"])])
        big = h.call([ToolCall("read_file", {"path": "long.txt"})])[0].text
        assert big == "Error: 'long.txt' is too large to read (50000 bytes; the limit is 1000)."
        assert h.call([ToolCall("read_file", {"path": "notes.txt"})])[0].text.strip() == "plain text notes"


def test_list_files(hub, files):
    text = hub.call([ToolCall("list_files", {})])[0].text
    assert '- "data.xlsx" (' in text and "Excel workbook" in text  # names as JSON strings: one line each
    assert '- "notes.txt" (17 bytes, text)' in text and "PDF document" in text
    hub.begin_episode(files=[])
    try:
        assert hub.call([ToolCall("list_files", {})])[0].text == "No files are attached to this task."
        assert read(hub, "notes.txt").startswith("Error: access denied")
    finally:
        hub.begin_episode(files=[str(p) for p in files.values()])


def test_concurrent_reads(hub):
    names = ["data.xlsx", "doc.pdf", "report.docx", "deck.pptx", "broken.pdf", "table.csv"]
    results = hub.call([ToolCall("read_file", {"path": n}, id=str(i)) for i, n in enumerate(names)])
    assert "North" in results[0].text and "goodbye" in results[1].text and "Bob" in results[5].text
    assert results[4].text.startswith("Error:")


def test_stdio_module(files):
    """``python -m aworld_gym.envs.gaia.files_server`` as a stdio server, with ``--root`` (which bounds the
    attachments: a file under it that is not attached is not readable)."""
    root = str(files["notes.txt"].parent)
    args = ["-m", "aworld_gym.envs.gaia.files_server", "--root", root]
    config = {"mcpServers": {"files": {"command": sys.executable, "args": args}}}
    with ToolHub(config) as h:
        h.begin_episode(files=[str(files["table.csv"])])
        assert "| Bob | 41 |" in h.call([ToolCall("read_file", {"path": "table.csv"})])[0].text
        assert h.call([ToolCall("read_file", {"path": "notes.txt"})])[0].text.startswith("Error: access denied")
        assert h.call([ToolCall("read_file", {"path": "/etc/passwd"})])[0].text.startswith("Error: access denied")
