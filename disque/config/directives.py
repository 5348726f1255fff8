"""The directive table: every directive once, with its kind, default and CONFIG GET / SET / REWRITE rules."""
from __future__ import annotations

import os
from typing import Any, NamedTuple

from disque.config.constants import MAX_HZ, MAX_PASSWORD_LENGTH, MAX_PORT, MIN_HZ
from disque.config.kinds import _check_bare_filename, _check_ip_literal, AddressList, Bool, ClientOutputBufferLimit, CommandRenames, Directory, Enum, Include, Integer, KeepaliveInteger, Kind, Memory, Octal, OutputBufferLimits, Secret, String


# a NamedTuple, not a dataclass: dataclasses (and inspect) would be a node's only reason
# to import them before it forks its workers
class Directive(NamedTuple):
    name: str
    kind: Kind
    default: Any  # a value, or a zero-argument callable for defaults known only at run time
    gettable: bool = False  # listed by CONFIG GET
    settable: bool = False  # changeable by CONFIG SET
    rewritten: bool = False  # written by CONFIG REWRITE (in table order)
    in_file: bool = True  # accepted in the config file / as a --option
    always_rewritten: bool = False  # written even when equal to the default (upstream does so for dir)

    @property
    def has_value(self) -> bool:
        return not isinstance(self.kind, Include)

    def default_value(self) -> Any:
        value = self.default() if callable(self.default) else self.default
        if isinstance(value, (list, dict)):
            value = type(value)(value)  # never share a mutable default between configs
        return value


def _default_workers() -> int:
    return os.cpu_count() or 1


# Shorthands for the table: G = CONFIG GET, S = CONFIG SET, R = CONFIG REWRITE.
_G = dict(gettable=True)
_GR = dict(gettable=True, rewritten=True)
_GSR = dict(gettable=True, settable=True, rewritten=True)

_TABLE: list[Directive] = [
    # Rewritten directives, in upstream's CONFIG REWRITE order (SPEC 13).
    Directive("daemonize", Bool(), False, **_GR),
    Directive("pidfile", String(), "/var/run/disque.pid", **_GR),
    Directive("port", Integer("Invalid port", 0, MAX_PORT), 7711, **_GR),
    Directive("tcp-backlog", Integer("Invalid backlog value", 0), 511, **_GR),
    Directive("bind", AddressList("Too many bind addresses specified"), ["127.0.0.1"], **_GR),
    Directive("unixsocket", String(empty_is_none=True), None, **_GR),
    Directive("unixsocketperm", Octal("Invalid socket file permissions"), 0, **_GR),
    Directive("timeout", Integer("Invalid timeout value", 0), 0, **_GSR),
    Directive("tcp-keepalive", KeepaliveInteger("Invalid tcp-keepalive value", 0), 0, **_GSR),
    Directive("loglevel", Enum("Invalid log level. Must be one of debug, verbose, notice, warning",
                               ("debug", "verbose", "notice", "warning")), "notice", **_GSR),
    Directive("logfile", String(), "", **_GR),
    Directive("syslog-enabled", Bool(), False, rewritten=True),
    Directive("syslog-ident", String(), "disque", rewritten=True),
    Directive("syslog-facility", Enum("Invalid log facility. Must be one of USER or between LOCAL0-LOCAL7",
                                      ("user",) + tuple(f"local{n}" for n in range(8))), "local0", **_GR),
    Directive("dir", Directory(), os.getcwd, always_rewritten=True, **_GSR),
    Directive("requirepass", String("Password is longer than CONFIG_AUTHPASS_MAX_LEN",
                                    max_length=MAX_PASSWORD_LENGTH, empty_is_none=True), None, **_GSR),
    Directive("maxclients", Integer("Invalid max clients limit", 1), 10000, **_GSR),
    Directive("maxmemory", Memory("Invalid maxmemory value (must be greater than 0)", 1, set_minimum=0),
              1024**3, **_GSR),
    Directive("maxmemory-policy", Enum("Invalid maxmemory policy", ("acks", "noeviction")), "acks", **_GSR),
    Directive("maxmemory-samples", Integer("maxmemory-samples must be 1 or greater", 1), 5, **_GSR),
    # spilling job bodies to `dir` past a share of maxmemory (docs/memory.md, "Spilling")
    Directive("spill", Bool(), True, **_GSR),
    Directive("spill-threshold", Integer("spill-threshold must be between 10 and 90", 10, 90), 60, **_GSR),
    Directive("spill-keep", Integer("spill-keep must be 64 or greater", 64), 4096, **_GSR),
    Directive("appendonly", Bool(), False, **_GSR),
    Directive("appendfilename", String(check=_check_bare_filename), "disque.aof", rewritten=True),
    Directive("appendfsync", Enum("argument must be 'no', 'always' or 'everysec'",
                                  ("always", "everysec", "no")), "everysec", **_GSR),
    Directive("no-appendfsync-on-rewrite", Bool(), False, **_GR),
    Directive("auto-aof-rewrite-percentage",
              Integer("Invalid negative percentage for AOF auto rewrite", 0), 100, **_GSR),
    Directive("auto-aof-rewrite-min-size", Memory("Invalid auto-aof-rewrite-min-size value"),
              64 * 1024**2, **_GSR),
    Directive("cluster-config-file", String(), "nodes.conf", rewritten=True),
    Directive("cluster-node-timeout", Integer("cluster-node-timeout must be 1 or greater", 1, set_minimum=0),
              15000, **_GSR),
    Directive("slowlog-log-slower-than", Integer("Invalid slowlog-log-slower-than value", set_minimum=0),
              10000, **_GSR),
    Directive("latency-monitor-threshold", Integer("The latency threshold can't be negative", 0), 0, **_GSR),
    Directive("slowlog-max-len", Integer("Invalid slowlog-max-len value", 0), 128, **_GSR),
    Directive("activerehashing", Bool(), True, **_GSR),
    Directive("client-output-buffer-limit", OutputBufferLimits(), ClientOutputBufferLimit(0, 0, 0), **_GSR),
    Directive("hz", Integer("Invalid hz value", set_minimum=0, clamp=(MIN_HZ, MAX_HZ)), 10, **_GSR),
    Directive("aof-rewrite-incremental-fsync", Bool(), True, **_GSR),
    Directive("aof-load-truncated", Bool(), True, **_GSR),
    Directive("aof-enqueue-jobs-once", Bool(), False, **_GSR),
    # Our additions (rewritten after upstream's list so they survive CONFIG REWRITE).
    Directive("workers", Integer("Invalid number of workers (must be 1 or greater)", 1),
              _default_workers, **_GR),
    Directive("worker-link", Enum("argument must be 'unix' or 'zmq'", ("unix", "zmq")), "unix", **_GR),
    # workers serve the connections of their queues themselves (docs/design.md)
    Directive("connection-affinity", Bool(), True, **_GSR),
    # job messages between nodes go worker to worker, not through the front-ends (docs/design.md)
    Directive("cluster-job-links", Enum("argument must be 'direct' or 'bus'", ("direct", "bus")),
              "direct", **_GR),
    # where this node tells the others it is, behind NAT or in containers (docs/cluster.md,
    # "Announced addresses"); unset (empty / 0): the bind address, port, port + 10000 and the
    # job links' own ports, as before. Redis Cluster's names and meanings.
    Directive("cluster-announce-ip", String(empty_is_none=True, check=_check_ip_literal), None, **_GR),
    Directive("cluster-announce-port", Integer("Invalid cluster-announce-port", 0, 65535), 0, **_GR),
    Directive("cluster-announce-bus-port", Integer("Invalid cluster-announce-bus-port", 0, 65535), 0, **_GR),
    # the direct job links' ports: worker w listens on base + w (0: chosen by the kernel), and
    # the ports the other nodes are told (0: the ports listened on)
    Directive("cluster-job-link-port", Integer("Invalid cluster-job-link-port", 0, 65535), 0, **_GR),
    Directive("cluster-announce-job-link-port",
              Integer("Invalid cluster-announce-job-link-port", 0, 65535), 0, **_GR),
    Directive("stats-log-file", String(), "", **_GSR),
    Directive("stats-log-interval", Integer("Invalid stats-log-interval (must be 1 or greater)", 1),
              10, **_GSR),
    # HTTP endpoint for Prometheus and the dashboard (docs/metrics.md); bound like `bind`
    Directive("metrics-port", Integer("Invalid metrics-port", 0, 65535), 0, **_GR),
    Directive("metrics-auth", Bool(), True, **_GSR),
    # HTTPS on the metrics port with the tls-cert-file / tls-key-file certificate
    Directive("metrics-tls", Bool(), False, **_GR),
    # the operations console may act on queues and jobs (docs/console.md): needs requirepass
    Directive("metrics-actions", Bool(), False, **_GSR),
    # how long QLEN/QSTAT/QPEEK ... CLUSTER and the console wait for the other nodes, in ms
    Directive("cluster-query-timeout", Integer("Invalid cluster-query-timeout (must be 1 or greater)", 1),
              1000, **_GSR),
    # TLS on the client port, with Redis' names and meanings (docs/security.md, "TLS");
    # CONFIG SET of a file directive reloads the certificates for new connections
    Directive("tls-port", Integer("Invalid tls-port", 0, MAX_PORT), 0, **_GR),
    Directive("tls-cert-file", String(), "", **_GSR),
    Directive("tls-key-file", String(), "", **_GSR),
    Directive("tls-key-file-pass", String(), "", **_GSR),
    Directive("tls-ca-cert-file", String(), "", **_GSR),
    Directive("tls-ca-cert-dir", String(), "", **_GSR),
    Directive("tls-dh-params-file", String(), "", **_GSR),
    Directive("tls-auth-clients", Enum("argument must be 'yes', 'no' or 'optional'",
                                       ("yes", "no", "optional")), "yes", **_GSR),
    Directive("tls-protocols", String(), "", **_GSR),
    Directive("tls-ciphers", String(), "", **_GSR),
    Directive("tls-prefer-server-ciphers", Bool(), False, **_GSR),
    Directive("tls-session-caching", Bool(), True, **_GSR),
    # Never rewritten: kept as they are in the file.
    Directive("databases", Integer("Invalid number of databases", 1), 16, **_G),
    Directive("watchdog-period", Integer("Invalid watchdog-period value", 0), 0,
              gettable=True, settable=True, in_file=False),
    Directive("rename-command", CommandRenames(), {}),
    # The cluster bus secret (docs/security.md): shown as "(hidden)", never rewritten, never
    # settable at run time (the bus keys are fixed when its socket is bound).
    Directive("cluster-secret", Secret("cluster-secret"), None, **_G),
    Directive("cluster-secret-previous", Secret("cluster-secret-previous"), None, **_G),
    Directive("cluster-secret-file", String(), "", **_G),
    Directive("include", Include(), None),
]

DIRECTIVES: dict[str, Directive] = {directive.name: directive for directive in _TABLE}

# Attribute names that are not simply the directive name with "-" -> "_".
_ATTRIBUTE_ALIASES = {"rename_commands": "rename-command"}


