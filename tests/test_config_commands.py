"""Unit tests for disque/config/: CONFIG GET, CONFIG SET, CONFIG REWRITE and the sample file."""

from __future__ import annotations

import os
import stat

import pytest

from disque.config import (
    DIRECTIVES,
    REWRITE_SIGNATURE,
    ClientOutputBufferLimit,
    Config,
    ConfigError,
    glob_match,
    load_config,
)
from disque.contracts.tls_settings import SETTINGS as TLS_SETTINGS
from test_config import REPO_ROOT, SAMPLE_CONF, parse


# ------------------------------------------------------------------------------------------
# CONFIG GET

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
