"""The pages a newcomer reads first say the same things: README's first screen reads, every trainer face is named
wherever the trainers are listed, and the test suite's size and time are stated on one page only."""

from __future__ import annotations

import ast
import re

import yaml

from tests.helpers import ROOT

SCREEN = 60  # lines of a first screen


def trainers() -> list[str]:
    """The trainers of docs/training.md's table (its first: the page's later tables are results), in its order
    ("OpenEnv consumers (...)" is "OpenEnv")."""
    lines = (ROOT / "docs" / "training.md").read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| "))
    rows = [line for line in lines[first:] if line.strip()]
    rows = rows[: next((i for i, line in enumerate(rows) if not line.startswith("|")), len(rows))]
    names = [row.split("|")[1].strip() for row in rows[2:]]
    names = ["OpenEnv" if name.startswith("OpenEnv") else name for name in names]
    return list(dict.fromkeys(names))


def test_the_training_table_has_the_ten_faces_of_nine_trainers():
    assert trainers() == ["TRL", "verl", "RLlib", "SkyRL", "slime", "AReaL", "OpenRLHF", "ms-swift", "OpenEnv"]


def test_readme_first_screen_is_what_it_is_the_commands_the_example_and_the_envs():
    lines = (ROOT / "README.md").read_text().splitlines()
    screen = "\n".join(lines[:SCREEN])
    opening = screen.split("```", 1)[0]
    assert len(opening.splitlines()) <= 8, "what it is, in a few lines, before the commands"
    for piece in ("make run", "make test", "## In 15 lines", 'gym.make("AWorld/MCP-v0"', "## Environments"):
        assert piece in screen, f"README's first {SCREEN} lines should hold {piece!r}"
    table = next(i for i, line in enumerate(lines) if line.startswith("| id |"))
    assert table < SCREEN - 4, "the env table starts on the first screen"


def test_every_place_that_lists_the_trainers_names_all_of_them():
    readme = (ROOT / "README.md").read_text()
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    guides = next(item["Guides"] for item in nav if isinstance(item, dict) and "Guides" in item)
    training = next(title for item in guides for title, page in item.items() if page == "training.md")
    places = {
        "README's opening": readme.split("```", 1)[0],
        "docs/index.md": (ROOT / "docs" / "index.md").read_text(),
        "docs/getting-started.md": (ROOT / "docs" / "getting-started.md").read_text(),
        "the mkdocs nav": training,
        "trainers/__init__.py": ast.get_docstring(ast.parse((ROOT / "aworld_gym/trainers/__init__.py").read_text())),
    }
    for place, text in places.items():
        missing = [name for name in trainers() if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text or "")]
        assert not missing, f"{place} lists trainers but leaves out {missing}"


def test_the_suites_size_and_time_are_on_one_page():
    counted = re.compile(r"\b\d[\d,]* tests\b")
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    stating = [p.name for p in pages if counted.search(p.read_text())]
    assert stating == ["testing.md"], f"the suite's size is stated on {stating}; one page says it"
    assert len(counted.findall((ROOT / "docs" / "testing.md").read_text())) == 1  # one figure, one run


def test_getting_started_teaches_before_it_reports():
    """Getting started is a tutorial: it says to activate the venv before the first example, and the test suite's
    history lives on the testing page (issue 46)."""
    page = (ROOT / "docs" / "getting-started.md").read_text()
    assert "source .venv/bin/activate" in page
    assert page.index("source .venv/bin/activate") < page.index("## A first environment")
    assert "pytest-xdist" not in page and "SECURITY TESTS SKIPPED" not in page
    assert len(page.split()) < 800, "a tutorial, not a changelog"
    readme = (ROOT / "README.md").read_text().splitlines()[:SCREEN]
    assert any("source .venv/bin/activate" in line for line in readme), "README's first screen says to activate"
