"""What every settings group shares: each field checked once, where the group is made.

A group (:class:`~aworld_gym.core.settings.Limits`, :class:`~aworld_gym.mcp.options.ToolOptions`, ...) is a frozen
dataclass whose ``CHECKS`` map a field to ``check(value, where, name) -> value``: the check raises
:class:`ConfigError` saying ``"<where>: <name> must ..."`` and returns the value in its normal form (a list as a
tuple, ``tool_images=True`` as image limits). The same check runs on a value given as a flat keyword
(``MCPEnv(tool_timeout=-1)``: the message names ``tool_timeout``) and on a group's field
(``ToolOptions(timeout=-1)``: it names ``timeout``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields
from typing import Any, ClassVar

from aworld_gym.base.errors import ConfigError

Check = Callable[[Any, str, str], Any]


class SettingsGroup:
    """Base of the settings groups (frozen dataclasses): runs ``CHECKS`` on construction."""

    CHECKS: ClassVar[Mapping[str, Check]] = {}

    def __post_init__(self) -> None:
        where = type(self).__name__
        for name, check in self.CHECKS.items():
            object.__setattr__(self, name, check(getattr(self, name), where, name))
        self.check_together(where)

    def check_together(self, where: str) -> None:
        """Checks across fields (a group with such a rule overrides this)."""

    @classmethod
    def check(cls, field: str, value: Any, where: str, name: str) -> Any:
        """``value`` of ``field`` checked and in its normal form; errors say ``"<where>: <name> ..."``."""
        check = cls.CHECKS.get(field)
        return value if check is None else check(value, where, name)

    def given(self) -> dict[str, Any]:
        """The fields whose value is not the group's default (what the one who made it set)."""
        default = type(self)()
        out = {}
        for f in fields(self):  # type: ignore[arg-type] - every group is a dataclass
            value, standard = getattr(self, f.name), getattr(default, f.name)
            if value is not standard and value != standard:
                out[f.name] = value
        return out


def flag(value: Any, where: str, name: str) -> bool:
    """``True`` or ``False``, nothing else (``"no"`` would be true)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: {name} must be True or False, got {type(value).__name__} {value!r:.40}")
    return value


def patterns(value: Any, where: str, name: str) -> tuple[str, ...] | None:
    """``None`` or glob patterns (a list of strings) as a tuple."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable) or not all(isinstance(p, str) for p in value):
        raise ConfigError(f"{where}: {name} must be a list of glob patterns (strings), got {value!r:.60}")
    return tuple(value)
