"""Commands the node runs on its own behalf: the cluster-wide queue figures and the
operations console (docs/console.md).

An InternalClient is a front-end Client with no socket: its commands go through the same
dispatch as a connection's (the Cython core's `dispatch`: the kernel's routing, the gates,
MONITOR, the workers' handlers), so the console's DELJOB is the client's DELJOB and a
renamed-away command is unknown to both. What the core writes to it is parsed by hiredis
and handed to the callbacks in order. It is never handed over to a worker (its
`affine_need` is out of reach) and is not listed by CLIENT LIST.
"""
import logging
from collections import deque


from disque._fast.frontcore import Client

log = logging.getLogger("disque.frontend")

NEVER_HANDED = 1 << 30


class ReplySink:
    """The transport the core writes an InternalClient's replies to."""

    def __init__(self, client):
        self.client = client

    def write(self, data):
        self.client.received(data)

    def close(self):
        self.client.closed = True

    def abort(self):
        self.close()

    def is_closing(self):
        return self.client.closed

    def get_write_buffer_size(self):
        return 0

    def get_extra_info(self, name, default=None):
        return default


class CommandError(Exception):
    """An error reply (its text, without the leading '-')."""


class QueryError(Exception):
    """A query that cannot be answered: its text goes back to the asker."""


def pairs(reply):
    """A flat [name, value, ...] reply (QSTAT, SHOW) as a dict with str names."""
    return {reply[i].decode(): reply[i + 1] for i in range(0, len(reply) - 1, 2)}


class InternalClient(Client):
    """`run(argv, done)`: done(reply) with the reply decoded (bytes, int, list, None, or a
    CommandError instance for an error reply). Commands run one at a time, in order."""

    def __init__(self, fe, who):
        super().__init__(fe)
        self.addr = who
        self.name = b"internal"
        self.authenticated = True
        self.affine_need = NEVER_HANDED
        self.transport = ReplySink(self)
        import hiredis              # the first console query pays for it, not every start
        self.reader = hiredis.Reader(replyError=CommandError)
        self.todo = deque()            # (argv, done) not sent yet
        self.current = None            # the callback of the command in flight

    def run(self, argv, done):
        self.todo.append((argv, done))
        if self.current is None:
            self.next()

    def run_all(self, argvs, done):
        """Run the commands in order; done(list of replies)."""
        replies = []
        if not argvs:
            done(replies)
            return
        last = len(argvs) - 1

        def one(i):
            def got(reply):
                replies.append(reply)
                if i == last:
                    done(replies)
            return got

        for i, argv in enumerate(argvs):
            self.run(argv, one(i))

    def next(self):
        while self.todo and self.current is None and not self.closed:
            argv, done = self.todo.popleft()
            self.current = done
            try:
                self.fe.dispatch(self, [a if type(a) is bytes else str(a).encode() for a in argv])
            except Exception as e:      # never leaves the caller waiting
                log.exception("internal command %r failed", argv[:2])
                self.current = None
                done(CommandError("ERR internal error: %s" % e))

    def received(self, data):
        self.reader.feed(data)
        while True:
            reply = self.reader.gets()
            if reply is False:
                return
            done, self.current = self.current, None
            if done is not None:
                done(reply)
            self.fe.loop.call_soon(self.next)
