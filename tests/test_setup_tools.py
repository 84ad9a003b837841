"""``aworld-gym setup`` and where the Node servers are found (``aworld_gym.base.node``), without npm or a browser:
the shipped pins against the checkout's lock, the search order, the user cache's folder, and what ``setup`` says
and exits with when something is missing. tests/test_wheel.py runs the real install from the built wheel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aworld_gym import setup_tools
from aworld_gym.base import node
from aworld_gym.base.errors import ConfigError
from aworld_gym.envs.browser import playwright
from tests.helpers import ROOT


def test_shipped_pins_are_the_checkouts() -> None:
    """The wheel's pins are the part of package-lock.json that @playwright/mcp needs, entry for entry."""
    lock = json.loads((ROOT / "package-lock.json").read_text())["packages"]
    shipped = node.pinned_lock()["packages"]
    wanted, todo = set(), ["@playwright/mcp"]
    while todo:
        name = todo.pop()
        wanted.add(name)
        todo += [d for d in lock[f"node_modules/{name}"].get("dependencies", {}) if d not in wanted]
    assert {k.removeprefix("node_modules/") for k in shipped if k} == wanted
    for key, entry in shipped.items():
        if key:
            assert entry == lock[key], key
    repo = json.loads((ROOT / "package.json").read_text())["dependencies"]
    ours = json.loads((node.PINS / "package.json").read_text())["dependencies"]
    assert ours == {"@playwright/mcp": repo["@playwright/mcp"]} == shipped[""]["dependencies"]


def test_node_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AWORLD_GYM_HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    assert node.node_home() == tmp_path / "me" / ".cache" / "aworld-gym" / "node"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert node.node_home() == tmp_path / "xdg" / "aworld-gym" / "node"
    monkeypatch.setenv("AWORLD_GYM_HOME", str(tmp_path / "ag"))
    assert node.node_home() == tmp_path / "ag" / "node"


def fake_install(root: Path, versions: dict[str, str]) -> Path:
    """A node_modules with these package versions and @playwright/mcp's cli.js."""
    for name, version in versions.items():
        folder = root / "node_modules" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "package.json").write_text(json.dumps({"name": name, "version": version}))
    cli = root / "node_modules" / "@playwright" / "mcp" / "cli.js"
    cli.parent.mkdir(parents=True, exist_ok=True)
    cli.write_text("")
    return cli


@pytest.fixture
def nowhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No checkout, an empty current folder, an empty user cache, no explicit setting."""
    monkeypatch.setattr(node, "CHECKOUT", tmp_path / "checkout")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("AWORLD_GYM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(playwright.PLAYWRIGHT_MCP_SETTING, raising=False)
    return tmp_path


def test_search_order(nowhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Explicit setting, the checkout's node_modules, the current folder's, the user cache (pinned versions only)."""
    with pytest.raises(ConfigError, match=r"@playwright/mcp is not installed: run `aworld-gym setup browser`"):
        playwright.playwright_mcp_cli()
    pins = node.pinned_versions()
    cache = fake_install(nowhere / "home" / "node", {**pins, "playwright-core": "0.0.1"})
    with pytest.raises(ConfigError) as err:  # the cache holds other versions: setup again, saying which
        playwright.playwright_mcp_cli()
    assert "aworld-gym setup browser" in str(err.value) and "playwright-core" not in str(err.value)
    cache = fake_install(nowhere / "home" / "node", pins)
    assert playwright.playwright_mcp_cli() == str(cache)
    cwd = fake_install(nowhere / "cwd", {})
    assert playwright.playwright_mcp_cli() == str(Path.cwd() / "node_modules/@playwright/mcp/cli.js") == str(cwd)
    checkout = fake_install(nowhere / "checkout", {})
    assert playwright.playwright_mcp_cli() == str(checkout)
    explicit = nowhere / "explicit.js"
    explicit.write_text("")
    monkeypatch.setenv(playwright.PLAYWRIGHT_MCP_SETTING, str(explicit))
    assert playwright.playwright_mcp_cli() == str(explicit)
    monkeypatch.setenv(playwright.PLAYWRIGHT_MCP_SETTING, str(nowhere / "gone.js"))
    with pytest.raises(ConfigError, match=r"AWORLD_GYM_PLAYWRIGHT_MCP=.*does not exist"):
        playwright.playwright_mcp_cli()


def test_stale_cache_names_both_versions(nowhere: Path) -> None:
    fake_install(nowhere / "home" / "node", {"@playwright/mcp": "0.0.1"})
    message = node.missing_message("@playwright/mcp", playwright.PLAYWRIGHT_MCP_SETTING)
    want = node.pinned_versions()["@playwright/mcp"]
    assert f"holds @playwright/mcp 0.0.1, this aworld-gym pins {want}: run `aworld-gym setup browser`" in message


def test_setup_says_what_is_missing_and_exits_1(nowhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWORLD_GYM_CHROMIUM", str(nowhere / "no-chromium"))
    real_which = setup_tools.shutil.which
    monkeypatch.setattr(setup_tools.shutil, "which", lambda name: None if name == "bwrap" else real_which(name))
    lines: list[str] = []
    assert setup_tools.setup(["browser", "code"], install=False, out=lines.append) == 1
    text = "\n".join(lines)
    assert "missing  node servers   not installed in" in text
    assert "missing  bubblewrap     bwrap is not installed" in text
    sudo = "" if setup_tools.os.geteuid() == 0 else "sudo "
    assert (
        f"to install what is missing:\n  {sudo}apt-get install -y chromium bubblewrap\n  aworld-gym setup browser"
        in text
    )
    assert "ready:" not in text


def test_setup_skips_what_is_installed(nowhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pinned versions present: npm is not run; the miniwob pages are installed with pip --no-deps when missing."""
    fake_install(nowhere / "home" / "node", node.pinned_versions())

    def no_npm(*args: object) -> None:
        raise AssertionError("npm ran although the pinned versions are present")

    def no_pages() -> Path:
        raise ConfigError("no miniwob")

    ran: list[list[str]] = []
    monkeypatch.setattr(setup_tools, "install_node_servers", no_npm)
    monkeypatch.setattr("aworld_gym.envs.browser.tasks.miniwob_html_dir", no_pages)
    monkeypatch.setattr(setup_tools, "_run", lambda argv, timeout=30.0: ran.append(argv) or _Done())
    assert setup_tools.check_node_servers(install=True).detail.startswith("pinned versions present in")
    pages = setup_tools.check_miniwob(install=True)
    assert pages.ok and ran[-1][-4:] == ["install", "-q", "--no-deps", "miniwob==1.1.0"]


class _Done:
    returncode = 0
    stdout = stderr = ""
