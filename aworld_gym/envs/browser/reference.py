"""The scripted reference policy of AWorld/Browser-v0: solves MiniWoB++ tasks through the Playwright MCP tools.

It reads the task's instruction (as a model would, from the first observation) and acts on elements with CSS
selectors, one tool call per turn. It knows :data:`REFERENCE_TASKS`; on any other task it gives up at once. A click
that another element blocks (MiniWoB++ places buttons at random, and one may cover another's middle) is done again
from the keyboard: the element is focused and a space typed into it, which presses a button or ticks a box.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from aworld_gym.rollout.policies import ScriptedPolicy

Call = tuple[str, dict[str, Any]]


def _q(text: str) -> str:
    return json.dumps(text)  # a quoted string for a Playwright selector


def _click(target: str, element: str = "") -> Call:
    return "browser_click", {"target": target, "element": element or target}


def _type(target: str, text: str) -> Call:
    return "browser_type", {"target": target, "text": text, "element": target}


def _press(call: Call) -> Call:
    """A click done from the keyboard: focus the element, type a space (no pointer, so nothing on top can block)."""
    arguments = call[1]
    return "browser_type", {"target": arguments["target"], "text": " ", "slowly": True, "element": arguments["element"]}


def _blocked(turn: dict[str, Any]) -> bool:
    """Whether the turn's click timed out because another element was on top of its target."""
    return any(
        r.get("name") == "browser_click" and r.get("error") and "intercepts pointer events" in str(r.get("text"))
        for r in turn.get("tool_results", [])
    )


def _submit() -> Call:
    return _click("#subbtn", "Submit")


def _quoted(utterance: str) -> list[str]:
    return re.findall(r'"([^"]*)"', utterance)


def _checkboxes(u: str) -> list[Call]:
    names = re.match(r"Select (.*) and click Submit\.", u)
    wanted = [] if names is None or names.group(1) == "nothing" else names.group(1).split(", ")
    return [_click(f"#boxes label:text-is({_q(n)}) >> input", n) for n in wanted] + [_submit()]


def _option(u: str) -> list[Call]:
    name = re.match(r"Select (.*) and click Submit\.", u)
    assert name is not None
    return [_click(f"#boxes label:text-is({_q(name.group(1))}) >> input", name.group(1)), _submit()]


def _choose_list(u: str) -> list[Call]:
    item = re.match(r"Select (.*) from the list and click Submit\.", u)
    assert item is not None
    select = ("browser_select_option", {"target": "#options", "values": [item.group(1)], "element": "list"})
    return [select, _click('#area button:text-is("Submit")', "Submit")]


def _enter_text_2(u: str) -> list[Call]:
    text = _quoted(u)[0]
    return [_type("#tt", text.upper() if "upper case" in u else text.lower()), _submit()]


def _login(u: str) -> list[Call]:
    user, password = _quoted(u)[:2]
    return [_type("#username", user), _type("#password", password), _click("#subbtn", "Login")]


ORDINAL = {"1st": "#tt1", "2nd": "#tt2", "3rd": "#tt3"}

# task -> instruction -> the tool calls that solve it, one per turn.
SOLVERS: dict[str, Callable[[str], list[Call]]] = {
    "click-button": lambda u: [_click(f"#area button:text-is({_q(_quoted(u)[0])}) >> nth=0", _quoted(u)[0])],
    "click-button-sequence": lambda u: [_click("#subbtn", "ONE"), _click("#subbtn2", "TWO")],
    "click-link": lambda u: [_click(f"#area span.alink:text-is({_q(_quoted(u)[0])}) >> nth=0", _quoted(u)[0])],
    "click-checkboxes": _checkboxes,
    "click-option": _option,
    "click-collapsible": lambda u: [_click("#area h3", "section header"), _submit()],
    "click-dialog": lambda u: [_click("button.ui-dialog-titlebar-close", "x")],
    "click-tab": lambda u: [_click(f"#area ul a:text-is({_q(u.removeprefix('Click on ').rstrip('.'))})", u)],
    "click-test": lambda u: [_click("#subbtn", "Click Me!")],
    "click-test-2": lambda u: [_click(f"#area button:text-is({_q(u.split()[-1].rstrip('.'))})", "button")],
    "choose-list": _choose_list,
    "enter-password": lambda u: [_type("#password", _quoted(u)[0]), _type("#verify", _quoted(u)[0]), _submit()],
    "enter-text": lambda u: [_type("#tt", _quoted(u)[0]), _submit()],
    "enter-text-2": _enter_text_2,
    "focus-text": lambda u: [_click("#tt", "textbox")],
    "focus-text-2": lambda u: [_click(ORDINAL[u.split()[3]], u.split()[3] + " textbox")],
    "login-user": _login,
}
REFERENCE_TASKS = tuple(SOLVERS)


class BrowserReferencePolicy(ScriptedPolicy):
    """Plans the task's tool calls from its instruction at the first turn, then makes one call per turn.

    Args:
        latency_s: a fixed delay per turn, standing in for a model server in benchmarks.
    """

    # ``aworld-gym rollout --policy reference`` runs the tasks this policy knows unless --env-kwargs says otherwise.
    env_defaults: dict[str, Any] = {"tasks": list(REFERENCE_TASKS)}  # noqa: RUF012

    def decide(self, env: Any) -> str:
        solver = SOLVERS.get(env.task.id)
        if solver is None:
            return f"I have no script for {env.task.id!r}.\n<answer>give up</answer>"
        plan = solver(env.utterance)
        turns = env.turns[: env.turn]
        step = sum(1 for turn in turns if not _blocked(turn))  # a blocked click is tried again, by keyboard
        if step >= len(plan):
            return "Every planned step is done, but the task did not end.\n<answer>give up</answer>"
        name, arguments = plan[step]
        if turns and _blocked(turns[-1]):
            name, arguments = _press(plan[step])
        call = json.dumps({"name": name, "arguments": arguments})
        return f"<think>Step {env.turn + 1} of {len(plan)}.</think>\n<tool_call>\n{call}\n</tool_call>"
