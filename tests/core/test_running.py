"""Episode on its own: given its collaborators (parser, rules, relist, rubric), with no env, hub or server."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from gymnasium.error import ResetNeeded

from aworld_gym.core.actions import get_parser
from aworld_gym.core.rewards import Rubric, Scores, default_hooks, reward_hook
from aworld_gym.core.running import Episode, EpisodeRules
from aworld_gym.core.task import Task
from aworld_gym.core.trajectory import Source

CORE = Path(__file__).resolve().parents[2] / "aworld_gym" / "core"


def no_relist() -> None:
    return None


def episode(**rules: object) -> Episode:
    task = Task(id="t", prompt="What is 2 + 2?", answer="4")
    return Episode(task, task.prompt, "system", [], parser=get_parser(None), rules=EpisodeRules(**rules),  # type: ignore[arg-type]
                   relist=no_relist)  # fmt: skip


def test_an_episode_runs_to_its_turn_limit_without_an_env():
    ep = episode(turn_limit=2)
    rubric = Rubric(default_hooks())
    first = ep.finish(ep.conclude(ep.parse("no call, no answer"), [], None, None, None), rubric, lambda a: a)
    assert first[1:4] == (-0.1, False, False) and ep.turn == 1 and not ep.done  # the format penalty
    obs, reward, terminated, truncated, info = ep.finish(
        ep.conclude(ep.parse("still nothing"), [], None, None, None), rubric, lambda a: a
    )
    assert (reward, terminated, truncated, info["truncation_reason"]) == (-0.1, False, True, "turn_limit")
    assert ep.done and ep.ledger.total == pytest.approx(-0.2) and [t["reward"] for t in ep.turns] == [-0.1, -0.1]
    assert len(ep.messages) == 2 + 4  # system, task, then each turn's assistant message and feedback
    with pytest.raises(ResetNeeded):
        ep.parse("after the end")


def test_an_answer_is_scored_and_episode_hooks_see_the_whole_log():
    ep = episode()
    seen: list[int] = []

    @reward_hook(on="episode", weight=2.0)
    def length(ctx):
        seen.append(len(ctx.turns))
        return 1.0

    out = ep.finish(ep.conclude(ep.parse("<answer>4</answer>"), [], None, 1.0, None), Rubric([*default_hooks(), length]),
                    lambda a: a)  # fmt: skip
    assert out[1:3] == (3.0, True) and out[4]["reward_components"] == {"task": 1.0, "length": 2.0}
    assert seen == [1] and ep.ledger.components == {"task": 1.0, "length": 2.0} and ep.turns[-1]["reward"] == 3.0


def test_a_wrappers_scores_are_the_shaping_share_of_the_one_ledger():
    ep = episode()
    out = ep.finish(ep.conclude(ep.parse("<answer>4</answer>"), [], None, 1.0, None), Rubric(default_hooks()),
                    lambda a: a)  # fmt: skip
    shaped = ep.add_scores(out, Scores(components={"bonus": 0.5}), own=False)
    assert shaped[1] == 1.5 and ep.turns[-1]["reward"] == 1.5 and ep.turns[-1]["reward_components"] == {
        "task": 1.0, "bonus": 0.5}  # fmt: skip
    assert out[4]["reward_components"] == {"task": 1.0}  # the inner info is not edited
    assert ep.ledger.total == 1.5 and ep.ledger.share(Source.ENV).total == 1.0  # the env's own reward stays apart
    assert ep.ledger.share(Source.SHAPING).components == {"bonus": 0.5}
    replaced = ep.add_scores(shaped, Scores(components={"only": 0.25}), replace=True, own=False)
    assert replaced[1] == 0.25 and ep.turns[-1]["reward_components"] == {"only": 0.25}
    assert ep.ledger.total == 0.25 and ep.ledger.components == {"only": 0.25}
    assert ep.ledger.share(Source.ENV).components == {"task": 1.0}


def test_no_core_module_but_env_imports_mcpenv():
    importers = []
    for path in CORE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "aworld_gym.core.env" and path.name != "env.py":
                importers.append(path.name)
    assert importers == [] and not (CORE / "opening.py").exists() and not (CORE / "stepping.py").exists()
