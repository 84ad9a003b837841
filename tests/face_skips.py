"""Trainer faces whose tests skipped because the trainer's package is missing: listed at the end of the run
(``pytest_terminal_summary`` in tests/conftest.py), and a failure of the run for the faces named in
``AWORLD_GYM_REQUIRE_FACES`` (``make test`` names, for each of its pytest runs, the faces that ``make`` installs in
that run's venv).

A skip belongs to a face when its reason is ``pytest.importorskip``'s for a module of the face's trainer package
(``could not import 'areal.api.workflow_api': ...``), or says it needs the venv that holds the face's client
(``needs .venv-swift ...``: OpenEnv's client lives there). Any other skip is not a face's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

REQUIRE_VAR = "AWORLD_GYM_REQUIRE_FACES"


@dataclass(frozen=True)
class Face:
    """A trainer face: the top-level package its tests import, and what skips name when its client is out of reach."""

    package: str
    installed_by: str  # where `make` installs it, or why it does not
    venv: str | None = None


FACES: dict[str, Face] = {
    "trl": Face("trl", "make (.venv)"),
    "rllib": Face("ray", "make (.venv, ray[rllib])"),
    "skyrl": Face("skyrl_gym", "make (.venv)"),
    "openrlhf": Face("openrlhf", "make (.venv, --no-deps)"),
    "areal": Face("areal", "make (.venv, --no-deps)"),
    "openenv": Face("openenv", "make (.venv-swift, openenv-core)", venv=".venv-swift"),
    "verl": Face("verl", "make (.venv-verl)"),
    "swift": Face("swift", "make (.venv-swift, ms-swift)"),
    "slime": Face("slime", "not installed by make (no CPU install)"),
}

IMPORT_SKIP = re.compile(r"could not import '([\w.]+)'")  # pytest.importorskip's reason


def face_of(reason: str) -> str | None:
    """The face a skip's reason says is missing, or None for a skip that is no face's."""
    m = IMPORT_SKIP.match(reason)
    if m:
        top = m.group(1).split(".")[0]
        return next((name for name, face in FACES.items() if face.package == top), None)
    return next((name for name, face in FACES.items() if face.venv and reason.startswith(f"needs {face.venv}")), None)


def face_skips(skips: list[tuple[str, str]]) -> dict[str, list[tuple[str, str]]]:
    """The (node id, reason) skips of a run grouped by the face they belong to; faces without skips are left out."""
    out: dict[str, list[tuple[str, str]]] = {}
    for nodeid, reason in skips:
        face = face_of(reason)
        if face is not None:
            out.setdefault(face, []).append((nodeid, reason))
    return out


def required_faces(environ: Mapping[str, str] = os.environ) -> set[str]:
    """The faces that must not skip in this run (``AWORLD_GYM_REQUIRE_FACES``, comma-separated). An unknown name is
    an error, so a typo cannot switch the check off."""
    names = {n.strip() for n in environ.get(REQUIRE_VAR, "").split(",") if n.strip()}
    unknown = names - FACES.keys()
    if unknown:
        raise ValueError(f"{REQUIRE_VAR} names unknown faces {sorted(unknown)}; the faces are {sorted(FACES)}")
    return names
