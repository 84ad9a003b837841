"""ToolOptions: what the agent's tool calls may do and how they run, in one object the hub takes.

``MCPEnv(tool_options=ToolOptions(timeout=5, deny=("rm*",)))`` and ``ToolHub(config, options=ToolOptions(...))``
read the same fields under the same names; the flat ``MCPEnv`` keywords (``tool_timeout=``, ``deny_tools=``...) map
to them in :data:`aworld_gym.core.settings.FLAT`. Every value is checked here, once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from aworld_gym.base.errors import ConfigError
from aworld_gym.base.settings import Check, SettingsGroup, flag, patterns
from aworld_gym.mcp.cache import CacheSettings, cache_settings
from aworld_gym.mcp.capabilities import WORK_FOLDER, Capabilities, parse_capabilities
from aworld_gym.mcp.config import count, seconds
from aworld_gym.mcp.results.images import ImageLimits, image_limits

DEFAULT_CALL_TIMEOUT_S = 60.0

# guard(tool_name, arguments) -> None to let the call through, or the reason it is refused.
Guard = Callable[[str, Mapping[str, Any]], "str | None"]


@dataclass(frozen=True)
class ToolOptions(SettingsGroup):
    """How the agent's tool calls are offered, checked and run (the hub's settings).

    Attributes:
        allow: glob patterns of the tools the agent may use (matched against the tool name, the exposed name and
            ``server__tool``); ``None`` allows all. Flat keyword: ``allow_tools``.
        deny: glob patterns of tools hidden from the agent (applied after ``allow``). Flat: ``deny_tools``.
        guard: ``guard(tool, arguments) -> None | reason`` sees every agent call before it is sent and may refuse it
            (the agent gets ``Error: <reason>``, kind ``refused``).
        hidden_arguments: ``{tool: [argument, ...]}`` removed from the agent's schemas, so that a call using them is
            refused as an unknown argument (e.g. a ``filename`` that would write a file).
        sequential: run a turn's calls one after another, in the order given, not concurrently (one stateful page:
            type, type, click). Flat: ``sequential_calls``.
        timeout: default per-call timeout in seconds (a server's own ``timeout`` wins). Flat: ``tool_timeout``.
        max_output_chars: tool output beyond this is cut, with a note. Flat: ``max_tool_output_chars``.
        max_argument_chars: a call whose JSON arguments are longer is refused (``too_large``).
        max_argument_depth: a call whose arguments nest objects and arrays deeper (the arguments object counts as 1)
            is refused (``invalid_arguments``), like arguments JSON-RPC cannot carry (a lone surrogate, ``NaN``).
        images: images of tool results shown to the model as image parts (``True``), kept as text placeholders
            (``False``, text-only models), or a dict of :class:`~aworld_gym.mcp.results.images.ImageLimits` fields; held as
            :class:`ImageLimits`. Flat: ``tool_images``.
        elicitation: a server's request for input during a call: ``"decline"`` (the call's result becomes an error
            the model sees), ``"accept_defaults"`` or ``fn(message, requested_schema) -> dict | None``.
        sampling: a server's request for a completion: refused (``None``), an OpenAI-compatible endpoint
            ``{"base_url", "model", "api_key"?}`` or ``fn(messages, options)``; an endpoint is held as a
            :class:`~aworld_gym.mcp.capabilities.SamplingEndpoint`.
        roots: folders or ``file://`` URIs listed to servers that ask (``"{work}"``: the env's work folders);
            ``None``: the roots capability is not declared. A server entry's own three keys win over these.
        restart: restart a server whose connection died (at the next call or reset).
        cache: record and replay of the calls: a store (an SQLite file path, or ``redis://host:port/db`` for a
            cluster; mode ``replay``) or ``{"store", "mode", "on_error"}``, the default of every server (an entry's own ``"cache"`` wins); held as
            :class:`~aworld_gym.mcp.cache.CacheSettings`. ``None``: every call is live. Flat: ``tool_cache``.
    """

    allow: Sequence[str] | None = None
    deny: Sequence[str] = ()
    guard: Guard | None = None
    hidden_arguments: Mapping[str, Iterable[str]] | None = None
    sequential: bool = False
    timeout: float = DEFAULT_CALL_TIMEOUT_S
    max_output_chars: int = 20_000
    max_argument_chars: int = 200_000
    max_argument_depth: int = 32
    images: bool | Mapping[str, Any] | ImageLimits = True
    elicitation: str | Callable[..., Any] = "decline"
    sampling: Mapping[str, Any] | Callable[..., Any] | None = None
    roots: Sequence[str | Path] | None = None
    restart: bool = True
    cache: str | Path | Mapping[str, Any] | CacheSettings | None = None

    CHECKS: ClassVar[Mapping[str, Check]] = {}  # filled below, beside the check functions

    def capabilities(self, work_folders: Iterable[str | Path] = (), where: str = "ToolHub") -> Capabilities:
        """``elicitation``, ``sampling`` and ``roots`` as the sessions use them (``"{work}"``: ``work_folders``)."""
        return parse_capabilities(self.elicitation, self.sampling, self.roots, work_folders=work_folders, where=where)


def _deny(value: Any, where: str, name: str) -> tuple[str, ...]:
    return patterns(value, where, name) or ()


def _guard(value: Any, where: str, name: str) -> Guard | None:
    if value is not None and not callable(value):
        raise ConfigError(f"{where}: {name} must be a function (tool, arguments) -> None | reason")
    return value


def _hidden(value: Any, where: str, name: str) -> dict[str, frozenset[str]] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or any(isinstance(v, str) or not isinstance(v, Iterable) for v in value.values()):
        raise ConfigError(f"{where}: {name} must map tool names to lists of argument names")
    return {str(k): frozenset(v) for k, v in value.items()}


def _seconds(value: Any, where: str, name: str) -> float:
    return seconds(value, f"{where}: {name}")


def _count(value: Any, where: str, name: str) -> int:
    return count(value, f"{where}: {name}")


def _depth(value: Any, where: str, name: str) -> int:
    return count(value, f"{where}: {name} (the arguments object itself is 1)")


def _images(value: Any, where: str, name: str) -> ImageLimits:
    return image_limits(value, f"{where}: {name}")


def _elicitation(value: Any, where: str, name: str) -> Any:
    return parse_capabilities(elicitation=value, where=where).elicitation


def _sampling(value: Any, where: str, name: str) -> Any:
    return parse_capabilities(sampling=value, where=where).sampling


def _cache(value: Any, where: str, name: str) -> CacheSettings | None:
    return cache_settings(value, f"{where}: {name}")


def _roots(value: Any, where: str, name: str) -> tuple[str | Path, ...] | None:
    if value is None:
        return None
    if isinstance(value, str | Path) or not isinstance(value, Iterable):
        parse_capabilities(roots=value, where=where)  # raises: "roots must be a list ..."
    entries = tuple(value)
    parse_capabilities(roots=[e for e in entries if e != WORK_FOLDER], where=where)  # "{work}": known at the hub
    return entries


ToolOptions.CHECKS = {
    "allow": patterns,
    "deny": _deny,
    "guard": _guard,
    "hidden_arguments": _hidden,
    "sequential": flag,
    "timeout": _seconds,
    "max_output_chars": _count,
    "max_argument_chars": _count,
    "max_argument_depth": _depth,
    "images": _images,
    "elicitation": _elicitation,
    "sampling": _sampling,
    "roots": _roots,
    "restart": flag,
    "cache": _cache,
}
