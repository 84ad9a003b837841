"""The library in a user's own project: the built wheel in a fresh venv outside the checkout, ``aworld-gym setup``,
then every env resets and steps from that venv.

The venv gets the wheel's dependencies (its extras included, resolved from the wheel's requirements, transitively)
copied from this test's venv, the same versions, with no download (this test's venv is never written to), then the
wheel with pip; ``pip check`` there proves every requirement met, and an import the wheel does not declare fails
in it. So does a file the wheel does not ship. Everything runs with the new venv's Python from a folder outside the
checkout, without ``PYTHONPATH``. ``setup`` installs the pinned Node servers from the npm registry (npm's own cache
makes it a second or two).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from importlib.metadata import Distribution, distribution
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = "code,gaia,browser"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.node,
    pytest.mark.skipif(
        shutil.which("npm") is None or shutil.which("chromium") is None, reason="needs npm and chromium"
    ),
]

# Beside the wheel's requirements: pip (for pip check) and the MiniWoB++ pages, which `aworld-gym setup browser`
# installs with pip --no-deps when they are missing (here they are copied, so that PyPI is not reached).
ALSO = ("pip", "miniwob")


def requirement_closure(extras: str) -> list[Distribution]:
    """The installed distributions the wheel needs with ``extras``, transitively (markers and extras evaluated)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = [Requirement(r) for r in project["dependencies"]]
    todo += [Requirement(r) for e in extras.split(",") for r in project["optional-dependencies"][e]]
    todo += [Requirement(name) for name in ALSO]
    found: dict[str, tuple[Distribution, set[str]]] = {}
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in found and set(req.extras) <= found[name][1]:
            continue
        dist = found[name][0] if name in found else distribution(req.name)
        wanted = set(req.extras) | (found[name][1] if name in found else set())
        found[name] = (dist, wanted)
        for line in [] if name in ALSO else dist.requires or []:
            dep = Requirement(line)
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in (*wanted, "")):
                todo.append(dep)
    return [dist for dist, _ in found.values()]


def copy_installed(dists: list[Distribution], site: Path) -> None:
    """Copy each distribution's files (its RECORD: code and dist-info, not its scripts or caches) into ``site``."""
    for dist in dists:
        for file in dist.files or []:
            if file.parts[0] == ".." or "__pycache__" in file.parts:
                continue
            target = site / file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(dist.locate_file(file), target)


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """A wheel built from a copy of the sources (no build/ or egg-info in the checkout), installed in a new venv
    (about 200 MB, removed afterwards)."""
    tmp = tmp_path_factory.mktemp("wheel")
    times: dict[str, float] = {}
    start = time.monotonic()
    src = tmp / "src"
    shutil.copytree(ROOT / "aworld_gym", src / "aworld_gym", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    build = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                 str(tmp / "dist"), str(src)], tmp, dict(os.environ))  # fmt: skip
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp / "dist").glob("aworld_gym-*.whl")
    times["build"] = time.monotonic() - start

    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp, {}).stdout.strip()
    copy_installed(requirement_closure(EXTRAS), Path(site))
    env = {"PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "HOME": os.environ.get("HOME", str(tmp)),
           "AWORLD_GYM_HOME": str(tmp / "home"), "AWORLD_GYM_DATA": str(tmp / "data"), "LANG": "C.UTF-8"}  # fmt: skip
    project = tmp / "project"  # the user's own project: outside the checkout, no node_modules
    project.mkdir()
    install = run([str(python), "-m", "pip", "install", "-q", "--no-index", f"{wheel}[{EXTRAS}]"], project, env)
    assert install.returncode == 0, install.stderr
    times["venv+install"] = time.monotonic() - start - times["build"]
    yield {"tmp": tmp, "wheel": wheel, "python": python, "site": Path(site), "env": env, "project": project,
            "times": times}  # fmt: skip
    shutil.rmtree(venv, ignore_errors=True)


def test_wheel_ships_the_runtime_files(wheel_venv: dict) -> None:
    """What the envs read at run time besides Python, in the installed wheel (not found through the checkout)."""
    pkg = wheel_venv["site"] / "aworld_gym"
    for rel in ("base/node_pins/package.json", "base/node_pins/package-lock.json", "envs/browser/listen_unix.js",
                "sandbox/zygote/aworld_zygote.py", "report/viewer.js", "report/template.html",
                "trainers/recipes/qwen3_32b_grpo_trl.yaml"):  # fmt: skip
        assert (pkg / rel).is_file(), rel
    script = wheel_venv["site"].parents[2] / "bin" / "aworld-gym"
    assert script.read_text().startswith(f"#!{wheel_venv['python']}")


def test_requirements_are_met(wheel_venv: dict) -> None:
    """pip check in the new venv: every distribution's requirements met (the wheel's too, with --no-index above),
    but miniwob's (selenium, gymnasium>=1.2.3): it is installed with --no-deps, only its pages are used."""
    check = run([str(wheel_venv["python"]), "-m", "pip", "check"], wheel_venv["project"], wheel_venv["env"])
    broken = [line for line in check.stdout.splitlines() if not line.startswith("miniwob 1.1.0 ")]
    assert broken in ([], ["No broken requirements found."]), check.stdout + check.stderr


def test_setup_then_every_env_resets_and_steps(wheel_venv: dict, record_property) -> None:
    tmp, python, env, project = wheel_venv["tmp"], wheel_venv["python"], wheel_venv["env"], wheel_venv["project"]
    cli = str(python.parent / "aworld-gym")
    home = Path(env["AWORLD_GYM_HOME"])

    # before setup: Browser-v0 says what to run, in one line, not a traceback
    start = time.monotonic()
    before = run([cli, "rollout", "--env", "AWorld/Browser-v0", "--episodes", "1", "--no-progress",
                  "--out", str(tmp / "before.jsonl")], project, env)  # fmt: skip
    assert before.returncode != 0
    assert "aworld-gym setup browser" in before.stderr + before.stdout and "Traceback" not in before.stderr
    before_s = time.monotonic() - start

    t0 = time.monotonic()
    setup = run([cli, "setup", "all"], project, env, timeout=900)
    setup_s = time.monotonic() - t0
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert f"installed in {home / 'node'}" in setup.stdout and "ready: browser, code, gaia" in setup.stdout
    again = run([cli, "setup", "browser"], project, env)
    assert again.returncode == 0 and f"pinned versions present in {home / 'node'}" in again.stdout, again.stdout

    shutil.copy(ROOT / "tests" / "wheel_episodes.py", project / "wheel_episodes.py")
    t0 = time.monotonic()
    episodes = run([str(python), "wheel_episodes.py"], project, env, timeout=600)
    episodes_s = time.monotonic() - t0
    assert episodes.returncode == 0, episodes.stderr[-3000:]
    out = json.loads(episodes.stdout.strip().splitlines()[-1])
    assert Path(out["aworld_gym"]).is_relative_to(wheel_venv["site"]), out["aworld_gym"]  # the wheel, not the checkout
    assert not Path(out["aworld_gym"]).is_relative_to(ROOT)
    assert Path(out["playwright_mcp"]).is_relative_to(home / "node" / "node_modules"), out["playwright_mcp"]
    firsts = {"AWorld/MCP-v0": "What is 2 + 1?", "AWorld/Code-v0": "def has_close_elements(",
              "AWorld/GAIA-v0": "sales_2023.xlsx", "AWorld/Browser-v0": 'button "Submit" [ref='}  # fmt: skip
    for env_id, text in firsts.items():
        got = out[env_id]
        assert text in got["obs"], (env_id, got["obs"])
        assert got["tools"] and got["steps"] >= 1 and got["terminated"] is True, (env_id, got)
        assert (got["reward"], got["score"]) == (1.0, 1.0), (env_id, got)
    times = {**wheel_venv["times"], "error before setup": before_s, "setup all": setup_s, "four episodes": episodes_s}
    record_property("times", times)
    print(json.dumps({k: round(v, 1) for k, v in times.items()}))
