"""A construction that fails on a bad argument holds no shared local server afterwards (no leaked refcount)."""

import pytest

from aworld_gym.base.errors import ConfigError
from aworld_gym.core.env import MCPEnv
from aworld_gym.core.resources import LocalServer
from aworld_gym.mcp.demo_server import build_server
from tests.helpers import TASKS


class Counted:
    """A resource that counts its references like ``SharedServer.refs`` (nothing is started)."""

    starts = 0

    def __init__(self) -> None:
        self.refs = 0
        self.acquired = 0

    def acquire(self) -> str:
        self.refs += 1
        self.acquired += 1
        return "http://127.0.0.1:1/mcp"

    def ensure_alive(self) -> str:
        return "http://127.0.0.1:1/mcp"

    def release(self) -> None:
        self.refs -= 1


class Holding(MCPEnv):
    """An env that holds a resource of its own before ``super().__init__`` (as the page server is held)."""

    def __init__(self, resource, config, **kw):
        self.hold(resource)
        super().__init__(config, TASKS, **kw)


def config(server):
    return {"mcpServers": {"demo": build_server, "local": LocalServer(server)}}


@pytest.mark.parametrize("kw", [{"tool_format": "fancy"}, {"max_argument_depth": 0}])
def test_a_bad_setting_leaves_no_local_server_held(kw):
    server = Counted()
    with pytest.raises(ConfigError, match=next(iter(kw))):
        MCPEnv(config(server), TASKS, **kw)
    assert server.refs == 0
    assert server.acquired == 0  # the settings are checked before anything is acquired


def test_a_bad_tool_format_releases_what_a_subclass_held_first():
    own, local = Counted(), Counted()
    with pytest.raises(ConfigError, match="tool_format"):
        Holding(own, config(local), tool_format="fancy")
    assert (own.refs, local.refs) == (0, 0)
    assert own.acquired == 1


@pytest.mark.parametrize(
    ("kw", "match"),
    [({"roots": ["{work}"]}, "roots has"), ({"reward_hooks": [42]}, "callable")],  # found when the hub is made
)
def test_a_failure_after_the_servers_were_acquired_releases_them(kw, match):
    server = Counted()
    with pytest.raises(ConfigError, match=match):
        MCPEnv(config(server), TASKS, **kw)
    assert server.acquired == 1 and server.refs == 0


def test_a_good_env_holds_its_local_server_until_closed():
    server = Counted()
    env = MCPEnv(config(server), TASKS, tool_format="compact")
    assert server.refs == 1
    env.close()
    assert server.refs == 0
