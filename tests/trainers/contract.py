"""Contract helpers: a stand-in's method signature compared with the trainer's own, by ``inspect`` or, where the
trainer's module cannot be imported here (it imports a GPU engine), by reading the installed source with ``ast``."""

from __future__ import annotations

import ast
import importlib.util
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

Params = list[tuple[str, str, bool]]


def params(fn: Callable[..., Any]) -> Params:
    """``(name, kind, has a default)`` of each parameter, ``self`` left out (``__wrapped__`` followed)."""
    sig = inspect.signature(inspect.unwrap(fn))
    return [(p.name, p.kind.name, p.default is not p.empty) for p in sig.parameters.values() if p.name != "self"]


def source_params(module: str, cls: str, method: str) -> Params:
    """The same list for ``module.cls.method`` read from the installed file without importing it."""
    spec = importlib.util.find_spec(module.rpartition(".")[0])
    assert spec is not None and spec.submodule_search_locations, f"{module} is not installed"
    path = Path(next(iter(spec.submodule_search_locations))) / (module.rpartition(".")[2] + ".py")
    tree = ast.parse(path.read_text())
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    fn = next(n for n in klass.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == method)
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    n_defaults = len(a.defaults)
    out: Params = []
    for i, arg in enumerate(positional):
        kind = "POSITIONAL_ONLY" if i < len(a.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        out.append((arg.arg, kind, i >= len(positional) - n_defaults))
    if a.vararg:
        out.append((a.vararg.arg, "VAR_POSITIONAL", False))
    out += [(k.arg, "KEYWORD_ONLY", d is not None) for k, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
    if a.kwarg:
        out.append((a.kwarg.arg, "VAR_KEYWORD", False))
    return [p for p in out if p[0] != "self"]


class Recorder:
    """An object with fixed attributes that records which of them are read (what a consumer relies on)."""

    def __init__(self, **fields: Any) -> None:
        object.__setattr__(self, "_fields", dict(fields))
        object.__setattr__(self, "read", set())

    def __getattr__(self, name: str) -> Any:
        fields = object.__getattribute__(self, "_fields")
        if name not in fields:
            raise AttributeError(name)
        object.__getattribute__(self, "read").add(name)
        return fields[name]
