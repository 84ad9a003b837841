"""System prompt size with full and compact tool schemas, in characters and in tokens of the tiny offline Qwen3
tokenizer (trained on local text: a relative figure, not Qwen3's own counts), for the browser env and GAIA.
BrowserGym's whole action-set description on the same MiniWoB++ tasks was 2,683 characters (measured in the
issue-19 comparison). Prints a table and writes JSON.

    python benchmarks/prompt_size.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BROWSERGYM_CHARS = 2683


def main() -> None:
    import gymnasium as gym

    import aworld_gym  # noqa: F401
    from aworld_gym.trainers.tiny_qwen3 import build_tokenizer

    tok = build_tokenizer()
    rows = []
    envs = (("AWorld/Browser-v0", {}), ("AWorld/GAIA-v0", {"python_server": "inprocess"}),
            ("AWorld/GAIA-v0", {"python_server": "inprocess", "browser": True}))  # fmt: skip
    for env_id, kwargs in envs:
        for fmt in ("full", "compact"):
            env = gym.make(env_id, tool_format=fmt, **kwargs)
            try:
                prompt = env.reset(seed=0)[1]["system_prompt"]
            finally:
                env.close()
            name = env_id + (" browser" if kwargs.get("browser") else "")
            rows.append({"env": name, "tool_format": fmt, "chars": len(prompt),
                         "tokens": len(tok(prompt)["input_ids"])})  # fmt: skip
    print(f"{'env':<22} {'tools':<8} {'chars':>6} {'tokens':>7}  vs full")
    for r in rows:
        full = next(x for x in rows if x["env"] == r["env"] and x["tool_format"] == "full")
        print(f"{r['env']:<22} {r['tool_format']:<8} {r['chars']:>6} {r['tokens']:>7}  "
              f"{r['chars'] / full['chars']:.2f}x chars, {r['tokens'] / full['tokens']:.2f}x tokens")  # fmt: skip
    print(f"BrowserGym's action-set description: {BROWSERGYM_CHARS} chars")
    out = ROOT / "benchmarks/results/prompt_size.json"
    out.write_text(json.dumps({"rows": rows, "browsergym_chars": BROWSERGYM_CHARS}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
