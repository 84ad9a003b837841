"""The reference policy of AWorld/GAIA-v0: the plan-following policy (bundled sample tasks carry plans)."""

from __future__ import annotations

from aworld_gym.rollout.policies.plan import PlanPolicy


class GAIAReferencePolicy(PlanPolicy):
    """Solves the bundled sample tasks through the tools by following each task's plan."""
