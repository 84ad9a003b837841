"""Tool output cut by tokens (``MCPEnv(max_tool_output_tokens=N, tokenizer=...)``): what the model is shown of a tool
result is at most N tokens of the model's own tokenizer, and the cut says so. The tool result itself is not changed."""

from __future__ import annotations

import os
from typing import Any


def load_tokenizer(spec: Any) -> Any:
    """A tokenizer object (anything with ``encode``/``decode``), or one loaded from a local folder (``AutoTokenizer``).
    ``Limits`` checks that ``max_tool_output_tokens`` has one."""
    if spec is None or not isinstance(spec, str | os.PathLike):
        return spec
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(spec))


def cut_tokens(text: str, tokenizer: Any, limit: int | None) -> str:
    """``text`` cut to ``limit`` tokens, with a note of how many were left out."""
    if limit is None or not text:
        return text
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) <= limit:
        return text
    kept = tokenizer.decode(ids[:limit], skip_special_tokens=False)
    return f"{kept}\n[... {len(ids) - limit} more tokens of this tool's output were cut]"
