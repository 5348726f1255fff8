"""The command table names both halves of every command (SPEC 2; docs/design.md): the
front-end and worker dispatch tables are built from it, so each name must exist."""
import pytest

from disque import commands
from disque.frontend import Frontend
from disque.workers.shard import Shard

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", sorted(commands.COMMANDS))
def test_every_command_names_handlers_that_exist(name):
    cmd = commands.COMMANDS[name]
    if cmd.route == "local":
        assert cmd.front and callable(getattr(Frontend, cmd.front, None)), cmd
        assert cmd.worker is None, cmd
    else:
        assert cmd.worker and callable(getattr(Shard, cmd.worker, None)), cmd
    if cmd.front is not None:
        assert callable(getattr(Frontend, cmd.front, None)), cmd


def test_the_worker_table_is_built_from_the_command_table():
    shard = Shard(0, 1, b"a" * 40, {})
    expected = {c.name.encode() for c in commands.COMMANDS.values()
                if c.route in commands.WORKER_ROUTES}
    assert set(shard.handlers) == expected
    assert shard.handlers[b"ackjob"] == shard.cmd_ackjob
