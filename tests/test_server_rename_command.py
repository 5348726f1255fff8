"""rename-command (SPEC 13) against real servers."""

from support.admin import arity_err, cli, needs_cli
from support.jobs import addjob
from support.resp_client import encode_command
from support.waits import wait_until
addjob, wait_until, encode = addjob, wait_until, encode_command


# ---------------------------------------------------------------------------
# rename-command (SPEC 13)
# ---------------------------------------------------------------------------


def test_rename_command_disables_and_renames(start_server):
    srv = start_server(workers=3, extra_args=("--rename-command", "DEBUG", "",
                                              "--rename-command", "CONFIG", "s3cret-config",
                                              "--rename-command", "QLEN", "ql"))
    r = srv.raw()
    assert r.call("DEBUG", "FLUSHALL") == b"-ERR unknown command 'DEBUG'\r\n"
    assert r.call("CONFIG", "GET", "port") == b"-ERR unknown command 'CONFIG'\r\n"
    assert r.execute("S3CRET-CONFIG", "GET", "port") == [b"port", str(srv.port).encode()]
    # arity errors name the command by its real name, as upstream
    assert r.call("s3cret-config") == arity_err("config")
    # a renamed worker command still reaches its worker
    for q in ("rq-a", "rq-b", "rq-c", "rq-d"):
        addjob(r, q, b"x")
        assert r.call("QL", q) == b":1\r\n"
    assert r.call("QLEN", "rq-a") == b"-ERR unknown command 'QLEN'\r\n"
    assert r.call("COMMAND", "COUNT") == b":32\r\n"          # DEBUG is gone (33 with ECHO)
    assert r.execute("COMMAND", "INFO", "debug", "ql") == [
        None, [b"qlen", -2, [b"readonly", b"fast"], 0, 0, 0]]
    assert b"cmdstat_qlen:calls=4," in r.execute("INFO", "commandstats")


@needs_cli
def test_rename_command_through_redis_cli(start_server):
    srv = start_server(extra_args=("--rename-command", "DEBUG", ""))
    out = cli(srv, "DEBUG", "SLEEP", "0")
    assert out.stdout.strip() == "ERR unknown command 'DEBUG'"
    assert cli(srv, "PING").stdout == "PONG\n"


def test_rename_command_errors_at_startup(start_server, tmp_path):
    srv = start_server(extra_args=("--rename-command", "NOSUCHCMD", "x"), wait=False)
    assert srv.wait_exit(20) == 1
    assert "No such command in rename-command" in srv.log_text()
    srv = start_server(extra_args=("--rename-command", "QLEN", "show"), wait=False)
    assert srv.wait_exit(20) == 1
    assert "Target command name already exists" in srv.log_text()


