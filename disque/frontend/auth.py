"""AUTH and `requirepass` (SPEC 1.3 step 4, 4.5), and the Redis 6 `HELLO <protover>
[AUTH user pass] [SETNAME name]` handshake that selects RESP2 or RESP3.

The per-command check is a flag of the Cython core (`auth_required`); plain HELLO is
Disque's own command (NodeCommands.cmd_hello).
"""
from disque import replies
from disque import VERSION
from disque._fast import resp
from disque.frontend.connections import BAD_CLIENT_NAME, valid_name
from disque.replies import one_line

NO_PASSWORD = b"-ERR Client sent AUTH, but no password is set\r\n"
BAD_PASSWORD = b"-ERR invalid password\r\n"
WRONGPASS = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
NOPROTO = b"-NOPROTO unsupported protocol version\r\n"
HELLO_NOAUTH = (b"-NOAUTH HELLO must be called with the client already authenticated, otherwise "
                b"the HELLO AUTH <user> <pass> option can be used to authenticate the client and "
                b"select the RESP protocol version at the same time\r\n")
PROTOVER_NOT_INTEGER = b"-ERR Protocol version is not an integer or out of range\r\n"


class Auth:
    """Needs from the node (`fe`): cfg, auth_required (set here), and
    `fe.node_commands.cmd_hello` (HELLO without a version). Offers: cmd_auth,
    cmd_hello_handshake, apply_requirepass (config)."""

    def __init__(self, fe, cfg):
        self.fe = fe
        self.cfg = cfg
        self.requirepass = None

    def apply_requirepass(self):
        pw = self.cfg.requirepass
        self.requirepass = pw.encode("utf-8", "surrogateescape") if pw else None
        self.fe.auth_required = self.requirepass is not None

    def password_ok(self, password):
        import hmac                 # a node with requirepass only
        return self.requirepass is not None and hmac.compare_digest(password, self.requirepass)

    def cmd_auth(self, client, argv):
        if self.requirepass is None:
            client.reply(NO_PASSWORD)
        elif self.password_ok(argv[1]):
            client.authenticated = True
            client.reply(replies.OK)
        else:
            client.authenticated = False
            client.reply(BAD_PASSWORD)

    def cmd_hello_handshake(self, client, argv):
        """HELLO alone: the Disque reply (SPEC 4.1). HELLO <protover> [AUTH user pass]
        [SETNAME name]: the Redis 6 handshake, which also selects RESP2 or RESP3."""
        if len(argv) == 1:
            self.fe.node_commands.cmd_hello(client, argv)
            return
        ver = resp.parse_int(argv[1])
        if ver is None:
            client.reply(PROTOVER_NOT_INTEGER)
            return
        if ver < 2 or ver > 3:
            client.reply(NOPROTO)
            return
        name = None
        i, argc = 2, len(argv)
        while i < argc:
            opt = argv[i].lower()
            more = argc - 1 - i
            if opt == b"auth" and more >= 2:
                user, password = argv[i + 1], argv[i + 2]
                # the only user is "default"; with no requirepass it has no password
                if user != b"default" or (self.requirepass is not None
                                          and not self.password_ok(password)):
                    client.reply(WRONGPASS)
                    return
                client.authenticated = True
                i += 3
            elif opt == b"setname" and more >= 1:
                name = argv[i + 1]
                if not valid_name(name):
                    client.reply(BAD_CLIENT_NAME)
                    return
                i += 2
            else:
                client.reply(b"-ERR Syntax error in HELLO option '%s'\r\n" % one_line(argv[i]))
                return
        if self.fe.auth_required and not client.authenticated:
            client.reply(HELLO_NOAUTH)
            return
        if name is not None:
            client.name = name
        client.resp3 = ver == 3
        fields = [(b"server", resp.bulk(b"disque")), (b"version", resp.bulk(VERSION.encode())),
                  (b"proto", b":%d\r\n" % ver), (b"id", b":%d\r\n" % client.id),
                  (b"mode", resp.bulk(b"standalone")), (b"role", resp.bulk(b"master")),
                  (b"modules", b"*0\r\n")]
        head = b"%%%d\r\n" % len(fields) if ver == 3 else b"*%d\r\n" % (2 * len(fields))
        client.reply(head + b"".join(resp.bulk(k) + v for k, v in fields))
