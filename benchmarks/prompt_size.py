"""System prompt size with full and compact tool schemas, in characters and in tokens of the tiny offline Qwen3
tokenizer (trained on local text: a relative figure, not Qwen3's own counts), for the browser env and GAIA.
Next to them, BrowserGym's action-set description (``HighLevelActionSet().describe()``, the action set its
MiniWoB++ envs map actions with by default), measured now in BrowserGym's venv when ``benchmarks/peers_browser.py``
made it (``benchmarks/.work/peers_browser/venv``; characters and tokens), else read from the JSON that script wrote
(``benchmarks/results/peers_browser.json``; characters), else "not measured". Prints a table and writes JSON.

    python benchmarks/prompt_size.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import stamp  # noqa: E402 - its clocks start at the benchmark's start

PEERS_JSON = ROOT / "benchmarks/results/peers_browser.json"
BROWSERGYM_PYTHON = ROOT / "benchmarks/.work/peers_browser/venv/bin/python"


def browsergym_action_set() -> dict[str, Any]:
    """BrowserGym's action-set description size, measured (never a written-in number)."""
    if BROWSERGYM_PYTHON.exists():
        script = str(ROOT / "benchmarks/peers_browser.py")
        run = subprocess.run([str(BROWSERGYM_PYTHON), script, "--describe-action-set"], capture_output=True, text=True)
        if run.returncode == 0:
            return {**json.loads(run.stdout), "source": "measured now in " + str(BROWSERGYM_PYTHON.relative_to(ROOT))}
    if PEERS_JSON.exists():
        measured = json.loads(PEERS_JSON.read_text()).get("browsergym_action_set") or {}
        if measured.get("chars") is not None:
            return {**measured, "source": str(PEERS_JSON.relative_to(ROOT))}
    return {"chars": None, "source": "not measured (run benchmarks/peers_browser.py first)"}


def main() -> None:
    import gymnasium as gym

    import aworld_gym  # noqa: F401
    from aworld_gym.fixtures.tiny_qwen3 import build_tokenizer

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
    bg = browsergym_action_set()
    text = bg.pop("text", None)
    bg["tokens"] = None if text is None else len(tok(text)["input_ids"])
    if bg["chars"] is None:
        print(f"BrowserGym's action-set description: {bg['source']}")
    else:
        tokens = "" if bg["tokens"] is None else f", {bg['tokens']} tokens"
        print(f"BrowserGym's action-set description ({bg.get('call')}): {bg['chars']} chars{tokens} ({bg['source']})")
    out = ROOT / "benchmarks/results/prompt_size.json"
    out.write_text(json.dumps(stamp({"rows": rows, "browsergym_action_set": bg}), indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
