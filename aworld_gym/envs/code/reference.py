"""The scripted reference policy of AWorld/Code-v0 (no model): test the canonical solution, then submit it."""

from __future__ import annotations

import json
from typing import Any

from aworld_gym.base.errors import PolicyError
from aworld_gym.envs.code.tasks import solution_of
from aworld_gym.rollout.policies import ScriptedPolicy


class CodeReferencePolicy(ScriptedPolicy):
    """Turn 1: run the task's canonical solution with ``run_python``; turn 2: submit it in ``<answer>``.

    Args:
        latency_s: a fixed delay per turn, standing in for a model server in benchmarks.
    """

    def decide(self, env: Any) -> str:
        solution = solution_of(env.task)
        if solution is None:
            raise PolicyError(f"task {env.task.id!r} has no canonical_solution for the reference policy")
        if env.turn == 0:
            code = solution + f"\nprint({env.task.metadata['entry_point']!r}, 'is defined')\n"
            call = json.dumps({"name": "run_python", "arguments": {"code": code}})
            return f"<think>Let me check the solution runs.</think>\n<tool_call>\n{call}\n</tool_call>"
        return f"The function runs.\n<answer>\n```python\n{solution}```\n</answer>"
