"""The attachments of the bundled GAIA sample set: their data, and the writers that make each file deterministically
(xlsx, csv, pdf, docx, pptx, png); the tasks' answers are computed from the same data."""

from __future__ import annotations

from pathlib import Path

SALES = {
    "Q1": [("Lamp", 120, 25.0), ("Desk", 40, 210.0), ("Chair", 85, 75.5), ("Shelf", 30, 60.0), ("Rug", 22, 130.0)],
    "Q2": [("Lamp", 140, 25.0), ("Desk", 35, 215.0), ("Chair", 90, 75.5), ("Shelf", 45, 60.0), ("Rug", 18, 135.0)],
}
INVENTORY = [
    ("A100", "Bolt M6", "North", 1200, 0.01), ("A101", "Nut M6", "North", 1500, 0.005),
    ("B200", "Hinge", "South", 300, 0.12), ("B201", "Bracket", "South", 450, 0.3),
    ("C300", "Panel", "East", 80, 4.5), ("C301", "Frame", "East", 60, 7.25),
]  # fmt: skip
SETTINGS = {"service": "ledger", "replicas": 3, "regions": ["eu-west", "us-east", "ap-south"],
            "limits": {"cpu": "500m", "memory_mb": 768}}  # fmt: skip
PUZZLE = "def f(n):\n    return sum(i * i for i in range(1, n + 1) if i % 3 != 0)\n\n\nprint(f(10))\n"
NOTES = (
    "Day 1: counted 14 herons at the north pond.\nDay 2: counted 9 herons and 3 storks.\nDay 3: counted 11 herons.\n"
)
PROJECTS = [("Atlas", "Ana Ruiz", "120"), ("Borealis", "Tomas Berg", "95"), ("Cygnus", "Mei Lin", "140")]


def xlsx_file(path: Path) -> None:
    import openpyxl

    wb = openpyxl.Workbook()
    wb.remove(wb.active)
    for quarter, rows in SALES.items():
        ws = wb.create_sheet(quarter)
        ws.append(["Product", "Units", "Unit price (USD)"])
        for row in rows:
            ws.append(list(row))
    wb.save(path)


def csv_file(path: Path) -> None:
    lines = ["sku,item,warehouse,qty,unit_weight_kg"] + [",".join(map(str, r)) for r in INVENTORY]
    path.write_text("\n".join(lines) + "\n")


def pdf_file(path: Path) -> None:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("Helvetica", size=12)
    pages = [
        "Harbor Logistics - Annual Report 2023\n\nRevenue grew to 48.2 million euros, driven by new routes in "
        "the Baltic region.",
        "People and sites\n\nThe company employed 1,340 people at year end. The new depot in Tallinn opened on "
        "14 March 2023.",
    ]
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 8, text)
    pdf.output(str(path))


def docx_file(path: Path) -> None:
    import docx

    d = docx.Document()
    d.add_heading("Budget committee memo", level=1)
    d.add_paragraph("The budget committee approved three projects: Atlas, Borealis and Cygnus.")
    table = d.add_table(rows=1, cols=3)
    for cell, text in zip(table.rows[0].cells, ("Project", "Lead", "Budget (kEUR)"), strict=True):
        cell.text = text
    for row in PROJECTS:
        cells = table.add_row().cells
        for cell, text in zip(cells, row, strict=True):
            cell.text = text
    d.save(str(path))


def pptx_file(path: Path) -> None:
    from pptx import Presentation
    from pptx.util import Inches

    prs = Presentation()
    slides = [
        ("Roadmap 2024", "Lumen Group product plan"),
        ("Milestones", "Q1: launch Orion beta\nQ3: expand to 4 new markets"),
        ("Goal", "Target: 2.5 million users by December"),
    ]
    for title, body in slides:
        slide = prs.slides.add_slide(prs.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    _ = Inches
    prs.save(str(path))


def png_file(path: Path) -> None:
    from PIL import Image, ImageDraw, ImageFont

    img = Image.new("RGB", (900, 360), "white")
    draw = ImageDraw.Draw(img)
    try:
        font = ImageFont.truetype("DejaVuSans-Bold.ttf", 96)
    except OSError:
        font = ImageFont.load_default(size=96)
    draw.text((60, 60), "GATE 17B", fill="black", font=font)
    draw.text((60, 200), "DEPARTS 09:45", fill="black", font=font)
    img.save(path)


LOGS = {  # name -> lines; 3 + 1 + 2 = 6 ERROR lines in all
    "web-1.log": ["09:00 INFO start", "09:01 ERROR timeout on /api", "09:02 INFO ok", "09:05 ERROR timeout on /api",
                  "09:09 ERROR disk full"],
    "web-2.log": ["09:00 INFO start", "09:03 WARN slow", "09:07 ERROR disk full"],
    "worker.log": ["08:59 INFO start", "09:04 ERROR queue lost", "09:06 ERROR queue lost", "09:08 INFO done"],
}  # fmt: skip
ORDERS = [(1, "Norway", 120.5, "shipped"), (2, "Sweden", 80.0, "shipped"), (3, "Norway", 45.25, "pending"),
          (4, "Norway", 300.0, "shipped"), (5, "Denmark", 99.9, "shipped")]  # fmt: skip


def logs_zip(path: Path) -> None:
    """Server logs in a zip archive (a task for run_shell: unzip, then grep)."""
    import zipfile

    with zipfile.ZipFile(path, "w") as z:
        for name, lines in LOGS.items():
            z.writestr(f"logs/{name}", "\n".join(lines) + "\n")


def orders_db(path: Path) -> None:
    """A SQLite database of orders (a task for run_shell: sqlite3)."""
    import sqlite3

    db = sqlite3.connect(path)
    db.execute("create table orders (id integer primary key, country text, total real, status text)")
    db.executemany("insert into orders values (?, ?, ?, ?)", ORDERS)
    db.commit()
    db.close()


SITE = {  # the bundled web site (served as http://archive.sample.test/ to GAIA's browser)
    "index.html": "<!doctype html><html><head><title>City archive</title></head><body><h1>City archive</h1>"
    "<p>Public records of the city of Norhaven.</p><ul><li><a href='budget.html'>Budget 2023</a></li>"
    "<li><a href='results.html'>Election results 2023</a></li></ul></body></html>",
    "results.html": "<!doctype html><html><head><title>Election results 2023</title></head><body>"
    "<h1>Election results 2023</h1><table><tr><th>Party</th><th>Seats</th></tr><tr><td>Green</td><td>17</td></tr>"
    "<tr><td>Blue</td><td>23</td></tr><tr><td>Red</td><td>11</td></tr></table></body></html>",
    "budget.html": "<!doctype html><html><head><title>Budget 2023</title></head><body><h1>Budget 2023</h1>"
    "<p>The city spent 41 million on schools.</p></body></html>",
}


def site_folder(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for name, html in SITE.items():
        (path / name).write_text(html, encoding="utf-8")


DTMF = {"1": (697, 1209), "2": (697, 1336), "3": (697, 1477), "4": (770, 1209), "5": (770, 1336),
        "6": (770, 1477), "7": (852, 1209), "8": (852, 1336), "9": (852, 1477), "0": (941, 1336)}  # fmt: skip
VOICEMAIL_PIN = "4719"


def voicemail_wav(path: Path, digits: str = VOICEMAIL_PIN, rate: int = 8000) -> None:
    """A voicemail of touch-tones (DTMF, 0.2 s per digit, 0.1 s apart): an audio question for transcribe_audio."""
    import math
    import struct
    import wave

    frames = bytearray()
    for d in digits:
        low, high = DTMF[d]
        for i in range(int(0.2 * rate)):
            t = i / rate
            frames += struct.pack(
                "<h", int(12000 * (math.sin(2 * math.pi * low * t) + math.sin(2 * math.pi * high * t)))
            )
        frames += b"\x00\x00" * int(0.1 * rate)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(bytes(frames))
