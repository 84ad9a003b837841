import pytest

from aworld_gym.base.errors import ConfigError
from aworld_gym.core.actions import HermesParser
from aworld_gym.core.rewards import (
    AnswerLengthPenalty,
    CallCost,
    FormatPenalty,
    StepContext,
    TaskScore,
    ToolErrorPenalty,
    apply_hooks,
)
from aworld_gym.core.scoring import contains_match, exact_match, get_scorer
from aworld_gym.core.task import Task
from aworld_gym.mcp.results import ToolResult

T = Task("t", "p", answer="Paris")


def ctx(text="", results=(), score=None):
    parsed = HermesParser().parse(text)
    return StepContext(
        task=T, turn=1, action=text, parsed=parsed, results=list(results), answer=parsed.answer, score=score
    )


def test_scorers():
    assert exact_match("  paris. ", T) == 1.0
    assert exact_match("Paris, France", T) == 0.0
    assert contains_match("It is Paris, France", T) == 1.0
    assert exact_match("b", Task("t", "p", answer=["a", "B"])) == 1.0
    assert get_scorer("contains") is contains_match
    with pytest.raises(ConfigError):
        get_scorer("fuzzy")


def test_builtin_hooks():
    assert TaskScore(2.0)(ctx(score=1.0)) == {"task": 2.0}
    assert TaskScore()(ctx()) == {}
    assert FormatPenalty(-0.5)(ctx("no action")) == {"format": -0.5}
    assert FormatPenalty(-0.5)(ctx("<answer>x</answer>")) == {}
    call = HermesParser().parse('<tool_call>{"name": "x"}</tool_call>').tool_calls[0]
    bad = [ToolResult(call, "e", "bad_arguments"), ToolResult(call, "e", "timeout"), ToolResult(call, "ok")]
    assert ToolErrorPenalty(-1)(ctx(results=bad)) == {"tool_error": -1}
    bad[0].latency_s = 2.0
    assert CallCost(-0.1, -1.0)(ctx(results=bad)) == {"call_cost": pytest.approx(-2.3)}
    assert AnswerLengthPenalty(2, -1.0)(ctx("<answer>abcd</answer>")) == {"answer_length": -2.0}


def test_apply_hooks_sums_and_names_plain_floats():
    def bonus(c):
        return 0.25

    out = apply_hooks([TaskScore(), bonus, lambda c: {"task": 1.0}], ctx(score=1.0))
    assert out == {"task": 2.0, "bonus": 0.25}
