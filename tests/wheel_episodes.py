"""Run by tests/test_wheel.py with the wheel's venv, from a folder outside the checkout: ``aworld_gym`` must come
from that venv's site-packages, and every built-in env resets and steps with its reference policy to a real
observation and reward. Prints one JSON object: where aworld_gym came from, and each env's first observation,
steps, reward and score."""

from __future__ import annotations

import json
import sys
import sysconfig
import time

import gymnasium as gym

import aworld_gym
from aworld_gym.envs.browser.playwright import playwright_mcp_cli
from aworld_gym.rollout.policies import make_policy


def episode(env_id: str, **kwargs: object) -> dict[str, object]:
    start = time.monotonic()
    env = gym.make(env_id, **kwargs)
    try:
        obs, info = env.reset(seed=0, options={"task_index": 0})
        first, tools = obs, [t["function"]["name"] for t in info["tools"]]
        policy = make_policy("reference", env_id)
        reward, steps, done = 0.0, 0, False
        while not done:
            obs, r, terminated, truncated, info = env.step(policy.act(env.unwrapped, obs, info))
            reward, steps, done = reward + float(r), steps + 1, terminated or truncated
        return {"obs": first[:400], "tools": tools, "steps": steps, "reward": reward, "score": info.get("score"),
                "terminated": terminated, "seconds": round(time.monotonic() - start, 2)}  # fmt: skip
    finally:
        env.close()


def main() -> None:
    calc = {"id": "add-2", "prompt": "What is 2 + 1? Use the add tool.", "answer": "3.0",
            "reference": {"turns": [[{"name": "add", "arguments": {"a": 2, "b": 1}}]], "pattern": r"([\d.]+)\s*$"}}  # fmt: skip
    demo = {"command": sys.executable, "args": ["-m", "aworld_gym.mcp.demo_server"]}
    out: dict[str, object] = {"aworld_gym": aworld_gym.__file__, "purelib": sysconfig.get_paths()["purelib"],
                              "prefix": sys.prefix}  # fmt: skip
    out["AWorld/MCP-v0"] = episode("AWorld/MCP-v0", mcp_config={"mcpServers": {"demo": demo}}, tasks=[calc])
    out["AWorld/Code-v0"] = episode("AWorld/Code-v0")
    out["AWorld/GAIA-v0"] = episode("AWorld/GAIA-v0")
    out["AWorld/Browser-v0"] = episode("AWorld/Browser-v0", task="click-button")
    out["playwright_mcp"] = playwright_mcp_cli()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
