"""Spaces for text actions and observations."""

from __future__ import annotations

from collections.abc import Sequence
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


# ----- shared memory for AsyncVectorEnv (gym.make_vec(..., vectorization_mode="async")) ----------------------
# Gymnasium stores Text in shared memory as indices into its charset, which cannot hold arbitrary Unicode. Here a
# UnicodeText slot is (length, code points...) as int32, so async vector envs work with the default shared memory.
class SharedTextView(Sequence[str]):
    """A live view of the strings in shared memory (like the numpy views Gymnasium returns for arrays).

    ``AsyncVectorEnv`` reads its shared memory once and returns that object after every step, so strings need a view
    that decodes on access; ``copy.deepcopy`` (what ``copy=True`` does) gives a plain tuple of ``str``.
    """

    def __init__(self, data: np.ndarray) -> None:
        self._data = data

    def __len__(self) -> int:
        return len(self._data)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return tuple(self)[i]
        row = self._data[i]
        return row[1 : 1 + int(row[0])].astype("<u4").tobytes().decode("utf-32-le", errors="surrogatepass")

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))


def _register_shared_memory() -> None:
    import multiprocessing as mp

    from gymnasium.vector.utils import shared_memory as sm

    @sm.create_shared_memory.register(UnicodeText)
    def _create(space: UnicodeText, n: int = 1, ctx: Any = mp) -> Any:
        return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))

    @sm.read_from_shared_memory.register(UnicodeText)
    def _read(space: UnicodeText, shared_memory: Any, n: int = 1) -> SharedTextView:
        data = np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape((n, space.max_length + 1))
        return SharedTextView(data)

    @sm.write_to_shared_memory.register(UnicodeText)
    def _write(space: UnicodeText, index: int, value: str, shared_memory: Any) -> None:
        size = space.max_length + 1
        dest = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)
        codes = np.frombuffer(value.encode("utf-32-le", errors="surrogatepass"), dtype=np.int32)
        dest[index * size] = len(codes)
        dest[index * size + 1 : index * size + 1 + len(codes)] = codes


_register_shared_memory()
