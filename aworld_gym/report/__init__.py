"""Read runs: ``aworld-gym report RUN [RUN ...]`` tables (:mod:`.stats`, :mod:`.tables`) and a self-contained HTML
viewer (:mod:`.html`)."""

from __future__ import annotations

from aworld_gym.core.pass_at_k import pass_at_k
from aworld_gym.report.stats import compare, summarize, summarize_records

__all__ = ["compare", "pass_at_k", "summarize", "summarize_records"]
