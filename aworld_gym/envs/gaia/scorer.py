"""GAIA's answer scorer, written from the benchmark's published scoring rules (quasi-exact match).

A GAIA ground truth is a number, a comma/semicolon-separated list, or a string, and the answer is compared
accordingly by :func:`question_scorer`:

1. **Number** -- the ground truth parses with ``float()`` (:func:`is_float`). The answer has every ``$``, ``%``
   and ``,`` removed and is parsed with ``float()`` (:func:`normalize_number_str`); the two floats must be
   equal. An answer that does not parse becomes ``inf``.
2. **List** -- otherwise, the ground truth contains ``,`` or ``;``. Both ground truth and answer are split on
   ``,`` and ``;`` (:func:`split_string`); lists of different lengths score ``False``. Element by element, a
   numeric ground-truth element is compared as in rule 1, any other element as a string with all whitespace
   removed and lower-cased, punctuation *kept* (``normalize_str(..., remove_punct=False)``). Every element must
   match.
3. **String** -- otherwise, both sides have all whitespace removed, are lower-cased and have every ASCII
   punctuation character (``string.punctuation``) removed (:func:`normalize_str`), and must be equal.

An answer of ``None`` is scored as the string ``"None"``; any other non-string answer or ground truth is
coerced with ``str()``, so the scorer never raises on its inputs.

Known quirks, kept as the published rules have them (on purpose: scores stay comparable with GAIA's):

- ``"1,000"`` as a ground truth is not a number (``float("1,000")`` fails) but a *list* of two elements,
  ``"1"`` and ``"000"``: the answer ``"1,000"`` matches (1 == 1, 0 == 0) while ``"1000"`` does not (one
  element against two). Commas in the *answer* are fine when the ground truth is a number: ``"1,000"`` against
  ``"1000"`` scores ``True``.
- Numbers compare exactly after ``float()``: ``"3.0"`` matches ``"3"``, ``"1e3"`` matches ``"1000"``, but
  ``"0.30000000000000004"`` does not match ``"0.3"``, and there is no rounding tolerance.
- ``float()`` is lenient: it accepts surrounding whitespace, ``_`` digit separators (``"1_000"``),
  exponents, non-ASCII decimal digits, and the words ``inf``/``infinity``/``nan`` in any case.
- A percent or currency ground truth such as ``"17%"`` or ``"$5"`` is not :func:`is_float`, so it is
  compared as a string with punctuation removed: ``"17%"`` matches ``"17"`` and ``"17 %"``, but ``"17.0"``
  does not (``"170"`` != ``"17"``).
- Removing the ``$``/``%``/``,`` characters happens anywhere in the answer, so ``"1,2,3"`` against the
  numeric ground truth ``"123"`` scores ``True``; extra words (``"17 apples"``) make it unparseable.
- An unparseable answer becomes ``inf``, so a ground truth of ``"inf"`` (or ``"infinity"``) matches *any*
  non-numeric answer, and a ground truth of ``"nan"`` matches nothing (``nan != nan``).
- Punctuation is removed only in the string rule, and only ASCII punctuation: ``"Paris."`` matches
  ``"paris"``, but inside a list ``"St. Louis"`` does not match ``"St Louis"``; ``"¿"``, ``"–"`` (en dash) or
  curly quotes are never removed. There is no accent folding (``"São Paulo"`` does not match ``"Sao Paulo"``).
- Since all whitespace is removed, word boundaries do not count: ``"New York"`` matches ``"newyork"``. An
  empty ground truth matches an empty answer, or one made only of whitespace and punctuation.
- A ground truth containing ``,`` or ``;`` inside a single value (``"Washington, D.C."``) is still split as
  a list, so the answer must contain the same separators.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Any

__all__ = ["is_float", "normalize_number_str", "normalize_str", "question_scorer", "score", "split_string"]

_NUMBER_NOISE = ("$", "%", ",")
_LIST_SEPARATORS = (",", ";")
_WHITESPACE_RE = re.compile(r"\s")
_PUNCT_TABLE = str.maketrans("", "", string.punctuation)


def _as_str(value: Any) -> str:
    """Coerce an answer or ground truth to a string; ``None`` becomes ``"None"``."""
    return value if isinstance(value, str) else str(value)


def is_float(x: Any) -> bool:
    """Whether ``float(x)`` succeeds.

    Args:
        x: anything; strings such as ``"3"``, ``" 2.5 "``, ``"1e3"`` and ``"inf"`` are floats, ``"1,000"``,
            ``"17%"`` and ``None`` are not.

    Returns:
        ``True`` if ``x`` converts to a float, else ``False`` (never raises).
    """
    try:
        float(x)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def normalize_number_str(s: str) -> float:
    """Parse an answer as a number after removing every ``$``, ``%`` and ``,``.

    Args:
        s: the answer text (a non-string is coerced with ``str()``).

    Returns:
        The parsed float, or ``float("inf")`` when the text still does not parse.
    """
    text = _as_str(s)
    for char in _NUMBER_NOISE:
        text = text.replace(char, "")
    try:
        return float(text)
    except ValueError:
        return float("inf")


def split_string(s: str, char_list: Sequence[str] = _LIST_SEPARATORS) -> list[str]:
    """Split a string on every one of the given separator characters.

    Args:
        s: the text to split (a non-string is coerced with ``str()``).
        char_list: the separators, ``,`` and ``;`` by default.

    Returns:
        The pieces, unstripped and including empty ones (``"a,,b"`` gives ``["a", "", "b"]``).
    """
    text = _as_str(s)
    if not char_list:
        return [text]
    pattern = "|".join(re.escape(char) for char in char_list)
    return re.split(pattern, text)


def normalize_str(s: str, remove_punct: bool = True) -> str:
    """Remove all whitespace, lower-case, and optionally remove ASCII punctuation.

    Args:
        s: the text (a non-string is coerced with ``str()``).
        remove_punct: also remove every character of ``string.punctuation``.

    Returns:
        The normalized text.
    """
    text = _WHITESPACE_RE.sub("", _as_str(s)).lower()
    if remove_punct:
        text = text.translate(_PUNCT_TABLE)
    return text


def question_scorer(model_answer: str | None, ground_truth: str) -> bool:
    """Score an answer against a GAIA ground truth with the official rules (see the module docstring).

    Args:
        model_answer: the model's final answer; ``None`` is scored as ``"None"``, other non-strings are
            coerced with ``str()``.
        ground_truth: the expected answer (a non-string is coerced with ``str()``).

    Returns:
        ``True`` when the answer matches.
    """
    answer = _as_str(model_answer)
    truth = _as_str(ground_truth)

    if is_float(truth):
        return normalize_number_str(answer) == float(truth)

    if any(char in truth for char in _LIST_SEPARATORS):
        truth_elems = split_string(truth)
        answer_elems = split_string(answer)
        if len(truth_elems) != len(answer_elems):
            return False
        for answer_elem, truth_elem in zip(answer_elems, truth_elems, strict=True):
            if is_float(truth_elem):
                if normalize_number_str(answer_elem) != float(truth_elem):
                    return False
            elif normalize_str(answer_elem, remove_punct=False) != normalize_str(truth_elem, remove_punct=False):
                return False
        return True

    return normalize_str(answer) == normalize_str(truth)


def score(model_answer: str | None, ground_truth: str) -> float:
    """:func:`question_scorer` as a reward.

    Args:
        model_answer: the model's final answer (``None`` allowed).
        ground_truth: the expected answer.

    Returns:
        ``1.0`` for a match, else ``0.0``.
    """
    return 1.0 if question_scorer(model_answer, ground_truth) else 0.0
