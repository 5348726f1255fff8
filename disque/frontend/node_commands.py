"""Node-level commands the front-end answers (SPEC 4): PING, ECHO, TIME, HELLO, INFO,
CONFIG (with the front-end side effects of CONFIG SET), DEBUG, SHUTDOWN, LOADJOB.

Worker halves, where a command needs the workers, are control requests: "info"
(`Shard.info`), "flushall" (DEBUG FLUSHALL, CLUSTER RESET), the "aof_*" controls.
"""
import logging
import time

from disque import info as info_mod
from disque import log as dlog
from disque import replies
from disque._fast import resp
from disque._fast.dispatch import ping_reply
from disque.bus import announce
from disque.frontend.persistence_phases import AOF_DIRECTIVES
from disque.replies import one_line

log = logging.getLogger("disque.frontend")

LOADJOB_REFUSED = b"-ERR LOADJOB is a special command only processed from AOF\r\n"


HELLO_PRIORITY_BY_PRESSURE = (b"1", b"2", b"50")   # as disque/bus/cluster.py hello_entries

class NodeCommands:
    """Needs from the node (`fe`): cfg, node_id, control_all, info_snapshot,
    commands_processed, shutdown_cb, and the parts whose settings CONFIG SET changes
    (auth, connections, monitoring, memory, persistence) or whose figures INFO shows."""

    def __init__(self, fe, cfg):
        self.fe = fe
        self.cfg = cfg
        self.started_up = False

    def start(self):
        """Apply the directives the front-end acts on, as CONFIG SET would."""
        for name in ("requirepass", "maxclients", "slowlog-log-slower-than", "slowlog-max-len",
                     "client-output-buffer-limit"):
            self.config_changed(name)
        self.started_up = True

    def config_changed(self, name):
        """Apply the front-end side effect of a directive (startup and CONFIG SET).
        Returns an error reply when the new value cannot be applied (it is then undone)."""
        fe = self.fe
        if self.started_up and name in ("connection-affinity", "requirepass", "timeout",
                                        "slowlog-log-slower-than"):
            fe.handover.config_changed(name)
        if name == "requirepass":
            fe.auth.apply_requirepass()
        elif name == "maxclients":
            return fe.connections.apply_maxclients(self.started_up)
        elif name in ("slowlog-log-slower-than", "slowlog-max-len"):
            fe.monitoring.apply_slowlog_config(name)
        elif name == "client-output-buffer-limit":
            fe.connections.apply_output_limits()
            if self.started_up:
                fe.handover.config_changed(name)    # after: it pushes fe.obuf_limited
        elif name == "maxmemory":
            if self.started_up:
                fe.memory.maxmemory_changed()
        elif name == "loglevel":
            logging.getLogger().setLevel(dlog.LEVELS.get(self.cfg.loglevel, logging.INFO))
        elif name in AOF_DIRECTIVES:
            return fe.persistence.config_changed(name)
        elif name.startswith("tls-"):
            return fe.tls_port.config_changed(name)
        return None

    def config_set_pairs(self, pairs):
        """CONFIG SET name value [name value ...] (as Redis 7): every value is checked and
        stored first (one refused: those stored are put back, nothing else happens), then
        each directive's side effect runs once, so a certificate and its key change together.
        Returns an error reply or None."""
        cfg = self.cfg
        stored = []
        try:
            for name, value in pairs:
                try:
                    before = cfg.get(name)
                except KeyError:
                    before = None
                cfg.config_set(name, value)
                stored.append((name, before))
        except Exception:
            for name, before in reversed(stored):
                setattr(cfg, name.lower().replace("-", "_"), before)
            raise
        for name in dict.fromkeys(name.lower() for name, _ in pairs):
            err = self.config_changed(name)     # front-end side effects
            if err:
                return err
        return None

    def cmd_ping(self, client, argv):
        client.reply(ping_reply(argv))


    def cmd_hello(self, client, argv):
        relay = self.fe.relay
        if relay.cluster is not None:
            client.reply(relay.hello_reply())
            return
        me = self.fe.node_id
        prio = HELLO_PRIORITY_BY_PRESSURE[self.fe.memory.pressure]
        told = announce.from_config(self.cfg)         # HELLO tells the announced address
        node = resp.bulk_array([me, told.ip.encode(), str(told.port).encode(), prio])
        client.reply(b"*3\r\n:1\r\n" + resp.bulk(me) + node)

    def cmd_echo(self, client, argv):
        client.reply(resp.bulk(argv[1]))

    def cmd_time(self, client, argv):
        t = time.time()
        sec = int(t)
        client.reply(resp.bulk_array([str(sec).encode(), str(int((t - sec) * 1e6)).encode()]))

    def cmd_loadjob(self, client, argv):
        client.reply(LOADJOB_REFUSED)

    def cmd_debug(self, client, argv):
        sub = argv[1].lower()
        if sub == b"flushall" and len(argv) == 2:
            s = client.slot()
            self.fe.control_all("flushall", None, lambda res: s.fill(resp.OK))
        elif sub == b"sleep" and len(argv) == 3:
            try:
                secs = float(argv[2])
            except ValueError:
                secs = 0.0
            time.sleep(max(0.0, secs))
            client.reply(resp.OK)
        elif sub == b"bus" and len(argv) == 3 and self.fe.relay.cluster is not None:
            self.fe.relay.debug_bus(client, argv[2])
        elif sub == b"error" and len(argv) == 3:
            client.reply(b"-" + one_line(argv[2]) + b"\r\n")
        else:
            client.reply(b"-ERR Unknown DEBUG subcommand or wrong number of arguments for '%s'\r\n"
                         % one_line(argv[1]))

    def cmd_shutdown(self, client, argv):
        if len(argv) > 2 or (len(argv) == 2 and argv[1].lower() != b"rewrite-aof"):
            client.reply(replies.SYNTAX_ERROR)
            return
        log.warning("User requested shutdown...")
        if self.fe.persistence.shutdown(client, len(argv) == 2):
            return                          # REWRITE-AOF: the files first
        if self.fe.shutdown_cb:
            self.fe.shutdown_cb()

    def cmd_config(self, client, argv):
        sub = argv[1].lower()
        cfg = self.cfg
        try:
            if sub == b"get" and len(argv) == 3:
                pairs = cfg.config_get(argv[2].decode(errors="replace"))
                client.reply(config_reply_pairs(client, pairs))   # a map for RESP3
            elif sub == b"set" and len(argv) >= 4 and len(argv) % 2 == 0:
                err = self.config_set_pairs([(argv[i].decode(errors="replace"),
                                              argv[i + 1].decode(errors="replace"))
                                             for i in range(2, len(argv), 2)])
                if err:
                    client.reply(err)
                else:                   # OK once the workers serving connections have it too
                    s = client.slot()
                    self.fe.handover.when_configured(lambda: s.fill(resp.OK))
            elif sub == b"rewrite" and len(argv) == 2:
                cfg.rewrite()
                client.reply(resp.OK)
            elif sub == b"resetstat" and len(argv) == 2:
                self.fe.stats.reset(client)
            elif sub in (b"get", b"set", b"rewrite", b"resetstat"):
                client.reply(b"-ERR Wrong number of arguments for CONFIG %s\r\n" % argv[1].upper())
            else:
                client.reply(b"-ERR CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE\r\n")
        except Exception as e:   # ConfigError carries the exact message
            msg = getattr(e, "message", None) or str(e) or "error"
            client.reply(b"-ERR " + one_line(msg.encode("utf-8", "surrogateescape")) + b"\r\n")

    def cmd_info(self, client, argv):
        fe = self.fe
        if len(argv) > 2:
            client.reply(replies.SYNTAX_ERROR)
            return
        section = argv[1].decode(errors="replace").lower() if len(argv) == 2 else "default"
        if section in info_mod.LIVE_SECTIONS:
            s = client.slot()
            fe.control_all("info", None,
                           lambda workers: s.fill(resp.bulk(info_mod.render(fe, workers, section))))
            return
        # from the workers' last figures while they are exact (disque/info_snapshot.py)
        mark = fe.commands_processed - fe.local_dispatch.local_commands
        if fe.handover.serving():
            # workers serve connections themselves: what they did since the snapshot is
            # unknown here, so every INFO asks them (disque/frontend/handover.py)
            mark = object()
        workers = fe.info_snapshot.fresh(mark)
        if workers is not None:
            client.reply(resp.bulk(info_mod.render(fe, workers, section)))
            return
        s = client.slot()
        fe.info_snapshot.wait(fe, mark, lambda workers: s.fill(
            resp.bulk(info_mod.render(fe, workers, section))))


def config_reply_pairs(client, pairs):
    """CONFIG GET's reply: a flat array, or a map for a RESP3 client."""
    flat = []
    for k, v in pairs:
        flat += [k.encode(), v.encode("utf-8", "surrogateescape")]
    if client.resp3:
        return b"%%%d\r\n" % len(pairs) + b"".join(resp.bulk(x) for x in flat)
    return resp.bulk_array(flat)
