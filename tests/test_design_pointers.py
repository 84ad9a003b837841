"""Every file and symbol that docs/design.md names exists: a rename or a move that forgets the design page fails here.

A pointer is a code span (`` `...` ``) on the page that is either a path (``rollout/pool.py``,
``aworld_gym/sandbox/zygote/``, ``benchmarks/soak.py``: from the repository root or from ``aworld_gym/``) or a dotted
name that starts with ``aworld_gym`` or one of its sub-packages (``core.episode.decide_ending``,
``aworld_gym.mcp.transports.shared.SharedServer``, ``rollout.driver.run_episode()``). A dotted name is resolved statically
(``ast``), so naming a module that imports a trainer (verl, slime) imports nothing: the module's file must exist, its
first attribute must be defined at its top level (a def, a class, an assignment or an import), and a second one in
that class's body.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from tests.helpers import ROOT

PAGE = ROOT / "docs" / "design.md"
PACKAGE = ROOT / "aworld_gym"
SUBPACKAGES = tuple(sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()))
PATH = re.compile(r"^[\w.-]+(/[\w.-]+)*(\.(py|js|md|toml|json|yaml|html|css|txt)|/)$")
DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


def spans(text: str) -> list[str]:
    """The page's code spans (fenced blocks left out), each once, in order."""
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    return list(dict.fromkeys(re.findall(r"`([^`\n]+)`", prose)))


def paths(text: str) -> list[str]:
    return [s for s in spans(text) if "/" in s and PATH.match(s)]


def symbols(text: str) -> list[str]:
    names = [s.removesuffix("()") for s in spans(text)]
    return [s for s in names if DOTTED.match(s) and s.split(".")[0] in ("aworld_gym", *SUBPACKAGES)]


def path_exists(path: str) -> bool:
    return any((base / path).exists() for base in (ROOT, PACKAGE))


@cache
def top_level(file: Path) -> dict[str, ast.AST]:
    """The names a module defines at its top level: defs, classes, assignments, imports."""
    names: dict[str, ast.AST] = {}
    for node in ast.parse(file.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        names[name.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
    return names


def in_class(node: ast.AST, name: str) -> bool:
    """Whether a class body defines ``name`` (a method, a class attribute, an annotated field)."""
    if not isinstance(node, ast.ClassDef):
        return False
    return name in top_level_of(node.body)


def top_level_of(body: list[ast.stmt]) -> set[str]:
    found = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Assign):
            found |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
    return found


def module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    for file in (base.with_suffix(".py"), base / "__init__.py"):
        if file.is_file():
            return file
    return None


def resolve(symbol: str) -> str | None:
    """None when ``symbol`` exists; otherwise what is missing."""
    parts = symbol.split(".")
    if parts[0] != "aworld_gym":
        parts = ["aworld_gym", *parts]
    for cut in range(len(parts), 0, -1):  # the longest prefix that is a module
        file = module_file(parts[:cut])
        if file is None:
            continue
        rest = parts[cut:]
        if not rest:
            return None
        node = top_level(file).get(rest[0])
        if node is None:
            return f"{file.relative_to(ROOT)} defines no {rest[0]}"
        if len(rest) == 2 and not in_class(node, rest[1]):
            return f"{rest[0]} in {file.relative_to(ROOT)} has no {rest[1]}"
        if len(rest) > 2:
            return f"{'.'.join(rest)}: only module.name and module.Class.member are pointers"
        return None
    return f"no module {'.'.join(parts[:2])}"


def test_the_checker_finds_what_is_there_and_misses_nothing_invented():
    """The checker itself: real names pass, invented ones fail, and prose that is no pointer is left alone."""
    text = (
        "`core/episode.py` `core.episode.decide_ending` `aworld_gym.mcp.transports.shared.SharedServer` "
        "`rollout.driver.run_episode()` `core.trajectory.Trajectory.to_record` `env.unwrapped.messages` "
        '`core/nowhere.py` `core.episode.no_such_thing` `core.trajectory.Trajectory.no_such_method` `info["tools"]`'
    )
    assert paths(text) == ["core/episode.py", "core/nowhere.py"]
    assert [path_exists(p) for p in paths(text)] == [True, False]
    found = symbols(text)
    assert "env.unwrapped.messages" not in found and len(found) == 6
    assert [resolve(s) is None for s in found] == [True, True, True, True, False, False]


def test_the_design_page_names_enough_to_check():
    text = PAGE.read_text()
    assert len(paths(text)) >= 40 and len(symbols(text)) >= 15  # else the page stopped pointing and this checks nothing


@pytest.mark.parametrize("path", paths(PAGE.read_text()))
def test_every_named_file_exists(path):
    assert path_exists(path), f"docs/design.md names `{path}`, which is neither under the root nor under aworld_gym/"


@pytest.mark.parametrize("symbol", symbols(PAGE.read_text()))
def test_every_named_symbol_exists(symbol):
    assert resolve(symbol) is None, f"docs/design.md names `{symbol}`: {resolve(symbol)}"
