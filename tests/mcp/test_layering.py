"""``aworld_gym.base`` lies below ``mcp`` and ``core``: mcp imports nothing of core, base nothing of either, and
the shared types have one home each (no re-export shims)."""

from __future__ import annotations

import ast
import pickle

import pytest

import aworld_gym.base
import aworld_gym.base.errors
from aworld_gym.base.calls import ToolCall
from tests.helpers import ROOT


def aworld_imports(package: str) -> dict[str, set[str]]:
    """``aworld_gym.*`` modules imported by the modules of ``package`` (TYPE_CHECKING and lazy imports included)."""
    out: dict[str, set[str]] = {}
    for path in sorted((ROOT / "aworld_gym" / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):  # a relative import is reported as such (allowed nowhere)
                names = [node.module or ""] if node.level == 0 else [f"relative: {'.' * node.level}{node.module}"]
            else:
                continue
            for name in names:
                if name.startswith(("aworld_gym", "relative")):
                    out.setdefault(path.name, set()).add(name)
    return out


def outside(package: str, allowed: tuple[str, ...]) -> dict[str, list[str]]:
    found = aworld_imports(package).items()
    bad = {f: sorted(m for m in mods if not m.startswith(allowed)) for f, mods in found}
    return {f: mods for f, mods in bad.items() if mods}


def test_mcp_imports_only_base_and_itself():
    assert aworld_imports("mcp"), "the scan found no aworld_gym imports in mcp at all"
    assert outside("mcp", ("aworld_gym.base", "aworld_gym.mcp")) == {}


def test_base_imports_only_itself():
    assert outside("base", ("aworld_gym.base",)) == {}


def test_no_shim_is_left_for_the_moved_names():
    """The typed errors live in aworld_gym.base.errors only, and the result names in aworld_gym.mcp.results only
    (issue 45: no module re-exports another's names to keep an old path alive)."""
    import importlib

    import aworld_gym.mcp.hub as hub

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("aworld_gym.core." + "errors")  # spelled apart: a rename of the path keeps it
    for name in ("TIMEOUT", "TOOL_ERROR", "INVALID_ARGUMENTS", "ToolResult", "truncate", "render_content"):
        assert name not in hub.__all__
    for name in aworld_gym.base.errors.__dict__:
        value = getattr(aworld_gym.base.errors, name)
        if isinstance(value, type) and issubclass(value, Exception) and value.__module__ == "aworld_gym.base.errors":
            assert name in aworld_gym.base.__all__, name


def test_the_shared_types_have_one_home():
    from aworld_gym.core import actions
    from aworld_gym.mcp.results import ToolResult

    assert "ToolCall" not in actions.__all__  # no re-export: ToolCall is imported from aworld_gym.base.calls
    assert ToolResult.__dataclass_fields__["call"].type in ("ToolCall", ToolCall)
    for name in aworld_gym.base.errors.__dict__:
        value = getattr(aworld_gym.base.errors, name)
        if isinstance(value, type) and issubclass(value, Exception) and value.__module__ == "aworld_gym.base.errors":
            assert name in aworld_gym.base.__all__ and aworld_gym.base.__dict__[name] is value, name


def test_a_tool_call_pickles_under_its_new_home():
    call = ToolCall("add", {"a": 1}, "call_1")
    assert pickle.loads(pickle.dumps(call)) == call
    assert ToolCall.__module__ == "aworld_gym.base.calls"
