"""How fast `aworld-gym report` reads big runs and how fast its HTML opens in a browser.

Collects a real GAIA-v0 run (the bundled sample set, G samples per task, some answers wrong), then makes runs of
1,000 and 10,000 episodes from its records (task ids renamed, so every episode is distinct), and measures for each:
the tables (`aworld-gym report --json`: seconds and peak memory of the process), the HTML (seconds, size,
transcripts embedded), and the page opened in headless Chromium through Playwright MCP (seconds from navigation
to the viewer's ready mark, and to the load event). Prints a table and writes JSON.

    python benchmarks/report.py [--sizes 1000,10000]
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aworld_gym.rollout.collect import collect  # noqa: E402
from benchmarks.provenance import stamp  # noqa: E402
from tests.report.test_report_browser import SometimesWrong  # noqa: E402
from tests.report_page import Page  # noqa: E402

# the report command in a process that prints its own peak RSS (KB) last
PEAK = (
    "import resource, sys\nfrom aworld_gym.cli import main\nrc = main(sys.argv[1:])\n"
    "print('peak_rss_kb', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\nsys.exit(rc)"
)
READY_JS = """() => { const nav = performance.getEntriesByType('navigation')[0];
  const ready = performance.getEntriesByName('aworld-report-ready')[0];
  return {ready_s: ready ? ready.startTime / 1000 : null, load_s: nav ? nav.loadEventEnd / 1000 : null,
          count: document.getElementById('count').textContent}; }"""


def make_run(seed_records: list[dict], n: int, path: Path) -> None:
    with path.open("w") as f:
        for i in range(n):
            r = dict(seed_records[i % len(seed_records)])
            r["task_id"] = f"{r['task_id']}-copy{i // len(seed_records)}"
            r["episode_id"] = f"e{i}"
            f.write(json.dumps(r) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/report.json"))
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="aworld-report-bench-") as tmp:
        work = Path(tmp)
        seeds = itertools.count()
        collect("AWorld/GAIA-v0", lambda: SometimesWrong(next(seeds)), episodes=24 * 4, group_size=4,
                concurrency=4, sink=work / "seed.jsonl", progress=False)  # fmt: skip
        seed_records = [json.loads(line) for line in (work / "seed.jsonl").read_text().splitlines()]
        cli = str(Path(sys.executable).parent / "aworld-gym")
        for n in (int(s) for s in args.sizes.split(",")):
            run = work / f"run-{n}.jsonl"
            make_run(seed_records, n, run)
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", PEAK, "report", str(run), "--by", "level", "--json",
                                  str(work / "r.json")], check=True, capture_output=True, text=True)  # fmt: skip
            tables_s = time.perf_counter() - t0
            peak_mb = int(out.stdout.strip().splitlines()[-1].split()[-1]) / 1024
            html = work / f"run-{n}.html"
            t0 = time.perf_counter()
            out = subprocess.run([cli, "report", str(run), "--html", str(html)], check=True, capture_output=True,
                                 text=True)  # fmt: skip
            html_s = time.perf_counter() - t0
            embedded = out.stdout.strip().splitlines()[-1]
            with Page(html) as page:
                page.open()
                seen = page.js(READY_JS)
            rows.append({"episodes": n, "jsonl_mb": run.stat().st_size / 2**20, "tables_s": tables_s,
                         "tables_peak_rss_mb": peak_mb, "html_s": html_s, "html_mb": html.stat().st_size / 2**20,
                         "embedded": embedded, "open_ready_s": seen["ready_s"], "open_load_s": seen["load_s"],
                         "list": seen["count"]})  # fmt: skip
    print(f"{'episodes':>8} {'JSONL MB':>9} {'tables s':>9} {'peak RSS':>9} {'HTML s':>7} {'HTML MB':>8} "
          f"{'open: ready s':>14} {'load s':>7}")  # fmt: skip
    for r in rows:
        print(f"{r['episodes']:>8} {r['jsonl_mb']:>9.1f} {r['tables_s']:>9.2f} {r['tables_peak_rss_mb']:>8.0f}M "
              f"{r['html_s']:>7.2f} {r['html_mb']:>8.1f} {r['open_ready_s']:>14.2f} {r['open_load_s']:>7.2f}")  # fmt: skip
        print(f"{'':>8} {r['embedded']}; list: {r['list']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(stamp({"rows": rows}), indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
