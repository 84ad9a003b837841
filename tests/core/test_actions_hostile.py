"""Hostile model replies against the action parser: linear time, bounded calls and arguments, short errors.

An outside attack round froze ``aworld-gym serve-env`` with a 640 kB ``<answer>`` action (the parser was quadratic
on the event loop), and a reply with 10,000 tool calls sent a 700 kB error back to the model.
"""

import json
import time

import gymnasium as gym
import pytest

import aworld_gym  # noqa: F401 - registers the ids
from aworld_gym.base.calls import ToolCall
from aworld_gym.core.actions import MAX_ARGUMENTS, MAX_CALLS, Action, HermesParser, ParsedAction, parse_action
from tests.helpers import demo_env_kwargs

P = HermesParser()
SMALL, BIG = 50_000, 400_000  # 8x the input: linear parsing costs ~8x the time, quadratic ~64x

# Each builds adversarial text of about n characters (unclosed tags, long runs that a regex backtracks over).
ATTACKS = {
    "unclosed answers": lambda n: "<answer>" * (n // 8),
    "unclosed tool calls": lambda n: "<tool_call>" * (n // 11),
    "unclosed thinks": lambda n: "<think>" * (n // 7),
    "a run of <": lambda n: "<" * n,
    "spaces inside a FINAL ANSWER line": lambda n: "FINAL ANSWER: a" + " " * n + "b",
    "FINAL ANSWER lines without a colon": lambda n: "final answer\n" * (n // 13),
    "a prefix run before final answer": lambda n: "\n" + "*" * n + "final answer",
    "stray closing tags": lambda n: "</tool_call></answer></think>" * (n // 29),
    "empty tool calls": lambda n: "<tool_call></tool_call>" * (n // 23),
    "nested tool calls": lambda n: "<tool_call>" * (n // 11) + "</tool_call>",
    "think blocks": lambda n: "<think></think>" * (n // 15),
    "an open code fence": lambda n: "<tool_call>```json" + "\n" * n + "</tool_call>",
}


def _best_time(text: str, repeats: int = 5) -> float:
    """The least CPU time of this thread over a few parses (other processes on a loaded machine do not count)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.thread_time()
        P.parse(text)
        best = min(best, time.thread_time() - t0)
        if best > 0.5:
            break  # slow already: no need to measure it again
    return best


def test_parsing_hostile_text_is_linear():
    slow = []
    for attack, build in ATTACKS.items():
        small = _best_time(build(SMALL))
        if small > 0.5:  # before: 1.3 s (unclosed answers), over 10 s (spaces in a FINAL ANSWER line)
            slow.append(f"{attack}: {SMALL} characters took {small:.2f} s")
            continue
        big = _best_time(build(BIG))
        # a floor of 0.2 ms keeps timer noise on sub-millisecond parses from deciding the ratio
        if big > 5.0 or big > 20 * max(small, 2e-4):
            slow.append(f"{attack}: 8x the input cost {big / small:.0f}x the time (quadratic: ~64x), {big:.2f} s")
    assert not slow, slow


def _calls(n: int, args: dict | None = None) -> str:
    call = json.dumps({"name": "add", "arguments": args if args is not None else {"a": 1, "b": 2}})
    return f"<tool_call>{call}</tool_call>" * n


def test_ten_thousand_tool_calls_run_the_first_sixteen_with_one_short_error():
    parsed = P.parse(_calls(10_000))
    assert len(parsed.tool_calls) == MAX_CALLS == 16
    assert [c.id for c in parsed.tool_calls] == [f"call_{i}" for i in range(1, 17)]
    assert parsed.errors == [
        "10000 tool calls in one reply; at most 16 are run per turn (the first 16 ran, the other 9984 did not)"
    ]  # before: 9,984 errors, 700 kB


def test_a_call_with_ten_thousand_arguments_does_not_run_and_its_error_is_short():
    parsed = P.parse(_calls(1, {f"k{i}": i for i in range(10_000)}) + _calls(1))
    assert [c.arguments for c in parsed.tool_calls] == [{"a": 1, "b": 2}]  # before: both calls ran
    assert parsed.errors == [
        f"tool call #1 ('add'): 10000 arguments; at most {MAX_ARGUMENTS} are accepted per call, so it did not run"
    ]
    assert len(HermesParser(max_arguments=3).parse(_calls(1, {"a": 1, "b": 2, "c": 3, "d": 4})).tool_calls) == 0


def test_error_text_is_bounded_whatever_the_reply():
    huge_name = json.dumps({"name": "n" * 100_000, "arguments": [1]})
    replies = [
        f"<tool_call>{huge_name}</tool_call>",  # before: the 100 kB name echoed back
        "<tool_call>{not json}</tool_call>" * 15,  # 15 errors, each under the call limit
        "<tool_call><tool_call></tool_call>" * 10_000,
        '<tool_call>{"name": "x", "arguments": "' + "{" * 100_000 + '"}</tool_call>',
    ]
    for text in replies:
        errors = P.parse(text).errors
        assert errors and len(errors) <= 6 and len("; ".join(errors)) < 1_000, (len(errors), len("; ".join(errors)))
    errors = P.parse(replies[1]).errors
    assert errors[-1] == "and 10 more errors of the same kinds"  # before: 15 errors listed


def test_an_actions_own_calls_are_held_to_the_same_limits():
    many = [ToolCall("add", {"a": i, "b": 1}, f"c{i}") for i in range(10_000)]
    parsed = parse_action(P, Action("", tool_calls=many))
    assert [c.id for c in parsed.tool_calls] == [f"c{i}" for i in range(16)]  # before: all 10,000 ran
    assert parsed.errors == [
        "10000 tool calls in one reply; at most 16 are run per turn (the first 16 ran, the other 9984 did not)"
    ]
    # the same calls also rendered into the text (as OpenAIPolicy does): reported once, not twice
    rendered = "".join(f"<tool_call>{json.dumps({'name': c.name, 'arguments': c.arguments})}</tool_call>" for c in many)
    again = parse_action(P, Action(rendered, tool_calls=many))
    assert len(again.tool_calls) == 16 and again.errors == parsed.errors
    wide = [ToolCall("add", {f"k{i}": i for i in range(100)}, "w"), ToolCall("add", {"a": 1, "b": 2}, "ok")]
    parsed = parse_action(P, Action("", tool_calls=wide))
    assert [c.id for c in parsed.tool_calls] == ["ok"] and "100 arguments" in parsed.errors[0]


@pytest.fixture(scope="module")
def env():
    e = gym.make("AWorld/MCP-v0", **demo_env_kwargs(2))
    yield e
    e.close()


def test_a_step_with_ten_thousand_calls_is_a_short_format_error_and_the_first_sixteen_run(env):
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(_calls(10_000))
    assert len(info["tool_results"]) == 16 and not (terminated or truncated)
    assert info["action_error"].startswith("10000 tool calls in one reply; at most 16 are run per turn")
    assert len(info["action_error"]) < 300  # before: 700 kB
    assert info["reward_components"]["format"] < 0 and "Format error: 10000 tool calls" in obs
    assert len(obs) < 2_000  # the error and 16 short tool responses


def test_a_step_with_ten_thousand_arguments_is_a_short_format_error(env):
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(_calls(1, {f"k{i}": i for i in range(10_000)}))
    assert info["tool_results"] == [] and len(info["action_error"]) < 300  # before: a 109 kB error from the hub
    assert "10000 arguments; at most 64" in info["action_error"] and info["reward_components"]["format"] < 0
    assert len(obs) < 1_000


def test_a_parser_of_the_users_own_is_held_to_the_call_limit() -> None:
    """A custom parser that returns 1,000 calls runs the first MAX_CALLS (the guard in parse_action, not the parser)."""

    class Many:
        def parse(self, text: str) -> ParsedAction:
            return ParsedAction(text=text, tool_calls=[ToolCall(name="add", arguments={"a": i}) for i in range(1000)])

    parsed = parse_action(Many(), "anything")
    assert len(parsed.tool_calls) == MAX_CALLS
    assert len(parsed.errors) == 1 and len(parsed.errors[0]) < 200
