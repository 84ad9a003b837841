"""Every interactive element of a task page is reachable by a ref in the first observation, over all the
single-page MiniWoB++ tasks: the DOM is asked for its interactive elements (form controls, links with an
href, buttons, elements with a click handler bound by d3, jQuery or inline), and each must show in the
snapshot on a line with a ``[ref=...]``: by its name, or for unnamed controls by its role. Exceptions are
reported; the test fails past a small allowance."""

from __future__ import annotations

import asyncio
import json

import gymnasium as gym
import pytest

import aworld_gym
from aworld_gym.envs.browser.env import _result_json
from aworld_gym.envs.browser.tasks import task_names
from tests.envs.browser.test_browser import pytestmark as needs_browser

pytestmark = [needs_browser, pytest.mark.slow]

LIST_JS = """() => {
  const jq = window.jQuery && window.jQuery._data;
  const handled = (el) => !!(el.onclick || el.onmousedown || el.getAttribute('onclick') ||
    el.__onclick || el.__onmousedown || (jq && (window.jQuery._data(el, 'events') || {}).click));
  const root = document.getElementById('wrap') || document.body;
  const out = [];
  for (const el of root.querySelectorAll('*')) {
    if (!el.getClientRects().length || getComputedStyle(el).visibility === 'hidden') continue;
    const t = el.tagName, type = (el.getAttribute('type') || '').toLowerCase();
    let kind = null;
    if (t === 'INPUT' && type === 'hidden') continue;
    if (t === 'INPUT' && ['checkbox', 'radio'].includes(type)) kind = type;
    else if (t === 'INPUT' && ['button', 'submit', 'reset'].includes(type)) kind = 'button';
    else if (t === 'INPUT' || t === 'TEXTAREA') kind = 'textbox';
    else if (t === 'SELECT') kind = 'select';
    else if (t === 'BUTTON') kind = 'button';
    else if (t === 'A' && el.hasAttribute('href')) kind = 'link';
    else if (handled(el)) kind = 'clickable';
    if (!kind) continue;
    const name = (el.getAttribute('aria-label') || (t === 'INPUT' ? el.value : el.innerText) || '').trim();
    out.push({kind, name: name.split('\\n')[0].slice(0, 40)});
  }
  return {elements: out};
}"""
ROLES = {"textbox": ("textbox", "spinbutton", "searchbox"), "checkbox": ("checkbox",), "radio": ("radio",),
         "select": ("combobox", "listbox")}  # fmt: skip


def missing(obs: str, elements: list[dict]) -> list[str]:
    lines = [line for line in obs.splitlines() if "[ref=" in line]
    gaps = []
    for kind in ROLES:  # unnamed controls: enough refs of their role
        want = sum(e["kind"] == kind for e in elements)
        have = sum(any(f"- {role}" in line for role in ROLES[kind]) for line in lines)
        if have < want:
            gaps.append(f"{want - have} of {want} {kind} without a ref")
    for e in elements:
        if e["kind"] in ROLES or not e["name"]:
            continue
        quoted = json.dumps(e["name"][:25])[:-1]  # '"Faucibus' : the start of a quoted accessible name
        if not any(quoted in line or e["name"][:25] in line for line in lines):
            gaps.append(f"{e['kind']} {e['name'][:25]!r} without a ref")
    return gaps


WORKERS = 4  # envs on one event loop, sharing one browser: the tasks' resets overlap (they wait on page loads)


async def survey(envs: list, names: list[str]) -> tuple[dict[str, list[str]], int]:
    """Each task reset once (on whichever env is free), its interactive elements listed and looked for."""
    todo = list(enumerate(names))
    report, seen = {}, 0

    async def worker(env) -> None:
        nonlocal seen
        while todo:
            i, task = todo.pop(0)
            obs, _ = await env.areset(seed=i, options={"task_id": task})
            hub = env.unwrapped.hub
            found = _result_json(await hub.acall_internal("browser_evaluate", {"function": LIST_JS}))
            seen += len(found["elements"])
            gaps = missing(obs, found["elements"])
            if gaps:
                report[task] = gaps

    try:
        await asyncio.gather(*(worker(env) for env in envs))
    finally:
        await asyncio.gather(*(env.aclose() for env in envs), return_exceptions=True)
    return report, seen


def test_every_interactive_element_has_a_ref():
    names = task_names()
    assert len(names) >= 100
    envs = [aworld_gym.async_face(gym.make("AWorld/Browser-v0", tasks=names)) for _ in range(WORKERS)]
    report, elements_seen = asyncio.run(survey(envs, names))
    print(f"{len(names)} tasks, {elements_seen} interactive elements; tasks with gaps: {len(report)}")
    for task, gaps in sorted(report.items()):
        print(f"  {task}: {'; '.join(gaps[:4])}")
    assert elements_seen > 500
    assert len(report) <= len(names) // 20, report  # at most 5% of the tasks with an element the agent cannot name
