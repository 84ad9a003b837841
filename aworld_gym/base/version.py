"""The package's version, in the bottom layer so that every layer (servers included) can report it."""

__version__ = "0.2.0"  # keep equal to pyproject.toml's version (tests/test_exports.py checks)
