"""pass@k: the unbiased estimator of Chen et al. 2021 over tasks with ``n`` samples of which ``c`` succeeded.

Pure functions over counts, below both of their readers: the collector's summary (``rollout/collect.py``) and the
report (``report/stats.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one task with ``n`` samples of which ``c`` succeeded: ``1 - C(n-c, k) / C(n, k)``.

    Raises:
        ValueError: ``k`` outside 1..n, or ``c`` outside 0..n.
    """
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def ks_for(samples: int) -> list[int]:
    """1 and every power of two up to ``samples``."""
    ks, k = [], 1
    while k <= samples:
        ks.append(k)
        k *= 2
    return ks


def pass_table(tasks: Mapping[str, tuple[int, int]]) -> dict[str, dict[str, float]]:
    """``{"pass@k": {"value": mean over the tasks with >= k samples, "tasks": how many}}`` for each k."""
    if not tasks:
        return {}
    out = {}
    for k in ks_for(max(n for n, _ in tasks.values())):
        values = [pass_at_k(n, c, k) for n, c in tasks.values() if n >= k]
        out[f"pass@{k}"] = {"value": sum(values) / len(values), "tasks": len(values)}
    return out
