"""The trainer-adapter seam is one public module: the guide imports nothing deeper, and the module stays light."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_guide_builds_both_adapters_on_the_seam_module_alone():
    text = (ROOT / "docs" / "trainer-adapter.md").read_text()
    imports = set(re.findall(r"^from (aworld_gym[\w.]*) import", text, re.MULTILINE))
    # the seam, and the tiny offline Qwen3 the example's scripted model uses (a test fixture, not a piece of the seam)
    assert imports == {"aworld_gym.trainers.seam", "aworld_gym.fixtures.tiny_qwen3"}
    assert "SyncTextEpisode" in text and "run_pooled" in text  # the trainer drives the loop / we drive it


def test_importing_the_seam_starts_nothing_heavy():
    code = ("import sys, aworld_gym.trainers.seam as s; assert all(hasattr(s, n) for n in s.__all__); "
            "print(sorted(m for m in ('torch', 'ray', 'trl', 'transformers', 'verl') if m in sys.modules))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
