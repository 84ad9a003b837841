"""Where the pinned Node MCP servers are found, and the pins themselves.

The package ships the pins (``node_pins/package.json`` and ``package-lock.json``: every version, transitive ones
included, with their integrity hashes: the part of the checkout's lock that the envs run) so that
``aworld-gym setup browser`` can install exactly them outside a checkout. A Node package is looked for, in order:

1. the explicit setting (an environment variable naming the file, e.g. ``$AWORLD_GYM_PLAYWRIGHT_MCP``);
2. the checkout's ``node_modules`` (``make`` installs it there), then the current folder's;
3. the user cache :func:`node_home` (what ``aworld-gym setup`` installs), only at the pinned version.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

PINS = Path(__file__).with_name("node_pins")  # package.json and package-lock.json, shipped in the wheel
CHECKOUT = Path(__file__).resolve().parents[2]  # the repository root when running from a checkout
SETUP_HINT = "run `aworld-gym setup browser` (it installs the pinned Node servers into {home})"


def node_home() -> Path:
    """The user cache of Node servers: ``$AWORLD_GYM_HOME/node``, else ``$XDG_CACHE_HOME/aworld-gym/node``, else
    ``~/.cache/aworld-gym/node``."""
    home = os.environ.get("AWORLD_GYM_HOME")
    if home:
        return Path(home).expanduser() / "node"
    cache_root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_root).expanduser() / "aworld-gym" / "node"


@cache
def pinned_lock() -> dict[str, Any]:
    """The shipped ``package-lock.json`` (the pins of every package the envs run)."""
    return json.loads((PINS / "package-lock.json").read_text())


def pinned_versions() -> dict[str, str]:
    """Every pinned package, transitive ones included: {name: version}."""
    packages = pinned_lock()["packages"]
    return {key.rsplit("node_modules/", 1)[1]: entry["version"] for key, entry in packages.items() if key}


def installed_version(root: Path, package: str) -> str | None:
    """The version of ``package`` in ``root/node_modules`` (``None``: not there, or unreadable)."""
    try:
        return str(json.loads((root / "node_modules" / package / "package.json").read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def stale(root: Path) -> dict[str, str | None]:
    """The pinned packages that ``root/node_modules`` lacks or holds at another version: {name: what is there}."""
    return {name: got for name, want in pinned_versions().items() if (got := installed_version(root, name)) != want}


def find_node_file(package: str, file: str, setting: str) -> Path | None:
    """``file`` of Node ``package``, by the search order of this module's docstring (``setting``: the environment
    variable that names it explicitly); ``None`` when none is found. An explicit setting that names no file is a
    ``FileNotFoundError``."""
    given = os.environ.get(setting)
    if given:
        if not Path(given).is_file():
            raise FileNotFoundError(f"{setting}={given!r} does not exist")
        return Path(given)
    for root in (CHECKOUT, Path.cwd()):
        path = root / "node_modules" / package / file
        if path.is_file():
            return path
    home = node_home()
    path = home / "node_modules" / package / file
    if path.is_file() and not stale(home):
        return path
    return None


def missing_message(package: str, setting: str) -> str:
    """What to do when ``package`` is found nowhere (or the user cache holds other versions than the pins)."""
    home = node_home()
    there = installed_version(home, package)
    why = f"{home} holds {package} {there}, this aworld-gym pins {pinned_versions()[package]}" if there else (
        f"{package} is not installed")  # fmt: skip
    return f"{why}: {SETUP_HINT.format(home=home)}, or set {setting} to its file"
