"""Unit tests for the disque/config/ package: directive parsing, command line, CONFIG GET/SET/REWRITE."""

from __future__ import annotations

import io
import json
import os
import stat
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # the package is not installed in the test venv
    sys.path.insert(0, str(REPO_ROOT))

from disque.config import (  # noqa: E402
    DIRECTIVES,
    REWRITE_SIGNATURE,
    ClientOutputBufferLimit,
    Config,
    ConfigError,
    ShowHelp,
    ShowVersion,
    format_memory,
    glob_match,
    human_bytes,
    load_config,
    parse_command_line,
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


# ------------------------------------------------------------------------------------------
# Command line


@pytest.fixture
def conf_file(tmp_path):
    path = tmp_path / "disque.conf"
    path.write_text("port 8000\ntimeout 7\nloglevel debug\n")
    return path


def test_command_line_empty_gives_defaults():
    assert parse_command_line([]) == Config()


def test_command_line_file_before_options(conf_file):
    cfg = parse_command_line([str(conf_file), "--port", "8100", "--workers", "3"])
    assert cfg.port == 8100  # options override the file
    assert cfg.timeout == 7
    assert cfg.workers == 3
    assert cfg.config_file == str(conf_file)


def test_command_line_file_after_options(conf_file):
    cfg = parse_command_line(["--port", "8100", "--appendonly", "yes", str(conf_file)])
    assert cfg.port == 8100
    assert cfg.appendonly is True
    assert cfg.loglevel == "debug"
    assert cfg.config_file == str(conf_file)


def test_command_line_file_after_bind(conf_file):
    cfg = parse_command_line(["--port", "7000", "--workers", "1", "--bind", "127.0.0.1", str(conf_file)])
    assert cfg.bind == ["127.0.0.1"]
    assert cfg.config_file == str(conf_file)
    assert cfg.port == 7000


def test_command_line_options_only():
    cfg = parse_command_line(["--workers", "3", "--port", "7777", "--loglevel", "WARNING"])
    assert (cfg.workers, cfg.port, cfg.loglevel) == (3, 7777, "warning")
    assert cfg.config_file is None


def test_command_line_multi_word_options():
    cfg = parse_command_line([
        "--bind", "10.0.0.1", "::1",
        "--client-output-buffer-limit", "normal", "1mb", "0", "10",
        "--rename-command", "CONFIG", "",
        "--maxmemory", "2gb",
    ])
    assert cfg.bind == ["10.0.0.1", "::1"]
    assert cfg.client_output_buffer_limit == ClientOutputBufferLimit(2**20, 0, 10)
    assert cfg.rename_commands == {"CONFIG": ""}
    assert cfg.maxmemory == 2 * 2**30


def test_command_line_multi_word_option_as_one_quoted_word(conf_file):
    cfg = parse_command_line(["--client-output-buffer-limit", "normal 0 1kb 5", str(conf_file)])
    assert cfg.client_output_buffer_limit == ClientOutputBufferLimit(0, 1024, 5)
    assert cfg.config_file == str(conf_file)


def test_command_line_values_with_spaces_and_dashes():
    cfg = parse_command_line(["--logfile", "/tmp/my log.txt", "--slowlog-log-slower-than", "-1",
                              "--requirepass", ""])
    assert cfg.logfile == "/tmp/my log.txt"
    assert cfg.slowlog_log_slower_than == -1
    assert cfg.requirepass is None


def test_command_line_option_names_are_case_insensitive():
    assert parse_command_line(["--PORT", "1234"]).port == 1234


def test_command_line_unknown_option_error(conf_file):
    with pytest.raises(ConfigError) as info:
        parse_command_line([str(conf_file), "--foo", "bar"])
    error = info.value
    assert error.message == "Bad directive or wrong number of arguments"
    assert error.line == 'foo "bar"'
    assert "foo" in error.one_line
    assert str(error).startswith(FATAL_HEADER)
    assert error.line_number > 3  # counted after the file's lines


def test_command_line_bad_value_names_the_directive():
    with pytest.raises(ConfigError) as info:
        parse_command_line(["--workers", "2", "--port", "notaport"])
    assert info.value.message == "Invalid port"
    assert info.value.line == 'port "notaport"'
    assert info.value.line_number == 3  # "", "workers", "port"
    assert "port" in info.value.one_line


def test_command_line_missing_and_surplus_values():
    for argv in (["--port"], ["--port", "1", "--rename-command", "DEBUG"]):
        with pytest.raises(ConfigError) as info:
            parse_command_line(argv)
        assert info.value.message == "Bad directive or wrong number of arguments"


def test_command_line_surplus_word_after_file_is_reported_on_its_option(conf_file):
    with pytest.raises(ConfigError) as info:
        parse_command_line([str(conf_file), "--port", "1", "2"])
    assert info.value.line == 'port "1" "2"'


def test_command_line_two_config_files(conf_file):
    with pytest.raises(ConfigError):
        parse_command_line([str(conf_file), str(conf_file)])


def test_command_line_stdin():
    cfg = parse_command_line(["-", "--timeout", "3"], stdin=io.StringIO("port 6000\ntimeout 1\n"))
    assert cfg.port == 6000
    assert cfg.timeout == 3
    assert cfg.config_file is None  # nothing to rewrite


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_command_line_help(flag):
    with pytest.raises(ShowHelp) as info:
        parse_command_line([flag])
    assert info.value.text.startswith("Usage:")


@pytest.mark.parametrize("flag", ["-v", "--version"])
def test_command_line_version(flag):
    with pytest.raises(ShowVersion) as info:
        parse_command_line(["--port", "1", flag])
    assert "v=1.0-rc1" in info.value.text


def test_command_line_help_word_as_a_value_is_a_value():
    assert parse_command_line(["--requirepass", "-h"]).requirepass == "-h"


# ------------------------------------------------------------------------------------------
# CONFIG GET


from disque.contracts.tls_settings import SETTINGS as TLS_SETTINGS  # noqa: E402

SPEC_GET_PARAMETERS = {
    "requirepass", "unixsocket", "logfile", "pidfile", "maxmemory", "maxmemory-samples", "timeout",
    "auto-aof-rewrite-percentage", "auto-aof-rewrite-min-size", "slowlog-log-slower-than",
    "latency-monitor-threshold", "slowlog-max-len", "port", "tcp-backlog", "databases", "maxclients",
    "watchdog-period", "hz", "cluster-node-timeout", "tcp-keepalive", "no-appendfsync-on-rewrite",
    "daemonize", "activerehashing", "aof-rewrite-incremental-fsync", "aof-load-truncated",
    "aof-enqueue-jobs-once", "maxmemory-policy", "loglevel", "appendfsync", "syslog-facility",
    "appendonly", "dir", "client-output-buffer-limit", "unixsocketperm", "bind",
}


def test_config_get_star_lists_spec_parameters_and_ours():
    names = [name for name, _ in Config().config_get("*")]
    assert len(names) == len(set(names))
    assert set(names) == SPEC_GET_PARAMETERS | {"workers", "worker-link", "connection-affinity",
                                                  "cluster-job-links",
                                                  "cluster-announce-ip", "cluster-announce-port",
                                                  "cluster-announce-bus-port",
                                                  "cluster-job-link-port",
                                                  "cluster-announce-job-link-port",
                                                  "stats-log-file",
                                                  "stats-log-interval", "cluster-secret",
                                                  "cluster-secret-previous", "cluster-secret-file",
                                                  "metrics-port", "metrics-auth",
                                                  "spill", "spill-threshold", "spill-keep",
                                                  "metrics-actions", "cluster-query-timeout",
                                                  "tls-port", "metrics-tls", *TLS_SETTINGS}


def test_config_get_default_values():
    values = dict(Config().config_get("*"))
    assert values["requirepass"] == ""
    assert values["unixsocket"] == ""
    assert values["maxmemory"] == "1073741824"
    assert values["tcp-keepalive"] == "no"
    assert values["daemonize"] == "no"
    assert values["activerehashing"] == "yes"
    assert values["client-output-buffer-limit"] == "normal 0 0 0"
    assert values["unixsocketperm"] == "0"
    assert values["bind"] == "127.0.0.1"
    assert values["dir"] == os.getcwd()
    assert values["syslog-facility"] == "local0"


def test_config_get_formats():
    cfg = parse(
        "tcp-keepalive 60\nunixsocketperm 755\nbind 10.0.0.1 ::1\nmaxmemory 2mb\n"
        "client-output-buffer-limit normal 1kb 2kb 3\nappendonly yes\nrequirepass pw\n"
    )
    values = dict(cfg.config_get("*"))
    assert values["tcp-keepalive"] == "yes"  # [quirk] SPEC 4.3
    assert values["unixsocketperm"] == "755"
    assert values["bind"] == "10.0.0.1 ::1"
    assert values["maxmemory"] == "2097152"
    assert values["client-output-buffer-limit"] == "normal 1024 2048 3"
    assert values["appendonly"] == "yes"
    assert values["requirepass"] == "pw"


@pytest.mark.parametrize(
    "pattern, expected",
    [
        ("maxmemory", ["maxmemory"]),
        ("maxmemory*", ["maxmemory", "maxmemory-policy", "maxmemory-samples"]),
        ("*-policy", ["maxmemory-policy"]),
        ("h?", ["hz"]),
        ("[pd]or[t]", ["port"]),
        ("aof-[^r]*", ["aof-load-truncated", "aof-enqueue-jobs-once"]),
        ("aof-[l-l]oad*", ["aof-load-truncated"]),
        ("PORT", []),  # case-sensitive
        ("include", []),
        ("rename-command", []),
        ("appendfilename", []),  # not in the CONFIG GET list
        ("nothing", []),
        ("port\\", []),
        ("por\\t", ["port"]),
    ],
)
def test_config_get_globs(pattern, expected):
    assert sorted(name for name, _ in Config().config_get(pattern)) == sorted(expected)


def test_glob_match_edge_cases():
    assert glob_match("*", "")
    assert glob_match("a*b*c", "axxbyyc")
    assert not glob_match("a*b", "ab-")
    assert glob_match("\\*", "*") and not glob_match("\\*", "x")
    assert glob_match("[]", "]") is False  # empty class matches nothing
    assert glob_match("[abc", "b")  # unclosed class runs to the end


# ------------------------------------------------------------------------------------------
# CONFIG SET


@pytest.mark.parametrize(
    "name, value, attribute, expected",
    [
        ("requirepass", "secret", "requirepass", "secret"),
        ("requirepass", "", "requirepass", None),
        ("maxclients", "50", "maxclients", 50),
        ("appendonly", "yes", "appendonly", True),
        ("appendonly", "NO", "appendonly", False),
        ("aof-rewrite-incremental-fsync", "no", "aof_rewrite_incremental_fsync", False),
        ("aof-load-truncated", "no", "aof_load_truncated", False),
        ("activerehashing", "no", "activerehashing", False),
        ("aof-enqueue-jobs-once", "yes", "aof_enqueue_jobs_once", True),
        ("tcp-keepalive", "yes", "tcp_keepalive", 1),  # [quirk] yes/no
        ("tcp-keepalive", "no", "tcp_keepalive", 0),
        ("maxmemory-samples", "1", "maxmemory_samples", 1),
        ("timeout", "30", "timeout", 30),
        ("timeout", "", "timeout", 0),  # strtoll: empty string is 0
        ("timeout", "+007", "timeout", 7),
        ("auto-aof-rewrite-percentage", "50", "auto_aof_rewrite_percentage", 50),
        ("auto-aof-rewrite-min-size", "1mb", "auto_aof_rewrite_min_size", 2**20),
        ("slowlog-log-slower-than", "0", "slowlog_log_slower_than", 0),
        ("slowlog-max-len", "10", "slowlog_max_len", 10),
        ("latency-monitor-threshold", "5", "latency_monitor_threshold", 5),
        ("cluster-node-timeout", "0", "cluster_node_timeout", 0),  # SET allows >= 0
        ("hz", "0", "hz", 1),
        ("hz", "1000", "hz", 500),
        ("hz", "42", "hz", 42),
        ("watchdog-period", "500", "watchdog_period", 500),
        ("maxmemory", "0", "maxmemory", 0),  # accepted by CONFIG SET, refused by the file
        ("maxmemory", "100mb", "maxmemory", 100 * 2**20),
        ("loglevel", "DEBUG", "loglevel", "debug"),
        ("maxmemory-policy", "noeviction", "maxmemory_policy", "noeviction"),
        ("appendfsync", "always", "appendfsync", "always"),
        ("client-output-buffer-limit", "normal 1mb 512kb 10", "client_output_buffer_limit",
         ClientOutputBufferLimit(2**20, 512 * 1024, 10)),
        ("client-output-buffer-limit", "normal 1 1 1 normal 2 2 2", "client_output_buffer_limit",
         ClientOutputBufferLimit(2, 2, 2)),
        ("client-output-buffer-limit", "", "client_output_buffer_limit", ClientOutputBufferLimit(0, 0, 0)),
        ("stats-log-file", "/tmp/stats.jsonl", "stats_log_file", "/tmp/stats.jsonl"),
        ("stats-log-interval", "5", "stats_log_interval", 5),
        ("metrics-auth", "no", "metrics_auth", False),
        ("MaxClients", "7", "maxclients", 7),  # names are case-insensitive
    ],
)
def test_config_set_success(name, value, attribute, expected):
    cfg = Config()
    assert cfg.config_set(name, value) is None
    assert getattr(cfg, attribute) == expected


def test_config_set_accepts_bytes():
    cfg = Config()
    cfg.config_set(b"timeout", b"12")
    assert cfg.timeout == 12


@pytest.mark.parametrize(
    "name",
    ["port", "bind", "daemonize", "workers", "databases", "pidfile", "logfile", "appendfilename",
     "no-appendfsync-on-rewrite", "unixsocket", "include", "rename-command", "nosuch", "Port"],
)
def test_config_set_unsupported(name):
    with pytest.raises(ConfigError) as info:
        Config().config_set(name, "1")
    assert str(info.value) == f"Unsupported CONFIG parameter: {name}"


@pytest.mark.parametrize(
    "name, value",
    [
        ("maxclients", "0"), ("maxclients", "abc"), ("timeout", "-1"), ("timeout", " 1"),
        ("maxmemory-samples", "0"), ("hz", "-1"), ("slowlog-log-slower-than", "-1"),
        ("cluster-node-timeout", "-1"), ("appendonly", "maybe"), ("tcp-keepalive", "60"),
        ("maxmemory", "-1"), ("maxmemory", "1tb"), ("loglevel", "loud"), ("appendfsync", "sometimes"),
        ("maxmemory-policy", "lru"), ("requirepass", "x" * 513),
        ("client-output-buffer-limit", "normal 0 0"), ("client-output-buffer-limit", "slave 0 0 0"),
        ("client-output-buffer-limit", "normal -1 0 0"), ("stats-log-interval", "0"),
        ("AppendOnly", "perhaps"),
    ],
)
def test_config_set_invalid_argument(name, value):
    cfg = Config()
    before = cfg.to_dict()
    with pytest.raises(ConfigError) as info:
        cfg.config_set(name, value)
    assert str(info.value) == f"Invalid argument '{value}' for CONFIG SET '{name}'"
    assert cfg.to_dict() == before  # nothing changed


def test_config_set_dir(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "file").write_text("")
    cfg = Config()
    cfg.config_set("dir", str(tmp_path))
    assert cfg.dir == str(tmp_path)
    cfg.config_set("dir", "sub")  # relative to the current dir
    assert cfg.dir == str(tmp_path / "sub")
    with pytest.raises(ConfigError) as info:
        cfg.config_set("dir", str(tmp_path / "missing"))
    assert str(info.value) == "Changing directory: No such file or directory"
    with pytest.raises(ConfigError) as info:
        cfg.config_set("dir", str(tmp_path / "file"))
    assert str(info.value) == "Changing directory: Not a directory"
    assert cfg.dir == str(tmp_path / "sub")


# ------------------------------------------------------------------------------------------
# CONFIG REWRITE


def test_rewrite_without_config_file():
    with pytest.raises(ConfigError) as info:
        Config().rewrite()
    assert str(info.value) == "The server is running without a config file"


def test_rewrite_keeps_comments_and_unknown_lines_and_updates_in_place(tmp_path):
    conf = tmp_path / "d.conf"
    conf.write_text(
        "# My precious comment\n"
        "port 7000\n"
        "\n"
        "# about the timeout\n"
        "timeout 5\n"
        "rename-command DEBUG \"\"\n"
        "databases 4\n"
        f"dir {tmp_path}\n"
        "timeout 6\n"
        "  # indented comment\n"
    )
    cfg = load_config(str(conf))
    cfg.config_set("timeout", "42")
    cfg.config_set("maxmemory", "2gb")
    cfg.config_set("appendonly", "yes")
    cfg.rewrite()
    assert conf.read_text() == (
        "# My precious comment\n"
        "port 7000\n"
        "\n"
        "# about the timeout\n"
        "timeout 42\n"
        'rename-command DEBUG ""\n'
        "databases 4\n"
        f'dir "{tmp_path}"\n'
        "\n"  # the duplicate timeout line is blanked
        "# indented comment\n"
        f"{REWRITE_SIGNATURE}\n"
        "maxmemory 2gb\n"
        "appendonly yes\n"
    )
    assert load_config(str(conf)) == cfg


def test_rewrite_appends_only_non_defaults_in_spec_order(tmp_path):
    conf = tmp_path / "d.conf"
    conf.write_text("")
    cfg = load_config(str(conf))
    for name, value in [("hz", "20"), ("requirepass", "pw"), ("client-output-buffer-limit", "normal 1mb 0 5"),
                        ("maxmemory-policy", "noeviction"), ("tcp-keepalive", "yes"),
                        ("stats-log-interval", "3"), ("slowlog-log-slower-than", "10000")]:
        cfg.config_set(name, value)
    cfg.rewrite()
    assert conf.read_text() == (
        f"{REWRITE_SIGNATURE}\n"
        "tcp-keepalive 1\n"
        f'dir "{cfg.dir}"\n'
        'requirepass "pw"\n'
        "maxmemory-policy noeviction\n"
        "client-output-buffer-limit normal 1mb 0 5\n"
        "hz 20\n"
        "stats-log-interval 3\n"
    )
    assert load_config(str(conf)) == cfg


def test_rewrite_does_not_repeat_the_signature_and_is_idempotent(tmp_path):
    conf = tmp_path / "d.conf"
    conf.write_text("port 7000\n")
    cfg = load_config(str(conf))
    cfg.config_set("timeout", "1")
    cfg.rewrite()
    cfg.config_set("hz", "30")
    cfg.rewrite()
    text = conf.read_text()
    assert text.count(REWRITE_SIGNATURE) == 1
    assert text == f'port 7000\n{REWRITE_SIGNATURE}\ntimeout 1\ndir "{cfg.dir}"\nhz 30\n'
    cfg.rewrite()
    assert conf.read_text() == text


def test_rewrite_removes_unset_strings_and_writes_defaults_in_place(tmp_path):
    conf = tmp_path / "d.conf"
    conf.write_text(f"requirepass secret\nunixsocket /tmp/x.sock\nhz 50\ndir {tmp_path}\n")
    cfg = load_config(str(conf))
    cfg.config_set("requirepass", "")
    cfg.config_set("hz", "10")
    cfg.unixsocket = None
    cfg.rewrite()
    assert conf.read_text() == f'\nhz 10\ndir "{tmp_path}"\n'


def test_rewrite_keeps_include_lines_and_comments_unparsable_lines(tmp_path):
    conf = tmp_path / "d.conf"
    (tmp_path / "other.conf").write_text("timeout 3\n")
    conf.write_text(f"include {tmp_path / 'other.conf'}\n")
    cfg = load_config(str(conf))
    assert "include" in cfg.rewritten_text()
    text = cfg.rewritten_text('port 1\nlogfile "oops\n')
    assert '# ??? logfile "oops' in text
    assert "port 7711" in text


def test_rewrite_formats_values(tmp_path):
    conf = tmp_path / "d.conf"
    conf.write_text(
        'daemonize yes\nlogfile "a \\"b\\"\\n"\nunixsocketperm 700\nbind 10.0.0.1 ::1\n'
        "maxmemory 3000\nauto-aof-rewrite-min-size 1gb\nsyslog-facility LOCAL3\n"
    )
    cfg = load_config(str(conf))
    cfg.rewrite()
    lines = conf.read_text().splitlines()
    assert lines[:7] == [
        "daemonize yes",
        'logfile "a \\"b\\"\\n"',
        "unixsocketperm 700",
        "bind 10.0.0.1 ::1",
        "maxmemory 3000",
        "auto-aof-rewrite-min-size 1gb",
        "syslog-facility local3",
    ]
    assert load_config(str(conf)) == cfg


def test_rewrite_creates_a_missing_file_and_preserves_mode(tmp_path):
    conf = tmp_path / "d.conf"
    conf.write_text("port 7000\n")
    cfg = load_config(str(conf))
    conf.chmod(0o600)
    cfg.config_set("timeout", "9")
    cfg.rewrite()
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["d.conf"]  # no temp file left behind
    conf.unlink()
    cfg.rewrite()
    assert "timeout 9" in conf.read_text()


def test_rewrite_error_is_reported(tmp_path):
    cfg = Config()
    cfg.config_file = str(tmp_path / "missing-dir" / "d.conf")
    with pytest.raises(ConfigError) as info:
        cfg.rewrite()
    assert str(info.value).startswith("Rewriting config file: ")


# ------------------------------------------------------------------------------------------
# The sample config file


def test_sample_config_parses_to_the_defaults(monkeypatch):
    monkeypatch.chdir(REPO_ROOT)  # its `dir ./` is the working directory, like the default
    cfg = load_config(str(SAMPLE_CONF))
    defaults = Config()
    defaults.config_file = str(SAMPLE_CONF)
    assert cfg.to_dict() == defaults.to_dict()


def test_sample_config_mentions_every_directive():
    text = SAMPLE_CONF.read_text()
    for name in DIRECTIVES:
        assert name in text, name
    # Every file directive with a fixed default is written out, active, with its default.
    active = {line.split()[0] for line in text.splitlines() if line and not line.startswith("#")}
    commented_on_purpose = {"include", "rename-command", "unixsocket", "unixsocketperm",
                            "requirepass", "workers", "watchdog-period", "cluster-secret",
                            "cluster-secret-previous", "cluster-secret-file",
                            "cluster-announce-ip"}
    assert active == {name for name in DIRECTIVES if name not in commented_on_purpose}
