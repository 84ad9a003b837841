"""The bundled GAIA-format sample set: 35 tasks we wrote, attachments generated here, a local search corpus.

The real GAIA data is gated and cannot ship. These tasks follow its format and its levels' styles: single
look-ups, multi-step computations, list answers, numbers with units, and questions that need search plus a
file. Attachments (xlsx, csv, pdf, docx, pptx, json, py, png, txt) and the search documents are generated
deterministically by :func:`generate` into a cache folder on first use::

    python -m aworld_gym.envs.gaia.sample --out DIR

Each task carries a ``reference`` plan (tool calls per turn, then a regex over the observations and an optional
arithmetic step) that the scripted reference policy follows: it solves every task through the tools.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from aworld_gym.envs.gaia.sample_files import (
    NOTES,
    PUZZLE,
    SETTINGS,
    csv_file,
    docx_file,
    logs_zip,
    orders_db,
    pdf_file,
    png_file,
    pptx_file,
    site_folder,
    voicemail_wav,
    xlsx_file,
)

VERSION = "4"
SPLIT = "validation"


def _rp(code: str) -> dict[str, Any]:
    return {"name": "run_python", "arguments": {"code": code}}


def _sh(command: str) -> dict[str, Any]:
    return {"name": "run_shell", "arguments": {"command": command}}


def _nav(url: str) -> dict[str, Any]:
    return {"name": "browser_navigate", "arguments": {"url": url}}


def _read(name: str) -> dict[str, Any]:
    return {"name": "read_file", "arguments": {"path": name}}


def _search(query: str) -> dict[str, Any]:
    return {"name": "web_search", "arguments": {"query": query}}


def _fetch(url: str) -> dict[str, Any]:
    return {"name": "fetch_url", "arguments": {"url": url}}


_XLSX = "import openpyxl\nwb = openpyxl.load_workbook('/sandbox/files/sales_2023.xlsx', data_only=True)\n"
_ROWS = "rows = {{s: {{r[0]: r[1:] for r in wb[s].iter_rows(min_row=2, values_only=True)}} for s in ('Q1', 'Q2')}}\n"
_CSV = "import csv\nrows = list(csv.DictReader(open('/sandbox/files/inventory.csv')))\n"
_DOCX = (
    "import docx\nd = docx.Document('/sandbox/files/meeting_memo.docx')\n"
    "table = [[c.text for c in r.cells] for r in d.tables[0].rows][1:]\n"
)
_JSON = "import json\ncfg = json.load(open('/sandbox/files/settings.json'))\n"
W = "https://wiki.example.org/"

# Each task: id, level, question, answer, attachment file name, reference plan.
TASKS: list[dict[str, Any]] = [
    # ----- spreadsheet (xlsx) -------------------------------------------------------------------------------
    {"id": "s01", "level": 1, "file": "sales_2023.xlsx", "answer": "35",
     "q": "The attached spreadsheet lists sales per quarter. How many desks were sold in Q2?",
     "ref": {"turns": [[_rp(_XLSX + _ROWS.format() + "print('ANSWER=', rows['Q2']['Desk'][0])")]],
             "pattern": r"ANSWER= (\S+)"}},
    {"id": "s02", "level": 1, "file": "sales_2023.xlsx", "answer": "297",
     "q": "According to the attached spreadsheet, how many units were sold in total in Q1?",
     "ref": {"turns": [[_rp(_XLSX + _ROWS.format() + "print('ANSWER=', sum(v[0] for v in rows['Q1'].values()))")]],
             "pattern": r"ANSWER= (\S+)"}},
    {"id": "s03", "level": 2, "file": "sales_2023.xlsx", "answer": "13212.5",
     "q": "Using the attached spreadsheet, what was the total revenue in USD from chairs across both quarters? "
          "Answer with a number.",
     "ref": {"turns": [[_rp(_XLSX + _ROWS.format()
                            + "print('ANSWER=', sum(rows[q]['Chair'][0] * rows[q]['Chair'][1] for q in rows))")]],
             "pattern": r"ANSWER= (\S+)"}},
    {"id": "s04", "level": 2, "file": "sales_2023.xlsx", "answer": "Chair, Lamp, Shelf",
     "q": "Which products sold more units in Q2 than in Q1 in the attached spreadsheet? Give a comma-separated "
          "list in alphabetical order.",
     "ref": {"turns": [[_rp(_XLSX + _ROWS.format() + "up = sorted(p for p in rows['Q1'] if rows['Q2'][p][0] > "
                            "rows['Q1'][p][0])\nprint('ANSWER=', ', '.join(up))")]],
             "pattern": r"ANSWER= (.+)"}},
    # ----- csv ----------------------------------------------------------------------------------------------
    {"id": "c01", "level": 1, "file": "inventory.csv", "answer": "300",
     "q": "How many hinges are in stock according to the attached inventory?",
     "ref": {"turns": [[_read("inventory.csv")]], "pattern": r"Hinge\W+South\W+(\d+)"}},
    {"id": "c02", "level": 2, "file": "inventory.csv", "answer": "795 kg",
     "q": "What is the total weight of all stock in the East warehouse of the attached inventory? Give the answer "
          "with the unit kg, e.g. '12 kg'.",
     "ref": {"turns": [[_rp(_CSV + "w = sum(int(r['qty']) * float(r['unit_weight_kg']) for r in rows if "
                            "r['warehouse'] == 'East')\nprint('ANSWER=', f'{w:g} kg')")]],
             "pattern": r"ANSWER= (.+)"}},
    {"id": "c03", "level": 2, "file": "inventory.csv", "answer": "East",
     "q": "Which warehouse in the attached inventory holds the heaviest total stock by weight?",
     "ref": {"turns": [[_rp(_CSV + "t = {}\nfor r in rows:\n    t[r['warehouse']] = t.get(r['warehouse'], 0) + "
                            "int(r['qty']) * float(r['unit_weight_kg'])\nprint('ANSWER=', max(t, key=t.get))")]],
             "pattern": r"ANSWER= (\S+)"}},
    # ----- pdf ----------------------------------------------------------------------------------------------
    {"id": "p01", "level": 1, "file": "annual_report.pdf", "answer": "1340",
     "q": "According to the attached annual report, how many people did the company employ at year end?",
     "ref": {"turns": [[_read("annual_report.pdf")]], "pattern": r"employed ([\d,]+) people"}},
    {"id": "p02", "level": 1, "file": "annual_report.pdf", "answer": "Tallinn",
     "q": "In which city did the company in the attached report open a new depot?",
     "ref": {"turns": [[_read("annual_report.pdf")]], "pattern": r"depot in ([A-Z][a-z]+)"}},
    {"id": "p03", "level": 2, "file": "annual_report.pdf", "answer": "20.5",
     "q": "The company in the attached report had revenue of 40 million euros in 2022. By what percentage did its "
          "revenue grow in 2023? Round to one decimal place.",
     "ref": {"turns": [[_read("annual_report.pdf")]], "pattern": r"Revenue grew to ([\d.]+) million",
             "compute": "round((float(g[0]) - 40) / 40 * 100, 1)"}},
    # ----- docx ---------------------------------------------------------------------------------------------
    {"id": "d01", "level": 1, "file": "meeting_memo.docx", "answer": "Tomas Berg",
     "q": "Who leads project Borealis according to the attached memo?",
     "ref": {"turns": [[_rp(_DOCX + "print('ANSWER=', [r[1] for r in table if r[0] == 'Borealis'][0])")]],
             "pattern": r"ANSWER= (.+)"}},
    {"id": "d02", "level": 2, "file": "meeting_memo.docx", "answer": "355",
     "q": "What is the combined budget, in thousands of euros, of the projects approved in the attached memo?",
     "ref": {"turns": [[_rp(_DOCX + "print('ANSWER=', sum(int(r[2]) for r in table))")]],
             "pattern": r"ANSWER= (\S+)"}},
    {"id": "d03", "level": 2, "file": "meeting_memo.docx", "answer": "Tomas Berg, Mei Lin, Ana Ruiz",
     "q": "List the project leads named in the attached memo, ordered alphabetically by last name, "
          "comma-separated.",
     "ref": {"turns": [[_rp(_DOCX + "print('ANSWER=', ', '.join(sorted((r[1] for r in table), "
                            "key=lambda n: n.split()[-1])))")]],
             "pattern": r"ANSWER= (.+)"}},
    # ----- pptx ---------------------------------------------------------------------------------------------
    {"id": "k01", "level": 1, "file": "roadmap.pptx", "answer": "4",
     "q": "How many new markets does the attached roadmap plan to expand to?",
     "ref": {"turns": [[_read("roadmap.pptx")]], "pattern": r"expand to (\d+) new markets"}},
    {"id": "k02", "level": 1, "file": "roadmap.pptx", "answer": "2500000",
     "q": "How many users does the attached roadmap target by December? Answer with a plain number.",
     "ref": {"turns": [[_read("roadmap.pptx")]], "pattern": r"([\d.]+) million users",
             "compute": "int(float(g[0]) * 1_000_000)"}},
    # ----- json ---------------------------------------------------------------------------------------------
    {"id": "j01", "level": 1, "file": "settings.json", "answer": "768",
     "q": "In the attached service configuration, how many megabytes of memory is each replica limited to?",
     "ref": {"turns": [[_read("settings.json")]], "pattern": r'"memory_mb":\s*(\d+)'}},
    {"id": "j02", "level": 2, "file": "settings.json", "answer": "2304",
     "q": "How many megabytes of memory do all replicas of the service in the attached configuration get in "
          "total?",
     "ref": {"turns": [[_rp(_JSON + "print('ANSWER=', cfg['replicas'] * cfg['limits']['memory_mb'])")]],
             "pattern": r"ANSWER= (\S+)"}},
    {"id": "j03", "level": 1, "file": "settings.json", "answer": "eu-west, us-east, ap-south",
     "q": "List the regions of the attached configuration, comma-separated, in the order given.",
     "ref": {"turns": [[_rp(_JSON + "print('ANSWER=', ', '.join(cfg['regions']))")]], "pattern": r"ANSWER= (.+)"}},
    # ----- py, png, txt -------------------------------------------------------------------------------------
    {"id": "y01", "level": 2, "file": "puzzle.py", "answer": "259",
     "q": "What number does the attached Python script print?",
     "ref": {"turns": [[_rp("exec(open('/sandbox/files/puzzle.py').read())")]], "pattern": r"stdout ---\n(\d+)"}},
    {"id": "i01", "level": 1, "file": "gate_sign.png", "answer": "17B",
     "q": "Which gate is shown on the attached photo of a sign?",
     "ref": {"turns": [[_read("gate_sign.png")]], "pattern": r"GATE\s+(\w+)"}},
    {"id": "t01", "level": 1, "file": "field_notes.txt", "answer": "34",
     "q": "How many herons were counted in total in the attached field notes?",
     "ref": {"turns": [[_rp("import re\nt = open('/sandbox/files/field_notes.txt').read()\n"
                            "print('ANSWER=', sum(int(n) for n in re.findall(r'(\\d+) herons', t)))")]],
             "pattern": r"ANSWER= (\S+)"}},
    # ----- zip and sqlite, through run_shell ----------------------------------------------------------------
    {"id": "h01", "level": 2, "file": "server_logs.zip", "answer": "6",
     "q": "The attached archive holds server logs. How many ERROR lines are there across all of its log files?",
     "ref": {"turns": [[_sh("unzip -o -q /sandbox/files/server_logs.zip -d . && cat logs/*.log | grep -c ERROR")]],
             "pattern": r"--- stdout ---\s+(\d+)"}},
    {"id": "h02", "level": 2, "file": "orders.db", "answer": "420.5",
     "q": "The attached SQLite database lists orders. What is the total value of the shipped orders to Norway?",
     "ref": {"turns": [[_sh("sqlite3 /sandbox/files/orders.db \"select sum(total) from orders where "
                            "country = 'Norway' and status = 'shipped'\"")]],
             "pattern": r"--- stdout ---\s+([\d.]+)"}},
    # ----- a web site, through the browser (browser=True) ---------------------------------------------------
    {"id": "b01", "level": 2, "file": "", "answer": "23", "needs": "browser",
     "q": "The city archive at http://archive.sample.test/ links to the 2023 election results. How many seats did "
          "the Blue party win?",
     "ref": {"turns": [[_nav("http://archive.sample.test/")],
                       [{"name": "browser_click", "arguments": {"element": "Election results 2023 link",
                                                                "target": "text=Election results 2023"}}],
                       [{"name": "browser_snapshot", "arguments": {}}]],
             "pattern": r'cell "Blue"[^\n]*\n\s*- cell "(\d+)"'}},
    # ----- an image and an audio file, through model endpoints (vision_model= / audio_model=) ----------------
    {"id": "m01", "level": 1, "file": "gate_sign.png", "answer": "17B", "needs": "vision",
     "q": "Which gate does the attached departure sign show? Answer with the gate's code.",
     "ref": {"turns": [[{"name": "describe_image", "arguments": {"path": "gate_sign.png",
                                                                 "question": "What text is on the sign?"}}]],
             "pattern": r"GATE\s+(\w+)"}},
    {"id": "m02", "level": 2, "file": "voicemail.wav", "answer": "4719", "needs": "audio",
     "q": "The attached voicemail reads out a PIN. What is the PIN? Answer with its digits only.",
     "ref": {"turns": [[{"name": "transcribe_audio", "arguments": {"path": "voicemail.wav"}}]],
             "pattern": r"(\d(?:[\s,-]*\d)+)", "compute": "''.join(c for c in g[0] if c.isdigit())"}},
    # ----- search -------------------------------------------------------------------------------------------
    {"id": "w01", "level": 1, "file": "", "answer": "1887",
     "q": "In what year was the Varnholm Lighthouse completed?",
     "ref": {"turns": [[_search("Varnholm Lighthouse completed")], [_fetch(W + "Varnholm_Lighthouse")]],
             "pattern": r"completed in (\d{4})"}},
    {"id": "w02", "level": 1, "file": "", "answer": "412",
     "q": "How long is the Kestrel River, in kilometres? Answer with a number.",
     "ref": {"turns": [[_search("Kestrel River length")], [_fetch(W + "Kestrel_River")]],
             "pattern": r"(\d+) kilometres long"}},
    {"id": "w03", "level": 2, "file": "", "answer": "Lindqvist",
     "q": "Which athlete has won the Aurelian Cup more than once? Give the surname.",
     "ref": {"turns": [[_search("Aurelian Cup winners")], [_fetch(W + "Aurelian_Cup")]],
             "pattern": r"(?s)2019\W+(\w+).*?2022\W+\1"}},
    {"id": "w04", "level": 2, "file": "", "answer": "Fenn, Hollow Brook, Sedge",
     "q": "List the tributaries of the Kestrel River in alphabetical order, comma-separated.",
     "ref": {"turns": [[_fetch(W + "Kestrel_River")]], "pattern": r"tributaries are the (\w+), the ([\w ]+?) and the (\w+)",
             "compute": "', '.join(sorted(g))"}},
    {"id": "w05", "level": 2, "file": "", "answer": "65",
     "q": "What is the population density of the island of Skarv, in people per square kilometre, rounded to the "
          "nearest integer?",
     "ref": {"turns": [[_search("Skarv island population area")], [_fetch(W + "Skarv")]],
             "pattern": r"(?s)population of ([\d,]+).*?area of ([\d.]+)",
             "compute": "round(int(g[0].replace(',', '')) / float(g[1]))"}},
    {"id": "w06", "level": 2, "file": "", "answer": "Graz",
     "q": "In which city was the botanist who described 27 species of moss born?",
     "ref": {"turns": [[_search("botanist described 27 species of moss")], [_fetch(W + "Ilse_Kowarik")]],
             "pattern": r"born in ([A-Z][a-z]+)"}},
    {"id": "w07", "level": 3, "file": "", "answer": "Maren Tolst",
     "q": "Who designed the lighthouse on the island that had 1,204 inhabitants at its 2020 census?",
     "ref": {"turns": [[_search("island 1,204 inhabitants 2020 census")], [_fetch(W + "Skarv")],
                       [_fetch(W + "Varnholm_Lighthouse")]],
             "pattern": r"design by engineer ([A-Z][a-z]+ [A-Z][a-z]+)"}},
    {"id": "x01", "level": 3, "file": "annual_report.pdf", "answer": "1998",
     "q": "In what year was the company that published the attached annual report founded?",
     "ref": {"turns": [[_read("annual_report.pdf")], [_search("Harbor Logistics founded")],
                       [_fetch(W + "Harbor_Logistics")]],
             "pattern": r"founded in (\d{4})"}},
    {"id": "x02", "level": 3, "file": "roadmap.pptx", "answer": "Priya Natarajan",
     "q": "The attached roadmap launches a product in Q1. Who is that product's product manager?",
     "ref": {"turns": [[_read("roadmap.pptx")], [_search("Orion budgeting app product manager")],
                       [_fetch(W + "Orion_(app)")]],
             "pattern": r"product manager is ([A-Z][a-z]+ [A-Z][a-z]+)"}},
]  # fmt: skip

DOCS: dict[str, tuple[str, str, str]] = {
    # file name: (URL, title, body)
    "varnholm_lighthouse.txt": (W + "Varnholm_Lighthouse", "Varnholm Lighthouse",
        "The Varnholm Lighthouse is a 34-metre stone tower on the northern cape of the island of Skarv. It was "
        "completed in 1887 to a design by engineer Maren Tolst, and its lamp was electrified in 1931. The "
        "lighthouse was automated in 1979 and now houses a small maritime museum."),
    "kestrel_river.md": (W + "Kestrel_River", "Kestrel River",
        "# Kestrel River\n\nThe Kestrel River is 412 kilometres long and flows from the Aumo highlands into Lake "
        "Aumo. Its main tributaries are the Sedge, the Hollow Brook and the Fenn. The river was used for timber "
        "rafting until 1954."),
    "aurelian_cup.html": (W + "Aurelian_Cup", "Aurelian Cup",
        "<html><head><title>Aurelian Cup</title><script>var tracking = 'ignore me';</script></head><body>"
        "<h1>Aurelian Cup</h1><p>The Aurelian Cup is an annual cross-country ski race.</p><table>"
        "<tr><th>Year</th><th>Winner</th></tr><tr><td>2019</td><td>Lindqvist</td></tr>"
        "<tr><td>2020</td><td>cancelled</td></tr><tr><td>2021</td><td>Okafor</td></tr>"
        "<tr><td>2022</td><td>Lindqvist</td></tr><tr><td>2023</td><td>Varga</td></tr></table></body></html>"),
    "ilse_kowarik.txt": (W + "Ilse_Kowarik", "Ilse Kowarik",
        "Dr. Ilse Kowarik (1921-2004) was an Austrian botanist, born in Graz. She described 27 species of moss "
        "and led the alpine herbarium of the University of Innsbruck from 1962 to 1986."),
    "harbor_logistics.txt": (W + "Harbor_Logistics", "Harbor Logistics",
        "Harbor Logistics is a Dutch freight company headquartered in Rotterdam. It was founded in 1998 by "
        "Joost Verhaar and operates depots in six countries."),
    "orion_app.txt": (W + "Orion_(app)", "Orion (app)",
        "Orion is a personal budgeting app developed by the Lumen Group. Its beta version launched in the first "
        "quarter of 2024. The product manager is Priya Natarajan."),
    "skarv.txt": (W + "Skarv", "Skarv",
        "Skarv is an island in the northern archipelago. At the 2020 census it had a population of 1,204 "
        "inhabitants on a land area of 18.5 square kilometres. Its best-known landmark is the Varnholm "
        "Lighthouse."),
    "lighthouses.txt": (W + "Lighthouse", "Lighthouse",
        "A lighthouse is a tower designed to emit light to aid navigation. Many nineteenth-century lighthouses "
        "were built of stone and later automated."),
    "lake_aumo.txt": (W + "Lake_Aumo", "Lake Aumo",
        "Lake Aumo is a freshwater lake fed by several rivers, the longest of which rises in the highlands."),
    "moss.txt": (W + "Moss", "Moss",
        "Mosses are small non-vascular plants. Botanists have described more than 12,000 species of moss."),
}  # fmt: skip


def default_dir() -> Path:
    """Where the sample set is generated (``$AWORLD_GYM_DATA`` or ``~/.cache/aworld-gym``)."""
    base = os.environ.get("AWORLD_GYM_DATA") or os.path.join(os.path.expanduser("~"), ".cache", "aworld-gym")
    return Path(base) / f"gaia-sample-v{VERSION}"


def ensure_sample(path: str | Path | None = None) -> Path:
    """Generate the sample set at ``path`` unless it is complete there; returns the folder."""
    out = Path(path) if path else default_dir()
    if (out / "COMPLETE").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".gaia-sample-", dir=out.parent))
    try:
        generate(tmp)
        (tmp / "COMPLETE").write_text(VERSION)
        try:
            tmp.rename(out)  # atomic: concurrent generators race safely
        except OSError:
            if not (out / "COMPLETE").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def generate(out: Path) -> None:
    """Write ``2023/validation/metadata.jsonl``, the attachments beside it, and ``search_docs/``."""
    split = out / "2023" / SPLIT
    split.mkdir(parents=True, exist_ok=True)
    xlsx_file(split / "sales_2023.xlsx")
    csv_file(split / "inventory.csv")
    pdf_file(split / "annual_report.pdf")
    docx_file(split / "meeting_memo.docx")
    pptx_file(split / "roadmap.pptx")
    (split / "settings.json").write_text(json.dumps(SETTINGS, indent=2) + "\n")
    (split / "puzzle.py").write_text(PUZZLE)
    (split / "field_notes.txt").write_text(NOTES)
    png_file(split / "gate_sign.png")
    logs_zip(split / "server_logs.zip")
    orders_db(split / "orders.db")
    site_folder(out / "site")
    voicemail_wav(split / "voicemail.wav")
    with open(split / "metadata.jsonl", "w", encoding="utf-8") as f:
        for t in TASKS:
            row = {
                "task_id": f"sample-{t['id']}",
                "Question": t["q"],
                "Level": t["level"],
                "Final answer": t["answer"],
                "file_name": t["file"],
                "Annotator Metadata": {"Steps": "written for aworld-gym's bundled sample set"},
                "reference": t["ref"],
            }
            if t.get("needs"):
                row["needs"] = t["needs"]  # a tool the env offers only when asked (GAIA-v0 leaves the task out)
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    docs = out / "search_docs"
    docs.mkdir(exist_ok=True)
    for name, (url, title, body) in DOCS.items():
        if name.endswith(".html"):
            text = body.replace("<head>", f'<head><link rel="canonical" href="{url}">')
        else:
            text = f"URL: {url}\nTitle: {title}\n\n{body}\n"
        (docs / name).write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="folder (default: the cache folder the env uses)")
    args = ap.parse_args(argv)
    print(ensure_sample(args.out))


if __name__ == "__main__":
    main()
