"""Spaces for text actions and observations."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.spaces import Text

# Printable sample alphabet: ASCII letters, digits, punctuation, space, newline and some non-ASCII letters.
_SAMPLE_ALPHABET = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    " \n\t!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~éüßçñ中文日本語Ωπ"
)


class UnicodeText(Text):
    """A ``Text`` space that accepts any Unicode string up to ``max_length`` characters.

    Gymnasium's ``Text`` only contains strings over its charset (alphanumerics by default), which would
    reject almost every model output. Membership here is: a ``str`` of length ``min_length..max_length``.
    Sampling draws from a printable alphabet (it is only used by ``check_env`` and random policies).
    """

    def __init__(self, max_length: int = 1_000_000, *, min_length: int = 0, seed: Any = None) -> None:
        super().__init__(max_length=max_length, min_length=min_length, charset=_SAMPLE_ALPHABET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is not None or probability is not None:
            return super().sample(mask=mask, probability=probability)
        length = int(self.np_random.integers(self.min_length, min(self.max_length, 64) + 1))
        idx = self.np_random.integers(0, len(_SAMPLE_ALPHABET), size=length)
        return "".join(_SAMPLE_ALPHABET[i] for i in np.asarray(idx))

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.min_length, self.max_length))
