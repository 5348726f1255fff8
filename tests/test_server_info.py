"""INFO (SPEC 14) against real servers."""

import os
import re
import signal
import time

import pytest

from support.admin import cli, CLIENT_LINE, needs_cli, OK, REDIS_CLI, SYNTAX
from support.info import info_sections, parse_info
from support.jobs import addjob
from support.resp_client import encode_command
from support.waits import wait_until
addjob, wait_until, encode = addjob, wait_until, encode_command


# ---------------------------------------------------------------------------
# INFO (SPEC 14)
# ---------------------------------------------------------------------------

SPEC_FIELDS = {
    "Server": ["disque_version", "disque_git_sha1", "disque_git_dirty", "disque_build_id", "os",
               "arch_bits", "multiplexing_api", "gcc_version", "process_id", "run_id",
               "tcp_port", "uptime_in_seconds", "uptime_in_days", "hz", "executable",
               "config_file"],
    "Clients": ["connected_clients", "client_longest_output_list", "client_biggest_input_buf",
                "blocked_clients"],
    "Memory": ["used_memory", "used_memory_human", "used_memory_rss", "used_memory_peak",
               "used_memory_peak_human", "mem_fragmentation_ratio", "mem_allocator",
               # ours, after upstream's: spilling (docs/memory.md)
               "spill_enabled", "spill_threshold_bytes", "spilled_jobs", "spill_index_bytes",
               "spilled_job_bytes", "spill_segments", "spill_disk_bytes", "spill_jobs_written", "spill_jobs_read",
               "spill_bytes_written", "spill_bytes_read", "spill_writes_per_sec",
               "spill_reads_per_sec", "spill_faults", "spill_compactions", "spill_compacted_bytes",
               "spill_errors",
               "spill_disk_ok", "spill_disk_error", "used_memory_with_spilled", "memory_level",
               "memory_level_with_spilled"],
    "Jobs": ["registered_jobs"],
    "Queues": ["registered_queues"],
    "Persistence": ["loading", "aof_enabled", "aof_state", "aof_rewrite_in_progress",
                    "aof_rewrite_scheduled", "aof_last_rewrite_time_sec",
                    "aof_current_rewrite_time_sec", "aof_last_bgrewrite_status",
                    "aof_last_write_status"],
    "Stats": ["total_connections_received", "total_commands_processed",
              "instantaneous_ops_per_sec", "total_net_input_bytes", "total_net_output_bytes",
              "instantaneous_input_kbps", "instantaneous_output_kbps", "rejected_connections",
              "latest_fork_usec"],
    "CPU": ["used_cpu_sys", "used_cpu_user", "used_cpu_sys_children", "used_cpu_user_children"],
}
HUMAN = re.compile(r"\d+B|\d+\.\d\d[KMGTP]")


def _fields(lines):
    return [line.split(":", 1)[0] for line in lines]


@pytest.mark.parametrize("section", ["", "default", "all", "everything"])
def test_info_every_section_and_field_in_order(server, section):
    r = server.raw()
    r.call("PING")
    text = r.execute("INFO", section) if section else r.execute("INFO")
    secs = info_sections(text)
    order = ["Server", "Clients", "Memory", "Jobs", "Queues", "Persistence", "Stats", "CPU",
             "Workers"]
    if section in ("all", "everything"):
        order.append("Commandstats")
    assert list(secs) == order
    for name, fields in SPEC_FIELDS.items():
        got = _fields(secs[name])
        if name == "Server":
            # ours: the number of workers, the connections they serve themselves
            # (docs/design.md), their restarts (docs/faults.md), those after an AOF write error
            # (docs/faults-disks.md)
            assert got == fields + ["workers", "connection_affinity",
                                    "connections_served_by_workers", "connection_handoffs",
                                    "connection_handbacks", "connection_follows", "worker_restarts", "worker_restarting",
                                    "worker_last_restart_unavailable_ms",
                                    "worker_max_restart_unavailable_ms",
                                    "worker_aof_restarts"], got
        else:
            assert got == fields, (name, got)
    assert text.endswith(b"\r\n") and not text.endswith(b"\r\n\r\n")
    values = parse_info(text)
    assert HUMAN.fullmatch(values["used_memory_human"]) and HUMAN.fullmatch(
        values["used_memory_peak_human"])
    assert re.fullmatch(r"\d+\.\d\d", values["mem_fragmentation_ratio"])
    for k in ("instantaneous_input_kbps", "instantaneous_output_kbps", "used_cpu_sys",
              "used_cpu_user", "used_cpu_sys_children", "used_cpu_user_children"):
        assert re.fullmatch(r"\d+\.\d\d", values[k]), k
    assert re.fullmatch(r"[0-9a-f]{40}", values["run_id"])
    assert values["workers"] == str(server.workers)
    assert len(secs["Workers"]) == server.workers
    if section in ("all", "everything"):
        for line in secs["Commandstats"]:
            assert re.fullmatch(r"cmdstat_[a-z]+:calls=\d+,usec=\d+,usec_per_call=\d+\.\d\d",
                                line), line


@pytest.mark.parametrize("name", ["server", "CLIENTS", "Memory", "jobs", "queues",
                                  "persistence", "stats", "cpu", "workers", "commandstats"])
def test_info_single_section_case_insensitive(server, name):
    r = server.raw()
    r.call("PING")
    secs = info_sections(r.execute("INFO", name))
    assert len(secs) == 1 and list(secs)[0].lower() == name.lower()


def test_info_errors(server):
    r = server.raw()
    assert r.call("INFO", "nosuch") == b"$0\r\n\r\n"
    assert r.call("INFO", "server", "clients") == SYNTAX


def test_info_instantaneous_metrics(server):
    r = server.raw()
    pipeline = encode("PING") * 200

    def busy():
        r.send(pipeline)
        for _ in range(200):
            r.read_reply()
        stats = parse_info(server.raw().execute("INFO", "stats"))
        return (int(stats["instantaneous_ops_per_sec"]) > 0
                and float(stats["instantaneous_input_kbps"]) > 0
                and float(stats["instantaneous_output_kbps"]) > 0)

    wait_until(busy, 10, interval=0.01)
    end = time.monotonic() + 1.0
    while time.monotonic() < end:             # ~1 s of steady load
        busy()
    peak = int(parse_info(server.raw().execute("INFO", "stats"))["instantaneous_ops_per_sec"])
    assert peak > 100
    # the mean of the last 16 samples: it decays within ~1.6 s of (near) silence
    wait_until(lambda: int(parse_info(server.raw().execute("INFO", "stats"))[
        "instantaneous_ops_per_sec"]) < 20, 10, interval=0.3)


def test_info_commandstats_and_resetstat(server):
    r = server.raw()
    addjob(r, "csq", b"x")
    r.call("PING")
    r.call("NOSUCH")                       # unknown: not counted
    r.call("QLEN")                         # arity error: not counted
    stats = info_sections(r.execute("INFO", "commandstats"))["Commandstats"]
    names = {line.split(":")[0] for line in stats}
    assert {"cmdstat_addjob", "cmdstat_ping"} <= names
    assert not any("nosuch" in n for n in names)
    before = parse_info(r.execute("INFO", "stats"))
    assert int(before["total_commands_processed"]) > 3
    assert r.call("CONFIG", "RESETSTAT") == OK
    after = parse_info(r.execute("INFO", "stats"))
    assert int(after["total_commands_processed"]) <= 2
    assert after["total_connections_received"] == "0"
    stats = info_sections(r.execute("INFO", "commandstats"))["Commandstats"]
    assert not any(line.startswith("cmdstat_addjob:") for line in stats)
    addjob(r, "csq", b"x")
    line = [ln for ln in info_sections(r.execute("INFO", "commandstats"))["Commandstats"]
            if ln.startswith("cmdstat_addjob:")][0]
    m = re.fullmatch(r"cmdstat_addjob:calls=1,usec=(\d+),usec_per_call=(\d+\.\d\d)", line)
    assert m and int(m.group(1)) < 100000, line


def test_info_clients_counts(server):
    r = server.raw()
    extra = [server.raw() for _ in range(3)]
    for e in extra:
        e.call("PING")
    clients = parse_info(r.execute("INFO", "clients"))
    assert int(clients["connected_clients"]) >= 4
    for e in extra:
        e.close()
    wait_until(lambda: int(parse_info(r.execute("INFO", "clients"))["connected_clients"]) <= 2, 5)


@needs_cli
def test_info_and_client_list_through_redis_cli(server):
    out = cli(server, "INFO", "server")
    assert out.returncode == 0 and out.stdout.startswith("# Server\ndisque_version:1.0-rc1\n")
    out = cli(server, "CLIENT", "LIST")
    assert CLIENT_LINE.fullmatch(out.stdout.strip()), out.stdout
    out = cli(server, "--no-raw", "CLIENT", "GETNAME")
    assert out.stdout == "(nil)\n"
    out = cli(server, "--no-raw", "CLIENT", "BOGUS")
    assert out.stdout.strip() == ("(error) ERR Syntax error, try CLIENT (LIST | KILL ip:port | "
                                  "GETNAME | SETNAME connection-name)")
    out = cli(server, "--no-raw", "TIME")
    assert re.fullmatch(r'1\) "\d{10}"\n2\) "\d+"\n', out.stdout), out.stdout
    out = cli(server, "COMMAND", "COUNT")
    assert out.stdout == "33\n"


@needs_cli
def test_redis_cli_interactive_session(server):
    """redis-cli's prompt mode asks COMMAND DOCS at start; our error makes it use its own
    help table, and the session works."""
    import pty
    import select
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["TERM"] = "dumb"
        os.execv(REDIS_CLI, [REDIS_CLI, "-p", str(server.port)])
    out = b""
    try:
        def read_until(marker, timeout=10):
            nonlocal out
            deadline = time.monotonic() + timeout
            while marker not in out and time.monotonic() < deadline:
                ready, _, _ = select.select([fd], [], [], 0.1)
                if ready:
                    try:
                        out += os.read(fd, 65536)
                    except OSError:
                        break
            return marker in out

        assert read_until(b"> "), out
        os.write(fd, b"PING\n")
        assert read_until(b"PONG"), out
        os.write(fd, b"QLEN interactive-q\n")
        assert read_until(b"(integer) 0"), out
        os.write(fd, b"QUIT\n")
    finally:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
        os.waitpid(pid, 0)
        os.close(fd)
