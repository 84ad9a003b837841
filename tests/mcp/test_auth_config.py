"""The ``"auth"`` object's checks, and secrets kept out of config errors, reprs and env-making errors (no server)."""

from __future__ import annotations

import pytest

from aworld_gym.base.errors import ConfigError, ServerError
from aworld_gym.mcp.config import parse_mcp_config
from aworld_gym.mcp.hub import ToolHub

SECRET = "S3cret-client-value-91f2"


def test_config_errors_are_clear_and_never_echo_a_secret(monkeypatch):
    def error(auth, **entry) -> str:
        server = {"type": "streamable-http", "url": "http://127.0.0.1:1/mcp", "auth": auth, **entry}
        with pytest.raises(ConfigError) as info:
            parse_mcp_config({"mcpServers": {"s": server}})
        assert SECRET not in str(info.value)
        return str(info.value)

    assert "unknown keys ['password']" in error({"password": SECRET})
    assert "'grant' must be one of" in error({"grant": "password"})
    assert "needs a pre-registered 'client_id'" in error({"grant": "client_credentials"})
    assert "goes with the 'client_id'" in error({"grant": "client_credentials", "client_secret": SECRET})
    assert "private_key_jwt needs a 'private_key'" in error({"client_id": "c", "token_endpoint_auth_method":
                                                             "private_key_jwt"})  # fmt: skip
    assert "'client_secret' must be a string" in error({"client_id": "c", "client_secret": [SECRET]})
    assert "not both" in error({"client_id": "c"}, headers={"Authorization": "Bearer " + SECRET})
    assert "https URL with a path" in error({"client_metadata_url": "http://x.example/m.json"})
    with pytest.raises(ConfigError, match="for HTTP servers"):
        parse_mcp_config({"mcpServers": {"s": {"command": "python", "auth": {}}}})
    monkeypatch.delenv("NO_SUCH_SECRET", raising=False)
    config = {"mcpServers": {"s": {"type": "streamable-http", "url": "http://127.0.0.1:1/mcp",
                                   "auth": {"client_id": "c", "client_secret": {"env": "NO_SUCH_SECRET"}}}}}  # fmt: skip
    with pytest.raises(ServerError, match="environment variable NO_SUCH_SECRET is not set"):
        ToolHub(config).start()


def test_env_kwargs_are_redacted_from_make_errors_and_reprs():
    from aworld_gym.rollout.envs import MakeEnv

    server = {"type": "streamable-http", "url": "http://127.0.0.1:1/mcp", "headers": {"X-Key": "hdr-" + SECRET},
              "auth": {"client_id": "c", "client_secret": SECRET}}  # fmt: skip
    make = MakeEnv.of("AWorld/MCP-v0", {"mcp_config": {"mcpServers": {"s": server}}, "tasks": [{"id": "t", "prompt": "p"}],
                                        "no_such_option": 1})  # fmt: skip
    assert SECRET not in repr(make)
    with pytest.raises(ConfigError) as info:
        make()  # the env names the unknown keyword and repeats no value
    assert "unknown keyword 'no_such_option'" in str(info.value) and SECRET not in str(info.value)


def test_sampling_api_keys_are_redacted_from_make_errors():
    from aworld_gym.rollout.envs import MakeEnv

    server = {"type": "streamable-http", "url": "http://127.0.0.1:1/mcp",
              "sampling": {"base_url": "http://127.0.0.1:1/v1", "model": "m", "api_key": "srv-" + SECRET}}  # fmt: skip
    kwargs = {"mcp_config": {"mcpServers": {"s": server}}, "tasks": [{"id": "t", "prompt": "p"}], "no_such_option": 1,
              "sampling": {"base_url": "http://127.0.0.1:1/v1", "model": "m", "api_key": "env-" + SECRET}}  # fmt: skip
    with pytest.raises(ConfigError) as info:
        MakeEnv.of("AWorld/MCP-v0", kwargs)()
    assert "no_such_option" in str(info.value) and SECRET not in str(info.value)
