import json

import pytest

from aworld_gym.base.errors import ConfigError
from aworld_gym.core.actions import HermesParser, ParsedAction, get_parser, register_parser, strip_code_fence

P = HermesParser()


def call(name, args):
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


def test_single_call_and_think_ignored():
    a = P.parse("<think>I should add</think>\n" + call("add", {"a": 1, "b": 2}))
    assert a.ok and a.answer is None and a.thought == "I should add"
    assert [(c.name, c.arguments) for c in a.tool_calls] == [("add", {"a": 1, "b": 2})]


def test_tool_call_inside_think_is_not_executed():
    a = P.parse("<think>maybe " + call("add", {"a": 1, "b": 2}) + "</think>no calls")
    assert a.tool_calls == [] and a.answer is None


def test_unterminated_think_hides_the_rest():
    a = P.parse("<think>still thinking " + call("x", {}))
    assert a.tool_calls == [] and a.errors == []


def test_many_calls_in_one_turn_keep_order_and_ids():
    text = "".join(call("echo", {"text": str(i)}) for i in range(10))
    a = P.parse(text)
    assert [c.arguments["text"] for c in a.tool_calls] == [str(i) for i in range(10)]
    assert len({c.id for c in a.tool_calls}) == 10


def test_call_limit():
    a = HermesParser(max_calls=2).parse(call("a", {}) * 3)
    assert len(a.tool_calls) == 2 and a.errors == [
        "3 tool calls in one reply; at most 2 are run per turn (the first 2 ran, the other 1 did not)"
    ]


def test_answer_tag_and_final_answer_line():
    assert P.parse("so <answer> 42 </answer>").answer == "42"
    assert P.parse("<answer>first</answer><answer>second</answer>").answer == "first"
    assert P.parse("reasoning...\nFINAL ANSWER: Paris").answer == "Paris"
    assert P.parse("**FINAL ANSWER:** 3, 4").answer == "3, 4"
    assert P.parse("FINAL ANSWER: 3, 4\n").answer == "3, 4"
    assert HermesParser(allow_final_answer_line=False).parse("FINAL ANSWER: x").answer is None


def test_answer_wins_over_calls_with_error():
    a = P.parse(call("add", {}) + "<answer>5</answer>")
    assert a.answer == "5" and a.tool_calls == [] and "not both" in a.errors[0]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("<tool_call>{not json}</tool_call>", "invalid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "expected a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'missing "name"'),
        ('<tool_call>{"name": "x", "arguments": [1]}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "x", "arguments": "oops"}</tool_call>', "not a JSON object"),
        ('<tool_call>{"name": "x"', "never closed"),
        ("<tool_call>  </tool_call>", "empty"),
        ('<tool_call><tool_call>{"name": "x"}</tool_call></tool_call>', "nested"),
        ("<answer>unterminated", "never closed"),
        ("text </tool_call>", "without a matching"),
    ],
)
def test_malformed_calls_become_errors_not_exceptions(text, fragment):
    a = P.parse(text)
    assert not a.ok
    assert any(fragment in e for e in a.errors), a.errors


def test_string_encoded_arguments_and_code_fence():
    a = P.parse('<tool_call>{"name": "x", "arguments": "{\\"k\\": 1}"}</tool_call>')
    assert a.tool_calls[0].arguments == {"k": 1}
    b = P.parse('<tool_call>\n```json\n{"name": "x", "arguments": {"k": 2}}\n```\n</tool_call>')
    assert b.tool_calls[0].arguments == {"k": 2}
    assert strip_code_fence("```python\nprint(1)\n```") == "print(1)"


def test_megabyte_nul_and_non_ascii_inputs():
    big = "a" * 1_000_000
    a = P.parse(big + call("echo", {"text": "ünïcødé 中文 \x00 end"}) + big)
    assert a.tool_calls[0].arguments["text"] == "ünïcødé 中文 \x00 end"
    assert P.parse("\x00" * 1000).tool_calls == []
    assert not P.parse("\ud800 lone surrogate").ok


def test_non_string_action_is_an_error():
    assert "must be a string" in P.parse(123).errors[0]  # type: ignore[arg-type]


def test_pluggable_parsers():
    class Upper:
        def parse(self, text):
            return ParsedAction(text=text, answer=text.upper())

    register_parser("upper", Upper)
    assert get_parser("upper").parse("x").answer == "X"
    assert isinstance(get_parser(Upper()), Upper)
    with pytest.raises(ConfigError, match="unknown action_format"):
        get_parser("nope")


def test_json_nested_too_deeply_is_a_format_error_not_a_crash():
    from aworld_gym.core.actions import HermesParser

    deep = '<tool_call>{"name": "echo", "arguments": {"text": ' + "[" * 100_000 + "]" * 100_000 + "}}</tool_call>"
    parsed = HermesParser().parse(deep)
    assert not parsed.tool_calls and "nested too deeply" in parsed.errors[0]
