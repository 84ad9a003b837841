"""GAIA's answer scorer: the number, list and string rules, their documented quirks, and the helpers."""

import math

import pytest

from aworld_gym.envs.gaia.scorer import (
    is_float,
    normalize_number_str,
    normalize_str,
    question_scorer,
    score,
    split_string,
)

# --- rule 1: numeric ground truth ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "truth", "expected"),
    [
        ("$1,234.50", "1234.5", True),  # $ and , are removed from the answer
        ("17%", "17", True),  # % is removed from the answer
        ("17 apples", "17", False),  # extra words: unparseable -> inf
        ("3.0", "3", True),  # exact float equality after float()
        ("3", "3.0", True),
        (" 42 ", "42", True),  # float() tolerates surrounding whitespace
        ("1e3", "1000", True),
        ("", "0", False),  # empty answer -> inf, not 0
        ("3.1", "3", False),
        ("0.30000000000000004", "0.3", False),  # no tolerance
        ("-5", "5", False),
        ("1,2,3", "123", True),  # commas anywhere in the answer are dropped
    ],
)
def test_numeric_ground_truth(answer, truth, expected):
    assert question_scorer(answer, truth) is expected


@pytest.mark.parametrize(("answer", "expected"), [(None, False), ("None", False)])
def test_none_answer_is_the_string_none(answer, expected):
    assert question_scorer(answer, "0") is expected
    assert question_scorer(answer, "none") is True  # string rule: "None" normalizes to "none"
    assert question_scorer(answer, "a, b") is False  # list rule: one element against two


def test_non_string_inputs_are_coerced():
    assert question_scorer(17, "17") is True
    assert question_scorer(17.0, 17) is True
    assert question_scorer(["x"], "x") is True  # str(["x"]) is "['x']", whose brackets and quotes are punctuation
    assert question_scorer(3, "4") is False


@pytest.mark.parametrize(
    ("answer", "truth", "expected"),
    [
        ("anything", "inf", True),  # an unparseable answer becomes inf
        ("inf", "inf", True),
        ("nan", "nan", False),  # nan != nan
        ("42", "nan", False),
    ],
)
def test_special_float_ground_truths(answer, truth, expected):
    assert question_scorer(answer, truth) is expected


# --- rule 2: list ground truth ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "truth", "expected"),
    [
        ("a, b; c", "a,b,c", True),  # both separators, whitespace ignored
        ("a; b; c", "a, b, c", True),
        ("a, b", "a, b, c", False),  # different lengths
        ("a, b, c, d", "a, b, c", False),
        ("a b c", "a, b, c", False),  # no separators: one element
        ("1, 2", "1.0,2", True),  # numeric elements compare as floats
        ("$1, 2%", "1,2", True),  # ... with $ % removed
        ("1, 3", "1,2", False),
        ("New York, Paris", "new york,paris", True),  # case and whitespace
        ("Paris, New York", "new york,paris", False),  # order matters
        ("St. Louis, Paris", "St Louis, Paris", False),  # punctuation kept in list elements
        ("St. Louis, Paris", "St. Louis, Paris", True),
        ("a, b.", "a, b", False),
    ],
)
def test_list_ground_truth(answer, truth, expected):
    assert question_scorer(answer, truth) is expected


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("1,000", True),  # "1"/"000" against "1"/"000"
        ("1000", False),  # one element against two
        ("1, 0", True),  # 0 == float("000")
    ],
)
def test_thousands_separator_ground_truth_is_a_list(answer, expected):
    assert question_scorer(answer, "1,000") is expected


def test_comma_inside_a_single_value_is_still_a_list():
    assert question_scorer("Washington, D.C.", "Washington, D.C.") is True
    assert question_scorer("Washington DC", "Washington, D.C.") is False


# --- rule 3: string ground truth -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "truth", "expected"),
    [
        ("Paris.", "paris", True),  # punctuation removed
        ('"Paris!"', "PARIS", True),
        ("New York", "newyork", True),  # all whitespace removed
        ("New\tYork\n", "new york", True),
        ("London", "Paris", False),
        ("Pari", "Paris", False),
        ("17%", "17%", True),
        ("17", "17%", True),  # "17%" is not a float: string rule, % removed
        ("17.0", "17%", False),  # "170" != "17"
        ("Zürich", "ZÜRICH", True),  # unicode lower-casing
        ("São Paulo", "Sao Paulo", False),  # no accent folding
        ("¿Qué?", "qué", False),  # only ASCII punctuation is removed
        ("en–dash", "endash", False),
        ("New\u00a0York", "newyork", True),  # \s covers unicode whitespace
        ("", "", True),
        ("...", "", True),  # only punctuation -> empty
        ("x", "", False),
    ],
)
def test_string_ground_truth(answer, truth, expected):
    assert question_scorer(answer, truth) is expected


@pytest.mark.parametrize(("answer", "truth", "expected"), [("Paris.", "paris", 1.0), ("London", "paris", 0.0)])
def test_score_is_a_float_reward(answer, truth, expected):
    result = score(answer, truth)
    assert isinstance(result, float)
    assert result == expected


# --- helpers ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$1,234.50", 1234.5),
        ("17%", 17.0),
        (" -2.5 ", -2.5),
        ("1_000", 1000.0),
        ("17 apples", math.inf),
        ("", math.inf),
        ("1.2.3", math.inf),
    ],
)
def test_normalize_number_str(text, expected):
    assert normalize_number_str(text) == expected


def test_normalize_number_str_coerces_non_strings():
    assert normalize_number_str(None) == math.inf
    assert normalize_number_str(5) == 5.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a,b;c", ["a", "b", "c"]),
        ("a, b", ["a", " b"]),  # pieces are not stripped
        ("a,,b", ["a", "", "b"]),
        ("abc", ["abc"]),
        ("", [""]),
    ],
)
def test_split_string(text, expected):
    assert split_string(text) == expected


def test_split_string_custom_separators():
    assert split_string("a|b,c", char_list=("|",)) == ["a", "b,c"]
    assert split_string("a.b^c", char_list=("^", ".")) == ["a", "b", "c"]  # regex metacharacters are literal


@pytest.mark.parametrize(
    ("text", "remove_punct", "expected"),
    [
        (" New York. ", True, "newyork"),
        (" New York. ", False, "newyork."),
        ("St. Louis!", True, "stlouis"),
        ("A\tB\nC", True, "abc"),
        ("¿Qué?", True, "¿qué"),
    ],
)
def test_normalize_str(text, remove_punct, expected):
    assert normalize_str(text, remove_punct=remove_punct) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("3", True),
        (" 2.5 ", True),
        ("1e3", True),
        ("inf", True),
        (3, True),
        ("1,000", False),
        ("17%", False),
        ("", False),
        (None, False),
        (10**400, False),  # OverflowError
    ],
)
def test_is_float(value, expected):
    assert is_float(value) is expected
