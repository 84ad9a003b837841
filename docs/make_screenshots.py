"""The docs' picture of a Browser-v0 transcript in the report viewer, made from a real run: one MiniWoB++ episode
(``click-checkboxes``, the reference policy, the system Chromium through Playwright MCP), its report built, opened
in headless Chromium and the transcript's first turn photographed: the tool call, its empty result and the page
snapshot the agent saw (the observation).

``make docs-images`` runs it (about 30 s); ``PYTHONPATH=. python docs/make_screenshots.py [OUT.png]`` (from the
checkout, which holds ``tests/report_page.py``) writes
``docs/images/browser-transcript.png`` by default, and checks what it photographs before it writes anything.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from aworld_gym.report.html import build
from aworld_gym.rollout.collect import collect
from tests.report_page import Page

OUT = Path(__file__).parent / "images" / "browser-transcript.png"
TASK = "click-checkboxes"  # two turns: a click whose result is empty, the page snapshot in the observation


def make(out: Path = OUT) -> Path:
    """Run one episode, build its report, photograph its transcript's first turn into ``out``; returns ``out``."""
    folder = Path(tempfile.mkdtemp(prefix="aworld-docs-"))
    try:
        run = folder / "browser.jsonl"
        collect("AWorld/Browser-v0", "reference", episodes=1, sink=run, progress=False, env_kwargs={"task": TASK})
        build([run], folder / "browser.html")
        with Page(folder / "browser.html") as page:
            page.call("browser_resize", width=1100, height=900)
            page.open("#episode-0")
            seen = page.js("""() => { const turn = document.querySelector('#transcript .turn[data-turn="1"]');
                turn.scrollIntoView(); window.scrollBy(0, -8);
                return {observation: !!turn.querySelector('.result.obs pre'), calls: turn.querySelectorAll('.call').length}; }""")  # fmt: skip
            if not (seen["observation"] and seen["calls"]):
                raise RuntimeError(f"the transcript's first turn shows no call or no observation: {seen}")
            shot = page.screenshot(folder / "shot.png")
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, out)
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    print(make(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT))
