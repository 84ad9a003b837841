"""Every third-party module that aworld_gym imports is declared in pyproject.toml (core or an extra), and what is
installed satisfies the declarations: nothing works only because another package happens to pull it in."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, packages_distributions, version

from packaging.requirements import Requirement

from tests.helpers import ROOT

# Imported by code that runs only inside a framework's own environment (verl's agent-loop workers, installed by
# `make verl`: verl brings omegaconf; OpenRLHF, whose full install needs CUDA, and AReaL, which pins an older torch:
# the Makefile installs each --no-deps with what its API imports; ms-swift, which pins trl<1.0, in .venv-swift), or a
# module of ours that is not a package (the sandbox's zygote).
NOT_DECLARED = {"verl", "omegaconf", "openrlhf", "areal", "swift", "aworld_zygote_execution"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    reqs += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    return {_norm(r.name): r for r in reqs}


def imported() -> dict[str, set[str]]:
    """Top-level third-party modules imported anywhere in aworld_gym (lazy imports included) -> the files."""
    out: dict[str, set[str]] = {}
    for path in sorted((ROOT / "aworld_gym").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "aworld_gym" and top not in sys.stdlib_module_names:
                    out.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return out


def test_every_imported_module_is_declared():
    decl, dists = declared(), packages_distributions()
    missing = {}
    for module, files in imported().items():
        if module in NOT_DECLARED:
            continue
        names = {_norm(d) for d in dists.get(module, [])} or {_norm(module)}
        if not names & decl.keys():
            missing[module] = sorted(files)
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_the_httpx2_import_is_declared_in_core():
    # mcp/transports/connection.py imports it (not only GAIA): it is a dependency of every install
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "httpx2" in {_norm(Requirement(r).name) for r in project["dependencies"]}


def test_core_declarations_are_satisfied_by_what_is_installed():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for req in map(Requirement, project["dependencies"]):
        try:
            installed = version(req.name)
        except PackageNotFoundError:
            raise AssertionError(f"{req.name} is declared but not installed") from None
        assert req.specifier.contains(installed, prereleases=True), f"{req} but {installed} is installed"
