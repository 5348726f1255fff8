"""TIME, COMMAND, LATENCY and DEBUG against real servers."""

import re
import time

from support.admin import arity_err, OK, SYNTAX
from support.jobs import addjob
from support.resp_client import encode_command
from support.waits import wait_until
addjob, wait_until, encode = addjob, wait_until, encode_command


# ---------------------------------------------------------------------------
# TIME / COMMAND / LATENCY / DEBUG
# ---------------------------------------------------------------------------


def test_time(server):
    r = server.raw()
    raw = r.call("TIME")
    sec, usec = r.execute("TIME")
    assert re.fullmatch(rb"\*2\r\n\$10\r\n\d{10}\r\n\$\d\r\n\d{1,6}\r\n", raw), raw
    assert abs(int(sec) - time.time()) < 5 and 0 <= int(usec) < 10**6
    assert r.call("TIME", "x") == arity_err("time")


def test_command_introspection(server):
    r = server.raw()
    # upstream's 32 commands plus ECHO (which redis-cli --pipe needs)
    assert r.call("COMMAND", "COUNT") == b":33\r\n"
    table = r.execute("COMMAND")
    assert len(table) == 33
    names = {e[0] for e in table}
    assert {b"addjob", b"getjob", b"hello", b"auth", b"client", b"slowlog", b"monitor"} <= names
    assert r.call("COMMAND", "INFO", "AddJob") == (
        b"*1\r\n*6\r\n$6\r\naddjob\r\n:-4\r\n*3\r\n+write\r\n+denyoom\r\n+fast\r\n:0\r\n:0\r\n:0\r\n")
    assert r.execute("COMMAND", "INFO", "enqueue", "nosuch", "hello") == [
        [b"enqueue", -1, [b"write", b"denyoom", b"fast"], 0, 0, 0], None,
        [b"hello", -1, [b"readonly", b"fast"], 0, 0, 0]]
    assert r.execute("COMMAND", "INFO") == []
    assert r.execute("COMMAND", "GETKEYS", "ADDJOB", "q", "b", "0") == []
    assert r.call("COMMAND", "GETKEYS", "NOPE") == b"-ERR Invalid command specified\r\n"
    assert r.call("COMMAND", "GETKEYS", "QLEN") == (
        b"-ERR Invalid number of arguments specified for command\r\n")
    err = b"-ERR Unknown subcommand or wrong number of arguments.\r\n"
    assert r.call("COMMAND", "DOCS") == err          # redis-cli falls back to its own help
    assert r.call("COMMAND", "COUNT", "x") == err


def test_latency(server):
    r = server.raw()
    assert r.call("LATENCY", "LATEST") == b"*0\r\n"
    assert r.call("LATENCY", "HISTORY", "command") == b"*0\r\n"
    assert r.call("LATENCY", "RESET") == b":0\r\n"
    assert r.call("LATENCY", "RESET", "command", "fork") == b":0\r\n"
    assert r.call("LATENCY", "GRAPH", "command") == (
        b"-ERR No samples available for event 'command'\r\n")
    assert r.execute("LATENCY", "DOCTOR").startswith(b"I'm sorry, Dave")
    for args in (("LATENCY", "BOGUS"), ("LATENCY", "LATEST", "x"), ("LATENCY", "HISTORY")):
        assert r.call(*args) == SYNTAX, args
    assert r.call("LATENCY") == arity_err("latency")


def test_errors_echoing_input_stay_on_one_line(server):
    r = server.raw()
    assert r.call("CONFIG", "SET", "maxclients", b"1\r\n+OK") == (
        b"-ERR Invalid argument '1  +OK' for CONFIG SET 'maxclients'\r\n")
    assert r.call("CONFIG", "SET", b"no\nsuch", "1") == (
        b"-ERR Unsupported CONFIG parameter: no such\r\n")
    assert r.call("HELLO", "3", b"x\r\ny") == b"-ERR Syntax error in HELLO option 'x  y'\r\n"
    assert r.call("CLIENT", "KILL", "TYPE", b"a\nb") == b"-ERR Unknown client type 'a b'\r\n"
    assert r.call("CLIENT", "SETINFO", b"a\nb", "x") == b"-ERR Unrecognized option 'a b'\r\n"
    assert r.call("LATENCY", "GRAPH", b"e\r") == b"-ERR No samples available for event 'e '\r\n"
    assert r.call("PING") == b"+PONG\r\n"


def test_debug_errors(server):
    r = server.raw()
    assert r.call("DEBUG", "nope") == (
        b"-ERR Unknown DEBUG subcommand or wrong number of arguments for 'nope'\r\n")
    assert r.call("DEBUG", "SLEEP") == (
        b"-ERR Unknown DEBUG subcommand or wrong number of arguments for 'SLEEP'\r\n")
    assert r.call("DEBUG", "ERROR", "MYERR some\nthing") == b"-MYERR some thing\r\n"
    assert r.call("DEBUG", "SLEEP", "0") == OK


