"""Where a run's time goes, seen from the model server: a breakdown of C x wall slot-seconds for any framework.

The stand-in chat server of ``benchmarks/peers.py`` knows, for every request of every episode, when it arrived and
when its reply was ready. With C episodes allowed at once, a run of ``wall`` seconds has C x wall slot-seconds; an
ideal framework spends all of them waiting on the model (``model``: the stand-in's fixed latency per request). The
rest is shared out, exactly (the parts add up to C x wall):

* ``stand_in``: the stand-in's own time beyond its latency (its event loop, JSON parsing: the model server);
* ``turn``: inside an episode, from a reply to the episode's next request (the framework reads the reply, calls the
  tool, builds the next request; the model client's connection pool and HTTP stack are on both ends of it);
* ``ramp``: idle slots before the C-th episode's first request (the framework starting its envs and servers);
* ``between``: idle slots after that and before ``drain`` (an episode's last reply to the next episode's first
  request in a slot: recording, reset, scheduling);
* ``drain``: idle slots after the C-th last episode's last reply until the run's last reply (the last episodes
  finishing one by one);
* ``close``: every slot after the run's last reply until its clock stops (the framework reading the last answers,
  recording them, closing its envs and servers).

Each part is also given per episode (ms) and as a share of C x wall (the ``model`` share is the run's efficiency
against the ideal C / (requests x latency) episodes/s).
"""

from __future__ import annotations

from typing import Any

PARTS = ("model", "stand_in", "turn", "ramp", "between", "drain", "close")


def idle(spans: list[tuple[float, float]], slots: int, lo: float, hi: float) -> float:
    """Slot-seconds in [lo, hi] not covered by an episode span (``slots`` minus the spans open at each moment)."""
    if hi <= lo:
        return 0.0
    events = sorted([(max(a, lo), 1) for a, b in spans if b > lo and a < hi] +
                    [(min(b, hi), -1) for a, b in spans if b > lo and a < hi])  # fmt: skip
    total, open_, t = 0.0, 0, lo
    for when, step in events:
        total += max(0, slots - open_) * (when - t)
        open_, t = open_ + step, when
    return total + max(0, slots - open_) * (hi - t)


def breakdown(timeline: dict[str, list[tuple[float, float]]], slots: int, start: float, end: float,
              latency: float) -> dict[str, Any]:  # fmt: skip
    """The parts of ``slots`` x (``end`` - ``start``): ``timeline`` maps an episode to its requests' (arrived, replied)."""
    spans, parts = [], dict.fromkeys(PARTS, 0.0)
    for requests in timeline.values():
        requests = sorted(requests)
        spans.append((requests[0][0], requests[-1][1]))
        for i, (arrived, replied) in enumerate(requests):
            served = replied - arrived
            parts["model"] += min(served, latency)
            parts["stand_in"] += max(0.0, served - latency)
            if i:
                parts["turn"] += max(0.0, arrived - requests[i - 1][1])
    firsts = sorted(a for a, _ in spans)
    lasts = sorted((b for _, b in spans), reverse=True)
    full = firsts[min(slots, len(firsts)) - 1] if firsts else end
    drain = max(full, lasts[min(slots, len(lasts)) - 1]) if lasts else end
    parts["ramp"] = idle(spans, slots, start, full)
    parts["between"] = idle(spans, slots, full, drain)
    last = lasts[0] if lasts else end
    parts["drain"] = idle(spans, slots, drain, last)
    parts["close"] = slots * max(0.0, end - last)
    capacity = slots * (end - start)
    n = max(1, len(spans))
    return {
        "slots": slots, "wall_s": end - start, "episodes": len(spans), "slot_s": {k: round(v, 3) for k, v in parts.items()},
        "ms_per_episode": {k: round(1000 * v / n, 1) for k, v in parts.items()},
        "share": {k: round(v / capacity, 4) if capacity > 0 else 0.0 for k, v in parts.items()},
        "unaccounted_slot_s": round(capacity - sum(parts.values()), 3),
    }  # fmt: skip


def render(b: dict[str, Any] | None) -> str:
    """One table cell: each part's share of C x wall, in percent."""
    if not b:
        return "-"
    return " · ".join(f"{k.replace('_', '-')} {100 * b['share'][k]:.0f}" for k in PARTS)
