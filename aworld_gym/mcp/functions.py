"""Plain Python functions as MCP tools: an in-process server built from typed functions.

::

    def add(a: int, b: int = 0) -> int:
        \"\"\"Add two integers.

        Args:
            a: the first number.
            b: the second number.
        \"\"\"
        return a + b

    hub = ToolHub(servers={"tools": function_server([add])})
    env = gym.make("AWorld/MCP-v0", mcp_config={"mcpServers": {"tools": FunctionTools([add])}}, tasks=...)

Each function becomes one tool named after it. Its schema comes from the type hints (a parameter with a default
is optional), its description from the docstring's first paragraph, and each parameter's description from the
docstring's Google-style ``Args:`` section. Sync functions run on a worker thread, async ones on the server's
loop. A function that raises gives the model a tool error with the exception's type and message; the session
is untouched.

The server survives ``copy.deepcopy`` (which ``gym.make`` applies to its kwargs) and pickling: either gives a
fresh server with the same functions. :class:`FunctionTools` is the same thing as a server factory.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from pydantic import Field

from aworld_gym.base.errors import ConfigError

_SECTION_RE = re.compile(r"^(Args|Arguments|Parameters|Returns|Return|Yields|Raises|Examples?|Notes?|Attributes):\s*$")
_ARG_RE = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def function_server(fns: Sequence[Callable[..., Any]], name: str = "tools") -> MCPServer:
    """An in-process MCP server whose tools are ``fns``.

    Args:
        fns: typed functions (sync or async), each a tool named after the function.
        name: the server's name.

    Raises:
        ConfigError: a function has no usable name or signature, or two share a name.
    """
    return _FunctionServer(tuple(fns), name)


class FunctionTools:
    """A server factory for :func:`function_server`: ``FunctionTools(fns, name)()`` builds the server.

    Give it where a server is expected (``servers={...}`` or an ``mcpServers`` value); it deep-copies and pickles
    (when the functions are defined at module level), so it is safe in ``gym.make`` kwargs and in worker processes.

    Args:
        fns: typed functions (sync or async), each a tool named after the function.
        name: the server's name.
    """

    def __init__(self, fns: Sequence[Callable[..., Any]], name: str = "tools") -> None:
        self.fns = tuple(fns)
        self.name = name
        for fn in self.fns:
            _tool_name(fn)  # fail here, at configuration, rather than when the env starts

    def __call__(self) -> MCPServer:
        return function_server(self.fns, self.name)

    def __repr__(self) -> str:
        return f"FunctionTools([{', '.join(_tool_name(f) for f in self.fns)}], name={self.name!r})"


class _FunctionServer(MCPServer):
    """An ``MCPServer`` that remembers its functions, so that a deep copy or an unpickle rebuilds it."""

    def __init__(self, fns: tuple[Callable[..., Any], ...], name: str) -> None:
        super().__init__(name, log_level="WARNING")
        self._functions = fns
        seen: set[str] = set()
        for fn in fns:
            tool = _tool_name(fn)
            if tool in seen:
                raise ConfigError(f"function_server: two functions are named {tool!r}; tool names must be unique")
            seen.add(tool)
            description, arg_docs = parse_docstring(inspect.getdoc(fn) or "")
            self.add_tool(_as_tool(fn, tool, arg_docs), name=tool, description=description)

    def __deepcopy__(self, memo: dict[int, Any]) -> _FunctionServer:
        return _FunctionServer(self._functions, self.name)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_FunctionServer, (self._functions, self.name))


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(the first paragraph, ``{parameter: description}`` from a Google-style ``Args:`` section) of ``doc``.

    Args:
        doc: a cleaned docstring (``inspect.getdoc``).
    """
    lines = doc.splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION_RE.match(line.strip()):
            break
        summary.append(line.strip())
    args: dict[str, str] = {}
    current: str | None = None
    base: int | None = None
    in_args = False
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if _SECTION_RE.match(stripped) and indent == 0:
            in_args = stripped.split(":")[0] in ("Args", "Arguments", "Parameters")
            current, base = None, None
            continue
        if not in_args or not stripped:
            continue
        if indent == 0:  # text outside any section ends the section
            in_args = False
            continue
        m = _ARG_RE.match(stripped)
        if m and (base is None or indent <= base):
            base = indent
            current = m.group(1).lstrip("*")
            args[current] = m.group(2).strip()
        elif current is not None:
            args[current] = f"{args[current]} {stripped}".strip()
    return " ".join(summary), {k: v for k, v in args.items() if v}


def _tool_name(fn: Callable[..., Any]) -> str:
    if not callable(fn):
        raise ConfigError(f"function_server: {fn!r} is not callable")
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(
            f"function_server: {fn!r} has no usable name (a lambda or a partial?); define it with def, or give it "
            "a __name__"
        )
    return name


def _as_tool(fn: Callable[..., Any], name: str, arg_docs: dict[str, str]) -> Callable[..., Any]:
    """A wrapper with ``fn``'s signature (hints resolved, parameter descriptions added) that turns every exception
    into a :class:`ToolError` carrying its message (the SDK would otherwise hide the message of a crash)."""
    try:
        sig = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
    except (NameError, TypeError, ValueError) as exc:
        raise ConfigError(f"function_server: cannot read the signature of {name!r}: {exc}") from None
    params: list[inspect.Parameter] = []
    positional: list[str] = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ConfigError(f"function_server: {name!r} takes *{p.name}; a tool needs named parameters")
        if p.kind is p.POSITIONAL_ONLY:
            positional.append(p.name)
        annotation = hints.get(p.name, p.annotation)
        if p.name in arg_docs and annotation is not p.empty:
            annotation = Annotated[annotation, Field(description=arg_docs[p.name])]
        params.append(p.replace(kind=p.KEYWORD_ONLY, annotation=annotation))
    returns = hints.get("return", sig.return_annotation)

    def split(kwargs: dict[str, Any]) -> list[Any]:
        return [kwargs.pop(n) for n in positional if n in kwargs]

    if inspect.iscoroutinefunction(fn):

        async def tool(**kwargs: Any) -> Any:
            try:
                return await fn(*split(kwargs), **kwargs)
            except (ToolError, MCPError):
                raise
            except Exception as exc:  # the model sees the failure as a tool error, with its message
                raise ToolError(f"{type(exc).__name__}: {exc}") from exc

    else:

        def tool(**kwargs: Any) -> Any:
            try:
                return fn(*split(kwargs), **kwargs)
            except (ToolError, MCPError):
                raise
            except Exception as exc:  # the model sees the failure as a tool error, with its message
                raise ToolError(f"{type(exc).__name__}: {exc}") from exc

    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = getattr(fn, "__doc__", None)
    tool.__module__ = getattr(fn, "__module__", __name__)
    tool.__signature__ = sig.replace(parameters=params, return_annotation=returns)  # type: ignore[attr-defined]
    tool.__annotations__ = {p.name: p.annotation for p in params if p.annotation is not p.empty}
    if returns is not sig.empty:
        tool.__annotations__["return"] = returns
    return tool
