"""Unit tests for the disque/config/ package: values, quoting, the Config object, directives, files and their errors (the command line: test_config_command_line.py; CONFIG GET/SET/REWRITE: test_config_commands.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # the package is not installed in the test venv
    sys.path.insert(0, str(REPO_ROOT))

from disque.config import (  # noqa: E402
    DIRECTIVES,
    ClientOutputBufferLimit,
    Config,
    ConfigError,
    format_memory,
    human_bytes,
    load_config,
    parse_config_text,
    parse_integer,
    parse_memory,
    quote_arg,
    split_args,
)

SAMPLE_CONF = REPO_ROOT / "conf" / "disque.conf"

FATAL_HEADER = "*** FATAL CONFIG FILE ERROR ***"


def parse(text: str) -> Config:
    return parse_config_text(text)


def parse_error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config_text(text)
    return info.value


# ------------------------------------------------------------------------------------------
# Helpers: memory units, integers, human sizes


@pytest.mark.parametrize(
    "text, expected",
    [
        ("0", 0), ("512", 512), ("1b", 1), ("1B", 1),
        ("1k", 1000), ("1K", 1000), ("1kb", 1024), ("1KB", 1024), ("2Kb", 2048),
        ("1m", 10**6), ("1mb", 2**20), ("64MB", 64 * 2**20),
        ("1g", 10**9), ("1gb", 2**30), ("3Gb", 3 * 2**30),
        ("-5", -5),
    ],
)
def test_parse_memory_units(text, expected):
    assert parse_memory(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "1tb", "1.5gb", "gb", " 1", "1 gb", "+1", "99999999999999999999gb"])
def test_parse_memory_rejects(text):
    with pytest.raises(ValueError):
        parse_memory(text)


@pytest.mark.parametrize(
    "value, expected",
    [(0, "0"), (1000, "1000"), (1024, "1kb"), (3 * 1024, "3kb"), (2**20, "1mb"), (2**30, "1gb"),
     (64 * 2**20, "64mb"), (2**30 + 1, "1073741825")],
)
def test_format_memory(value, expected):
    assert format_memory(value) == expected
    assert parse_memory(expected) == value


@pytest.mark.parametrize(
    "value, expected",
    [(0, "0B"), (1023, "1023B"), (1024, "1.00K"), (1536, "1.50K"), (2**20, "1.00M"),
     (int(2.5 * 2**30), "2.50G"), (2**40, "1.00T"), (2**50, "1.00P"), (2**60, f"{2**60}B")],
)
def test_human_bytes(value, expected):
    assert human_bytes(value) == expected


@pytest.mark.parametrize("text, expected", [("0", 0), ("+7", 7), ("007", 7), ("-3", -3), ("", 0)])
def test_parse_integer(text, expected):
    assert parse_integer(text) == expected


@pytest.mark.parametrize("text", [" 1", "1 ", "1x", "0x10", "+", "-", "1.0", str(2**63)])
def test_parse_integer_rejects(text):
    with pytest.raises(ValueError):
        parse_integer(text)


# ------------------------------------------------------------------------------------------
# Quoting


@pytest.mark.parametrize(
    "line, expected",
    [
        ("a b   c", ["a", "b", "c"]),
        ("  \t a\tb ", ["a", "b"]),
        ('"hello world" x', ["hello world", "x"]),
        (r'"a\nb\rc\td\be\af"', ["a\nb\rc\td\be\af"]),
        (r'"\x41\x7a" "\xZZ"', ["Az", "xZZ"]),
        (r'"quote \" and backslash \\"', ['quote " and backslash \\']),
        (r"'single \' quote' 'no \n escape'", ["single ' quote", "no \\n escape"]),
        ('"" x', ["", "x"]),
        ("''", [""]),
        ('key"quoted part"', ["keyquoted part"]),
        ("", []),
    ],
)
def test_split_args(line, expected):
    assert split_args(line) == expected


@pytest.mark.parametrize("line", ['"unterminated', "'unterminated", '"a"b', "'a'b", 'x "a\\"'])
def test_split_args_unbalanced(line):
    with pytest.raises(ValueError):
        split_args(line)


@pytest.mark.parametrize("text", ["", "plain", "two words", 'q"uote', "back\\slash", "nl\ncr\rtab\t", "\x01\x7f", "é"])
def test_quote_arg_round_trips(text):
    assert split_args(quote_arg(text)) == [text]


# ------------------------------------------------------------------------------------------
# Defaults and the Config object


def test_defaults():
    cfg = Config()
    assert cfg.port == 7711
    assert cfg.bus_port == 17711
    assert cfg.bind == ["127.0.0.1"]
    assert cfg.daemonize is False
    assert cfg.pidfile == "/var/run/disque.pid"
    assert cfg.tcp_backlog == 511
    assert cfg.unixsocket is None and cfg.unixsocketperm == 0
    assert cfg.timeout == 0 and cfg.tcp_keepalive == 0
    assert cfg.loglevel == "notice" and cfg.logfile == ""
    assert (cfg.syslog_enabled, cfg.syslog_ident, cfg.syslog_facility) == (False, "disque", "local0")
    assert cfg.databases == 16
    assert cfg.dir == os.getcwd()
    assert cfg.requirepass is None
    assert cfg.rename_commands == {}
    assert cfg.maxclients == 10000
    assert cfg.maxmemory == 2**30
    assert cfg.maxmemory_policy == "acks" and cfg.maxmemory_samples == 5
    assert cfg.activerehashing is True
    assert cfg.hz == 10
    assert cfg.appendonly is False and cfg.appendfilename == "disque.aof"
    assert cfg.appendfsync == "everysec" and cfg.no_appendfsync_on_rewrite is False
    assert cfg.auto_aof_rewrite_percentage == 100 and cfg.auto_aof_rewrite_min_size == 64 * 2**20
    assert cfg.aof_rewrite_incremental_fsync is True and cfg.aof_load_truncated is True
    assert cfg.aof_enqueue_jobs_once is False
    assert cfg.cluster_config_file == "nodes.conf" and cfg.cluster_node_timeout == 15000
    assert cfg.slowlog_log_slower_than == 10000 and cfg.slowlog_max_len == 128
    assert cfg.latency_monitor_threshold == 0
    assert cfg.client_output_buffer_limit == ClientOutputBufferLimit(0, 0, 0)
    assert cfg.watchdog_period == 0
    assert cfg.workers == (os.cpu_count() or 1)
    assert cfg.stats_log_file == "" and cfg.stats_log_interval == 10
    assert cfg.config_file is None


def test_defaults_are_not_shared_between_configs():
    first, second = Config(), Config()
    first.bind.append("::1")
    assert second.bind == ["127.0.0.1"]


def test_get_by_name_and_attribute_errors():
    cfg = parse("maxmemory-policy noeviction")
    assert cfg.get("maxmemory-policy") == "noeviction"
    assert cfg.get("maxmemory_policy") == "noeviction"
    assert cfg.get("rename-command") == {}
    with pytest.raises(KeyError):
        cfg.get("no-such-thing")
    with pytest.raises(AttributeError):
        cfg.no_such_thing
    with pytest.raises(AttributeError):
        cfg.no_such_thing = 1


def test_attribute_assignment_stores_typed_values():
    cfg = Config()
    cfg.aof_enqueue_jobs_once = True
    assert cfg.get("aof-enqueue-jobs-once") is True
    cfg.config_file = "/tmp/x.conf"
    assert cfg.config_file == "/tmp/x.conf"


def test_resolve_path_is_relative_to_dir(tmp_path):
    cfg = parse(f"dir {tmp_path}")
    assert cfg.resolve_path("disque.aof") == str(tmp_path / "disque.aof")
    assert cfg.resolve_path("/abs/file") == "/abs/file"


def test_snapshot_round_trip_through_json(tmp_path):
    cfg = parse(
        f"dir {tmp_path}\nbind 10.0.0.1 ::1\nclient-output-buffer-limit normal 1mb 2kb 30\n"
        "rename-command CONFIG secret\nrequirepass pw\nworkers 3\nappendonly yes\n"
    )
    cfg.config_file = "/etc/disque.conf"
    snapshot = json.loads(json.dumps(cfg.to_dict()))
    copy = Config.from_dict(snapshot)
    assert copy == cfg
    assert copy.client_output_buffer_limit == ClientOutputBufferLimit(2**20, 2048, 30)
    assert copy.bind == ["10.0.0.1", "::1"]
    assert copy.rename_commands == {"CONFIG": "secret"}
    assert copy.config_file == "/etc/disque.conf"
    assert copy.workers == 3 and copy.appendonly is True


def test_snapshot_rejects_unknown_keys():
    with pytest.raises(ValueError):
        Config.from_dict({"no-such-directive": 1})


# ------------------------------------------------------------------------------------------
# Config file: every kind of directive


@pytest.mark.parametrize(
    "name", [d.name for d in DIRECTIVES.values() if d.kind.__class__.__name__ == "Bool"]
)
def test_boolean_directives(name):
    attribute = name.replace("-", "_")
    assert getattr(parse(f"{name} yes"), attribute) is True
    assert getattr(parse(f"{name} YES"), attribute) is True
    assert getattr(parse(f"{name} no"), attribute) is False
    error = parse_error(f"{name} maybe")
    assert error.message == "argument must be 'yes' or 'no'"


@pytest.mark.parametrize(
    "line, attribute, expected",
    [
        ("port 7777", "port", 7777),
        ("port 0", "port", 0),
        ("port 55535", "port", 55535),
        ("tcp-backlog 1024", "tcp_backlog", 1024),
        ("timeout 300", "timeout", 300),
        ("tcp-keepalive 60", "tcp_keepalive", 60),
        ("databases 1", "databases", 1),
        ("maxclients 1", "maxclients", 1),
        ("maxmemory-samples 3", "maxmemory_samples", 3),
        ("auto-aof-rewrite-percentage 0", "auto_aof_rewrite_percentage", 0),
        ("cluster-node-timeout 5000", "cluster_node_timeout", 5000),
        ("slowlog-log-slower-than -1", "slowlog_log_slower_than", -1),
        ("slowlog-max-len 0", "slowlog_max_len", 0),
        ("latency-monitor-threshold 100", "latency_monitor_threshold", 100),
        ("hz 100", "hz", 100),
        ("hz 0", "hz", 1),  # clamped, not refused
        ("hz -5", "hz", 1),
        ("hz 100000", "hz", 500),
        ("workers 3", "workers", 3),
        ("stats-log-interval 1", "stats_log_interval", 1),
        ("metrics-port 9711", "metrics_port", 9711),
        ("port +0100", "port", 100),
    ],
)
def test_integer_directives(line, attribute, expected):
    assert getattr(parse(line), attribute) == expected


@pytest.mark.parametrize(
    "line, message",
    [
        ("port 55536", "Invalid port"),
        ("port -1", "Invalid port"),
        ("port abc", "Invalid port"),
        ("tcp-backlog -1", "Invalid backlog value"),
        ("timeout -1", "Invalid timeout value"),
        ("tcp-keepalive -1", "Invalid tcp-keepalive value"),
        ("databases 0", "Invalid number of databases"),
        ("maxclients 0", "Invalid max clients limit"),
        ("maxmemory-samples 0", "maxmemory-samples must be 1 or greater"),
        ("auto-aof-rewrite-percentage -1", "Invalid negative percentage for AOF auto rewrite"),
        ("cluster-node-timeout 0", "cluster-node-timeout must be 1 or greater"),
        ("latency-monitor-threshold -1", "The latency threshold can't be negative"),
        ("slowlog-max-len -1", "Invalid slowlog-max-len value"),
        ("slowlog-log-slower-than x", "Invalid slowlog-log-slower-than value"),
        ("hz ten", "Invalid hz value"),
        ("workers 0", "Invalid number of workers (must be 1 or greater)"),
        ("stats-log-interval 0", "Invalid stats-log-interval (must be 1 or greater)"),
        ("metrics-port 65536", "Invalid metrics-port"),
        ("metrics-port -1", "Invalid metrics-port"),
        ("maxmemory 0", "Invalid maxmemory value (must be greater than 0)"),
        ("maxmemory 1tb", "Invalid maxmemory value (must be greater than 0)"),
        ("auto-aof-rewrite-min-size lots", "Invalid auto-aof-rewrite-min-size value"),
        ("unixsocketperm 778", "Invalid socket file permissions"),
        ("unixsocketperm 1000", "Invalid socket file permissions"),
        ("loglevel loud", "Invalid log level. Must be one of debug, verbose, notice, warning"),
        ("syslog-facility local8", "Invalid log facility. Must be one of USER or between LOCAL0-LOCAL7"),
        ("maxmemory-policy allkeys-lru", "Invalid maxmemory policy"),
        ("appendfsync sometimes", "argument must be 'no', 'always' or 'everysec'"),
        ("appendfilename dir/disque.aof", "appendfilename can't be a path, just a filename"),
        ("appendfilename /abs.aof", "appendfilename can't be a path, just a filename"),
        ("requirepass " + "x" * 513, "Password is longer than CONFIG_AUTHPASS_MAX_LEN"),
        ("bind " + " ".join(f"10.0.0.{n}" for n in range(17)), "Too many bind addresses specified"),
        ("client-output-buffer-limit slave 0 0 0", "Unrecognized client limit class"),
        ("client-output-buffer-limit normal 0 0 -1", "Negative number of seconds in soft limit is invalid"),
        ("client-output-buffer-limit normal -1 0 0", "Negative number of seconds in soft limit is invalid"),
        ("client-output-buffer-limit normal x 0 0", "Invalid client-output-buffer-limit value"),
    ],
)
def test_invalid_values(line, message):
    error = parse_error(line)
    assert error.message == message
    assert error.line_number == 1
    assert error.line == line


@pytest.mark.parametrize(
    "line, attribute, expected",
    [
        ("maxmemory 100mb", "maxmemory", 100 * 2**20),
        ("maxmemory 2G", "maxmemory", 2 * 10**9),
        ("maxmemory 1", "maxmemory", 1),
        ("auto-aof-rewrite-min-size 1kb", "auto_aof_rewrite_min_size", 1024),
        ("auto-aof-rewrite-min-size 0", "auto_aof_rewrite_min_size", 0),
    ],
)
def test_memory_directives(line, attribute, expected):
    assert getattr(parse(line), attribute) == expected


@pytest.mark.parametrize(
    "line, attribute, expected",
    [
        ("loglevel debug", "loglevel", "debug"),
        ("loglevel WARNING", "loglevel", "warning"),
        ("loglevel verbose", "loglevel", "verbose"),
        ("syslog-facility user", "syslog_facility", "user"),
        ("syslog-facility LOCAL7", "syslog_facility", "local7"),
        ("maxmemory-policy noeviction", "maxmemory_policy", "noeviction"),
        ("appendfsync always", "appendfsync", "always"),
        ("appendfsync no", "appendfsync", "no"),
    ],
)
def test_enum_directives(line, attribute, expected):
    assert getattr(parse(line), attribute) == expected


def test_string_directives():
    cfg = parse(
        "pidfile /tmp/d.pid\nlogfile 'disque log.txt'\nsyslog-ident myd\nunixsocket /tmp/d.sock\n"
        "unixsocketperm 0700\nrequirepass \"s3cr et\"\nappendfilename my.aof\n"
        "cluster-config-file nodes-7711.conf\nstats-log-file stats.jsonl\n"
    )
    assert cfg.pidfile == "/tmp/d.pid"
    assert cfg.logfile == "disque log.txt"
    assert cfg.syslog_ident == "myd"
    assert cfg.unixsocket == "/tmp/d.sock"
    assert cfg.unixsocketperm == 0o700
    assert cfg.requirepass == "s3cr et"
    assert cfg.appendfilename == "my.aof"
    assert cfg.cluster_config_file == "nodes-7711.conf"
    assert cfg.stats_log_file == "stats.jsonl"


def test_password_of_512_chars_is_fine_and_empty_means_none():
    assert parse("requirepass " + "p" * 512).requirepass == "p" * 512
    assert parse('requirepass ""').requirepass is None
    assert parse('unixsocket ""').unixsocket is None


def test_bind_and_output_buffer_limit():
    cfg = parse("bind 192.168.1.100 10.0.0.1 ::1\nclient-output-buffer-limit NORMAL 256mb 64MB 60")
    assert cfg.bind == ["192.168.1.100", "10.0.0.1", "::1"]
    assert cfg.client_output_buffer_limit == ClientOutputBufferLimit(256 * 2**20, 64 * 2**20, 60)
    assert parse("bind " + " ".join(f"10.0.0.{n}" for n in range(16))).bind[-1] == "10.0.0.15"


def test_rename_command_accumulates():
    cfg = parse('rename-command config secret-config\nrename-command DEBUG ""\nrename-command Flushall x')
    assert cfg.rename_commands == {"CONFIG": "secret-config", "DEBUG": "", "FLUSHALL": "x"}


def test_dir_is_stored_absolute_without_chdir(tmp_path):
    (tmp_path / "sub").mkdir()
    before = os.getcwd()
    cfg = parse(f"dir {tmp_path}\ndir sub")  # relative dirs chain like successive chdirs
    assert cfg.dir == str(tmp_path / "sub")
    assert os.getcwd() == before


def test_dir_errors(tmp_path):
    (tmp_path / "file").write_text("")
    error = parse_error(f"dir {tmp_path / 'missing'}")
    assert error.message == f"Can't chdir to '{tmp_path / 'missing'}': No such file or directory"
    error = parse_error(f"dir {tmp_path / 'file'}")
    assert error.message.endswith(": Not a directory")


def test_names_are_case_insensitive_and_last_occurrence_wins():
    cfg = parse("PORT 1000\nPort 2000\nloglevel debug\nLogLevel warning\nBIND 10.0.0.1\nbind 10.0.0.2")
    assert cfg.port == 2000
    assert cfg.loglevel == "warning"
    assert cfg.bind == ["10.0.0.2"]


def test_comments_blank_lines_and_indentation():
    cfg = parse("# a comment\n\n   \t\n   # indented comment\n  port 1234  \r\n\ttimeout 5\n")
    assert cfg.port == 1234
    assert cfg.timeout == 5


def test_quoted_directive_values():
    cfg = parse('logfile "/tmp/with space.log"\nsyslog-ident \'it\\\'s\'\npidfile "\\x2ftmp\\x2fp.pid"')
    assert cfg.logfile == "/tmp/with space.log"
    assert cfg.syslog_ident == "it's"
    assert cfg.pidfile == "/tmp/p.pid"


def test_parse_config_text_applies_on_an_existing_config():
    cfg = parse("port 1000")
    parse_config_text("timeout 9", cfg)
    assert (cfg.port, cfg.timeout) == (1000, 9)


# ------------------------------------------------------------------------------------------
# Config file errors


def test_error_format_names_line_number_and_line():
    error = parse_error("# comment\nport 7711\n\nfoo bar\nport 1")
    assert error.line_number == 4
    assert error.line == "foo bar"
    assert error.message == "Bad directive or wrong number of arguments"
    assert str(error) == (
        f"{FATAL_HEADER}\n"
        "Reading the configuration file, at line 4\n"
        ">>> 'foo bar'\n"
        "Bad directive or wrong number of arguments"
    )
    assert error.one_line == "config error at line 4 ('foo bar'): Bad directive or wrong number of arguments"


@pytest.mark.parametrize(
    "line",
    [
        "port", "port 1 2", "daemonize", "bind", "rename-command CONFIG",
        "rename-command a b c", "client-output-buffer-limit normal 0 0", "include",
        "include a b", "watchdog-period 10",  # CONFIG SET only
        "nosuchdirective 1", '"" x',
    ],
)
def test_bad_directive_or_wrong_number_of_arguments(line):
    error = parse_error(f"timeout 1\n{line}")
    assert error.message == "Bad directive or wrong number of arguments"
    assert error.line_number == 2


def test_unbalanced_quotes_error():
    error = parse_error('logfile "unterminated')
    assert error.message == "Unbalanced quotes in configuration line"
    assert error.line_number == 1


def test_error_line_is_shown_trimmed():
    error = parse_error("   port nope   ")
    assert error.line == "port nope"
    assert ">>> 'port nope'" in str(error)


def test_error_without_line_is_just_the_message():
    error = ConfigError("The server is running without a config file")
    assert str(error) == "The server is running without a config file"
    assert error.one_line == "config error: The server is running without a config file"


# ------------------------------------------------------------------------------------------
# Files and includes


def test_load_config_from_file(tmp_path):
    conf = tmp_path / "d.conf"
    conf.write_text("port 8000\nappendonly yes\n")
    cfg = load_config(str(conf))
    assert cfg.port == 8000 and cfg.appendonly is True
    assert cfg.config_file == str(conf)


def test_load_config_records_absolute_path(tmp_path, monkeypatch):
    (tmp_path / "d.conf").write_text("port 8001\n")
    monkeypatch.chdir(tmp_path)
    cfg = load_config("d.conf")
    assert cfg.config_file == str(tmp_path / "d.conf")


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(str(tmp_path / "nope.conf"))
    assert str(info.value) == f"Fatal error, can't open config file '{tmp_path / 'nope.conf'}'"


def test_include(tmp_path):
    (tmp_path / "common.conf").write_text("port 9000\ntimeout 10\n")
    main = tmp_path / "main.conf"
    main.write_text(f"timeout 5\ninclude {tmp_path / 'common.conf'}\nport 9001\n")
    cfg = load_config(str(main))
    assert cfg.port == 9001  # after the include: wins
    assert cfg.timeout == 10  # inside the include, after timeout 5: wins


def test_include_relative_to_dir(tmp_path):
    (tmp_path / "extra.conf").write_text("hz 50\n")
    cfg = parse(f"dir {tmp_path}\ninclude extra.conf")
    assert cfg.hz == 50


def test_error_inside_include_reports_the_included_line(tmp_path):
    (tmp_path / "bad.conf").write_text("# first\nport 99999\n")
    error = parse_error(f"include {tmp_path / 'bad.conf'}")
    assert error.line_number == 2
    assert error.line == "port 99999"
    assert error.message == "Invalid port"
    assert error.one_line == f"config error at line 2 of {tmp_path / 'bad.conf'} ('port 99999'): Invalid port"


def test_missing_include(tmp_path):
    error = parse_error(f"include {tmp_path / 'missing.conf'}")
    assert error.message == f"Fatal error, can't open config file '{tmp_path / 'missing.conf'}'"


def test_include_loop_is_an_error(tmp_path):
    loop = tmp_path / "loop.conf"
    loop.write_text(f"include {loop}\n")
    error = parse_error(f"include {loop}")
    assert "include" in error.message.lower()
