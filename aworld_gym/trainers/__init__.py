"""Trainer adapters (TRL, verl, RLlib) and training helpers; each imports its framework lazily."""

from __future__ import annotations

from pathlib import Path


def recipes_dir() -> Path:
    """The folder of the bundled training recipes (YAML)."""
    return Path(__file__).with_name("recipes")
