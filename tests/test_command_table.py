"""The command table names both halves of every command (SPEC 2; docs/design.md): the
front-end and worker dispatch tables are built from it, so each name must exist."""
import pytest

from disque.contracts import routes
from disque import commands
from disque.frontend.node import PARTS
from disque.workers.shard import SHARD_PARTS, Shard

pytestmark = pytest.mark.unit


def front_handler(name):
    """The function a front-end handler name ("part.method") names, from the part's class."""
    part, _, method = name.partition(".")
    return getattr(PARTS.get(part), method, None) if method else None


def worker_handler(name):
    """The function a worker handler name ("method" of Shard, or "part.method") names."""
    part, _, method = name.rpartition(".")
    return getattr(SHARD_PARTS.get(part) if part else Shard, method, None)


@pytest.mark.parametrize("name", sorted(commands.COMMANDS))
def test_every_command_names_handlers_that_exist(name):
    cmd = commands.COMMANDS[name]
    if cmd.route == routes.LOCAL:
        assert cmd.front and callable(front_handler(cmd.front)), cmd
        assert cmd.worker is None, cmd
    else:
        assert cmd.worker and callable(worker_handler(cmd.worker)), cmd
    if cmd.front is not None:
        assert callable(front_handler(cmd.front)), cmd


def test_a_wrong_handler_name_is_caught():
    assert front_handler("auth.no_such_method") is None
    assert front_handler("no_such_part.cmd_auth") is None
    assert worker_handler("no_such_method") is None


def test_the_worker_table_is_built_from_the_command_table():
    shard = Shard(0, 1, b"a" * 40, {})
    expected = {c.name.encode() for c in commands.COMMANDS.values()
                if c.route in commands.WORKER_ROUTES}
    assert set(shard.handlers) == expected
    assert shard.handlers[b"ackjob"] == shard.cmd_ackjob
