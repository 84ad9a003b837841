"""Gymnasium's own env checker over every registered id, with its default flags (no skip_render_check).

``check_env`` also re-makes the env through its spec once per render mode in ``metadata["render_modes"]`` and
renders it, so every declared mode is exercised through ``gym.make(render_mode=...)``.
"""

from __future__ import annotations

import shutil
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import aworld_gym
from tests.helpers import ROOT, stdio_config

# The only kwargs an id needs: MCP-v0 has no default server or tasks (it says so: ConfigError).
KWARGS = {
    "AWorld/MCP-v0": {"mcp_config": stdio_config(), "tasks": [{"question": "What is 2 + 3?", "answer": "5"}]},
}
# Gymnasium warns about any wrapped env it is handed; nothing else may warn.
WRAPPED = "is different from the unwrapped version"
HAS_BROWSER = shutil.which("chromium") is not None and (ROOT / "node_modules/@playwright/mcp/cli.js").is_file()


def ids() -> list:
    return [
        pytest.param(i, marks=pytest.mark.skipif(not HAS_BROWSER, reason="needs Chromium and @playwright/mcp"))
        if i == "AWorld/Browser-v0" else i
        for i in sorted(aworld_gym.ENV_IDS)
    ]  # fmt: skip


def test_every_registered_id_is_checked() -> None:
    assert {"AWorld/MCP-v0", "AWorld/Code-v0", "AWorld/GAIA-v0", "AWorld/Browser-v0"} <= set(aworld_gym.ENV_IDS)


@pytest.mark.parametrize("env_id", ids())
@pytest.mark.parametrize("face", ["unwrapped", "gym.make"])
def test_gymnasium_env_checker_passes(env_id: str, face: str) -> None:
    env = gym.make(env_id, **KWARGS.get(env_id, {}))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(env.unwrapped if face == "unwrapped" else env)
        messages = [str(w.message) for w in caught if not (face == "gym.make" and WRAPPED in str(w.message))]
        assert messages == []
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ids())
def test_every_declared_render_mode_renders_through_gym_make(env_id: str) -> None:
    metadata = gym.make(env_id, **KWARGS.get(env_id, {}))
    declared = list(metadata.metadata["render_modes"])
    metadata.close()
    assert "ansi" in declared and metadata.metadata["render_fps"] > 0
    for mode in declared:
        env = gym.make(env_id, render_mode=mode, **KWARGS.get(env_id, {}))
        try:
            env.reset(seed=0)
            frame = env.render()
            if mode == "ansi":
                assert isinstance(frame, str) and frame.startswith("[task ")
            elif mode == "rgb_array":
                assert isinstance(frame, np.ndarray) and frame.ndim == 3 and frame.shape[2] == 3 and frame.any()
            else:
                assert frame is None  # human: printed
        finally:
            env.close()
