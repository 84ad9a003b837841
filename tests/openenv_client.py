"""OpenEnv's own Python client (openenv-core, in .venv-openenv) driving episodes against `aworld-gym serve-env`.

Run with that venv's python; reads a JSON plan on stdin, prints one JSON line of results:

    {"url": "http://127.0.0.1:PORT", "episodes": [{"reset": {...}, "actions": ["...", ...]}, ...],
     "concurrent": true, "vanish_after": null}

Each episode is one `GenericEnvClient` session (its own WebSocket): reset with the given fields, then the actions
in order until the server says done. `concurrent`: all sessions at once. `vanish_after`: after that many steps of
the first episode the process exits at once, without closing its socket (a client that vanishes mid-episode).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from openenv.core.generic_client import GenericEnvClient


async def episode(url: str, plan: dict, vanish_after: int | None) -> dict:
    out: dict = {"steps": [], "error": None}
    try:
        async with GenericEnvClient(base_url=url) as env:
            first = await env.reset(**plan.get("reset", {}))
            out["reset"] = {"done": first.done, "reward": first.reward, **first.observation}
            for k, text in enumerate(plan["actions"]):
                if vanish_after is not None and k == vanish_after:
                    sys.stdout.write(json.dumps({"vanished_after": k}) + "\n")
                    sys.stdout.flush()
                    os._exit(0)
                r = await env.step({"text": text})
                out["steps"].append({"done": r.done, "reward": r.reward, **r.observation})
                if r.done:
                    break
            out["state"] = await env.state()
    except Exception as exc:  # noqa: BLE001 - reported to the test, which asserts on it
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


async def main() -> None:
    plan = json.load(sys.stdin)
    episodes, vanish = plan["episodes"], plan.get("vanish_after")
    if plan.get("concurrent"):
        results = await asyncio.gather(*(episode(plan["url"], e, vanish) for e in episodes))
    else:
        results = [await episode(plan["url"], e, vanish) for e in episodes]
    print(json.dumps({"episodes": list(results)}, default=str))


if __name__ == "__main__":
    asyncio.run(main())
