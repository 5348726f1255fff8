"""Unit tests for disque/config/: the command line (disque-server [file] [--name value ...])."""

from __future__ import annotations

import io

import pytest

from disque.config import (
    ClientOutputBufferLimit,
    Config,
    ConfigError,
    ShowHelp,
    ShowVersion,
    parse_command_line,
)
from test_config import FATAL_HEADER


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
