"""Shared fixtures of the trainer tests."""

import pytest


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """The tiny offline Qwen3 (built once per run; tests that train load their own copy of the weights)."""
    from aworld_gym.fixtures.tiny_qwen3 import build_tiny_qwen3

    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny") / "qwen3")
