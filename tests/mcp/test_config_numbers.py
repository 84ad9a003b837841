"""Invalid numbers in configs are refused at load (issue 44): ``"timeout": NaN`` was accepted (NaN compares false
with every bound) and abandoned every call at once. Every numeric field of an ``mcp_config`` entry, of a sampling
endpoint and of the hub refuses NaN, infinities, 0, negatives, booleans, strings and huge values with a
:class:`ConfigError` naming the server and the field."""

from __future__ import annotations

import math

import pytest

from aworld_gym.base.errors import ConfigError
from aworld_gym.mcp.config import MAX_SECONDS, parse_mcp_config
from aworld_gym.mcp.hub import ToolHub
from aworld_gym.mcp.options import ToolOptions

BAD_SECONDS = [math.nan, math.inf, -math.inf, 0, 0.0, -1, -0.5, True, False, "30", None, [], 10**400, 1e300]
NAN_JSON = '{"mcpServers": {"srv": {"command": "python", "timeout": NaN}}}'  # Python's json reads NaN


def entry(kind: str, **extra: object) -> dict:
    base = {"stdio": {"command": "python"}, "streamable-http": {"type": "streamable-http", "url": "http://h/mcp"},
            "sse": {"type": "sse", "url": "http://h/sse"}}[kind]  # fmt: skip
    return {"mcpServers": {"srv": {**base, **extra}}}


@pytest.mark.parametrize("value", BAD_SECONDS, ids=repr)
@pytest.mark.parametrize(("kind", "key"), [("stdio", "timeout"), ("streamable-http", "timeout"),
                                           ("streamable-http", "sse_read_timeout"), ("sse", "sse_read_timeout")])  # fmt: skip
def test_a_bad_number_of_seconds_is_refused_naming_server_and_field(kind, key, value):
    if value is None:  # absent means the default: the one value of the list that is fine
        assert getattr(parse_mcp_config(entry(kind, **{key: value}))[0], key) is None
        return
    with pytest.raises(ConfigError) as err:
        parse_mcp_config(entry(kind, **{key: value}))
    text = str(err.value)
    assert "mcpServers['srv']" in text and repr(key) in text and "positive number of seconds" in text
    assert len(text) < 200  # a 400-digit number is not echoed whole


def test_nan_from_json_text_is_refused():
    with pytest.raises(ConfigError, match=r"mcpServers\['srv'\]: 'timeout' must be a positive number .* got nan"):
        parse_mcp_config(NAN_JSON)


@pytest.mark.parametrize("value", [0.001, 1, 600, MAX_SECONDS])
def test_good_numbers_are_kept(value):
    (spec,) = parse_mcp_config(entry("streamable-http", timeout=value, sse_read_timeout=value))
    assert spec.timeout == spec.sse_read_timeout == float(value)


@pytest.mark.parametrize("value", [math.nan, math.inf, 0, -3, "120", True])
def test_sampling_timeout_is_checked(value):
    sampling = {"base_url": "http://127.0.0.1:9/v1", "model": "m", "timeout_s": value}
    with pytest.raises(ConfigError, match=r"mcpServers\['srv'\].*sampling's timeout_s must be a positive number"):
        ToolHub(entry("stdio", sampling=sampling))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"timeout": math.nan}, "timeout"), ({"timeout": math.inf}, "timeout"),
     ({"timeout": -1}, "timeout"), ({"max_argument_depth": math.nan}, "max_argument_depth"),
     ({"max_argument_depth": 0}, "max_argument_depth"), ({"max_argument_chars": 2.5}, "max_argument_chars"),
     ({"max_output_chars": -10}, "max_output_chars"), ({"max_output_chars": True}, "max_output_chars")],
)  # fmt: skip
def test_hub_numbers_are_checked(kwargs, field):
    with pytest.raises(ConfigError, match=rf"ToolOptions: {field}"):
        ToolOptions(**kwargs)
