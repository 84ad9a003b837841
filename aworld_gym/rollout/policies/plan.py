"""PlanPolicy: a scripted policy that follows a plan stored with each task (no model).

A plan (``task.metadata["reference"]``) lists the tool calls of each turn, then a regex over everything the
tools returned and an optional arithmetic step on its groups::

    {"turns": [[{"name": "web_search", "arguments": {"query": "..."}}], [...]],
     "pattern": "founded in (\\\\d{4})", "compute": "int(g[0]) + 1"}

The answer is derived from the tools' output, so the policy succeeds only when the tools work. Used as the
reference policy of AWorld/GAIA-v0's sample set and of AWorld/MCP-v0 tasks that carry plans.
"""

from __future__ import annotations

import json
import re
from typing import Any

from aworld_gym.base.errors import PolicyError
from aworld_gym.rollout.policies import ScriptedPolicy

_SAFE = {"round": round, "int": int, "float": float, "sorted": sorted, "len": len, "sum": sum, "str": str}


class PlanPolicy(ScriptedPolicy):
    """Follows the task's ``reference`` plan.

    Args:
        latency_s: a fixed delay per turn, standing in for a model server in benchmarks.
    """

    def decide(self, env: Any) -> str:
        plan = env.task.metadata.get("reference")
        if not isinstance(plan, dict) or "turns" not in plan:
            raise PolicyError(f"task {env.task.id!r} has no reference plan (metadata['reference'])")
        turns = plan["turns"]
        if env.turn < len(turns):
            calls = "\n".join(f"<tool_call>\n{json.dumps(c)}\n</tool_call>" for c in turns[env.turn])
            return f"<think>Step {env.turn + 1} of the plan.</think>\n{calls}"
        seen = "\n".join(r["text"] for t in env.turns for r in t["tool_results"])
        match = re.search(plan.get("pattern", r"(?s)(.*)"), seen)
        if match is None:
            return "I could not find it.\n<answer>unknown</answer>"
        groups = list(match.groups())
        answer: Any = groups[0] if groups else match.group(0)
        if "compute" in plan:  # an arithmetic expression from our own plan (trusted text, no builtins)
            answer = eval(plan["compute"], {"__builtins__": {}}, {**_SAFE, "g": groups})
        return f"Found it.\n<answer>{answer}</answer>"
