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


def test_the_per_sample_faces_warn_once_and_never_refuse_a_single_sample():
    """verl, slime, OpenRLHF and AReaL hand over one sample per call: their watch (``PER_SAMPLE``, one per process)
    warns once with the numbers when a sample overflows before its first token, and raises nothing (no batch)."""
    from aworld_gym.core.trajectory import Termination, TokenData, Trajectory
    from aworld_gym.rollout.tokens import TokenMode
    from aworld_gym.trainers.seam.overflow import OverflowWatch

    def overflowed(prompt: int) -> Trajectory:
        traj = Trajectory(env_id="AWorld/MCP-v0", tokens=TokenData(prompt_ids=list(range(prompt))))
        traj.end(Termination.CONTEXT_LIMIT)
        return traj

    mode = TokenMode(chat=None, generate=None, budget=300, max_model_len=512)  # type: ignore[arg-type]
    watch = OverflowWatch("max_new_tokens (the trainer's response length)")
    from aworld_gym.trainers.seam import overflow
    from tests.helpers import logged

    with logged(overflow.logger) as said:
        for prompt in (400, 450):
            watch.check([(overflowed(prompt), mode)], batch=False)  # a whole "batch" of one overflowed: no error
    assert len(said) == 1 and said[0].startswith("1 of 1 episode ended context_limit before the model's first token")
    assert "(400 prompt tokens + 300 new tokens > the model's context of 512)" in said[0]
    assert "lower max_new_tokens (the trainer's response length) to at most 112" in said[0]
