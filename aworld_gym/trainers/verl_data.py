"""Datasets for verl: one parquet row per task of an AWorld env, selecting the ``aworld_agent`` loop.

verl's ``RLHFDataset`` reads ``prompt`` (chat messages), ``data_source``, ``reward_model``, ``extra_info`` and
``agent_name``. The prompt is the env's first observation (for logging and length filtering); the loop itself
resets the env on the row's ``extra_info.task_id`` and renders the env's own system prompt and tools. Importable
without verl (build the data in any venv).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym

import aworld_gym  # noqa: F401 - registers the ids

AGENT_NAME = "aworld_agent"


def verl_rows(env_id: str, *, limit: int | None = None, **env_kwargs: Any) -> list[dict[str, Any]]:
    """The rows (one per task); ``env_kwargs`` that are JSON-able travel in ``extra_info.env_kwargs``."""
    env = gym.make(env_id, **env_kwargs)
    try:
        u = env.unwrapped
        tasks = list(u.tasks)[:limit]
        return [
            {
                "data_source": env_id,
                "prompt": [{"role": "user", "content": u.render_prompt(t) or t.id}],
                "ability": "agent",
                "reward_model": {"style": "env", "ground_truth": ""},
                "agent_name": AGENT_NAME,
                "extra_info": {"env_id": env_id, "task_id": t.id, "index": i},
            }
            for i, t in enumerate(tasks)
        ]
    finally:
        env.close()


def write_verl_dataset(env_id: str, path: str | Path, *, limit: int | None = None, **env_kwargs: Any) -> Path:
    """Write :func:`verl_rows` as parquet (``data.train_files`` / ``data.val_files`` of a verl run)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(verl_rows(env_id, limit=limit, **env_kwargs)), path)
    return path
