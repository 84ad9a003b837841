"""The token-recording endpoint's overhead per call (issue 50): the same generations straight from the backend and
through the endpoint with the ``openai`` SDK, in one run.

The backend is the tiny offline Qwen3 sampling in-process (``HFBackend``), every generation exactly ``--tokens`` new
tokens (the end-of-turn token suppressed), so that both paths do the same model work. Measured over ``--calls`` calls
each, after ``--warmup`` calls each:

* ``backend``: ``backend.generate(prompt_ids, sampling)`` directly, the prompt rendered once beforehand;
* ``endpoint``: ``client.chat.completions.create`` (the SDK, HTTP on loopback, the chat template rendered per call,
  the reply parsed, the call recorded under an episode);
* ``endpoint, streamed``: the same with ``stream=True``.

The overhead is the difference of the per-call medians; the endpoint's own latency records say how much of a call
was generation. Prints a table and writes JSON with its provenance:

    python benchmarks/endpoint.py [--calls 40] [--tokens 16] [--out benchmarks/results/endpoint.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import stamp  # noqa: E402

MESSAGES = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is 12 + 1? Use the calculator."}]  # fmt: skip
TOOLS = [{"type": "function", "function": {"name": "add", "description": "the sum of two numbers a and b",
                                           "parameters": {"type": "object", "properties": {
                                               "a": {"type": "number"}, "b": {"type": "number"}}}}}]  # fmt: skip


class FixedLength:
    """The HF backend with the end-of-turn token suppressed: every generation is ``max_tokens`` long."""

    def __init__(self, backend: Any) -> None:
        self.backend, self.tokenizer = backend, backend.tokenizer
        self.weights_version = backend.weights_version
        self.context = backend.context
        self.backend.model.generation_config.suppress_tokens = [backend.tokenizer.eos_token_id]

    def generate(self, prompt_ids: list[int], sampling: Any) -> Any:
        return self.backend.generate(prompt_ids, sampling)


def timed(fn: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "endpoint.json"))
    args = ap.parse_args()

    import openai
    import torch

    from aworld_gym.endpoint import HFBackend, TokenEndpoint
    from aworld_gym.endpoint.backends import Sampling
    from aworld_gym.endpoint.chat import parse_request, prompt_ids
    from aworld_gym.fixtures.tiny_qwen3 import build_tiny_qwen3

    torch.set_num_threads(1)
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        backend = FixedLength(HFBackend(build_tiny_qwen3(Path(tmp) / "tiny")))
        sampling = Sampling(max_tokens=args.tokens, temperature=1.0)
        ids = prompt_ids(backend.tokenizer, parse_request({"messages": MESSAGES, "tools": TOOLS}))
        rows: dict[str, list[float]] = {}
        with TokenEndpoint(backend, max_tokens=args.tokens) as endpoint:
            episode, url = endpoint.open_episode("bench")
            client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)

            def direct() -> None:
                assert len(backend.generate(ids, sampling).ids) == args.tokens

            def through() -> None:
                r = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS)
                assert r.usage.completion_tokens == args.tokens

            def streamed() -> None:
                chunks = list(client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS,
                                                             stream=True))  # fmt: skip
                assert chunks[-1].choices[0].finish_reason

            for name, fn in (("backend", direct), ("endpoint", through), ("endpoint, streamed", streamed)):
                timed(fn, args.warmup)
                rows[name] = timed(fn, args.calls)
            records = endpoint.close_episode(episode)
    generation = [r.latency_s for r in records[-2 * args.calls :]]
    base = statistics.median(rows["backend"])
    table = []
    for name, times in rows.items():
        median = statistics.median(times)
        table.append({"path": name, "calls": len(times), "median_ms": round(1000 * median, 2),
                      "p90_ms": round(1000 * sorted(times)[int(0.9 * (len(times) - 1))], 2),
                      "overhead_ms": round(1000 * (median - base), 2),
                      "overhead_share": round((median - base) / median, 3)})  # fmt: skip
    result = {"benchmark": "endpoint", "workload": {"calls": args.calls, "warmup": args.warmup, "tokens": args.tokens,
                                                   "model": "tiny Qwen3 (offline), HFBackend, 1 torch thread"},
              "rows": table, "generation_in_endpoint_ms": round(1000 * statistics.median(generation), 2),
              "wall_s": round(time.perf_counter() - t_start, 1)}  # fmt: skip
    print("| path | calls | median | p90 | overhead over the backend |")
    print("|---|---|---|---|---|")
    for r in table:
        print(f"| {r['path']} | {r['calls']} | {r['median_ms']:.1f} ms | {r['p90_ms']:.1f} ms | "
              f"{r['overhead_ms']:+.1f} ms ({100 * r['overhead_share']:.0f}% of the call) |")  # fmt: skip
    print(f"generation inside the endpoint's calls (its latency records): {result['generation_in_endpoint_ms']} ms")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(stamp(result), indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
