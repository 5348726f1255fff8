"""One TLS connection's OpenSSL state between two memory BIOs, for every TLS end a worker
runs: the client port's connections (tls_clients.py, and the served loop in C once they are
served here) and the direct job links of a secured cluster (job_links.py).

The socket stays a plain non-blocking one that the caller reads and writes: what it
receives is fed in (`feed`), whole records come out decrypted (`read`), plaintext goes in
(`encrypt`) and the records to send come out (`take`). So a read is one recv as for
plaintext (an SSLSocket reads a record's header and body with two recvs, and may keep
decrypted bytes where epoll cannot see them), OpenSSL never has a socket write to retry,
and records made but not sent can move with the connection.
"""
import ssl

READ_SIZE = 65536

# what a failed handshake or a bad record raises
TLS_ERRORS = (ssl.SSLError, OSError, ValueError)


class TlsPump:
    __slots__ = ("obj", "sslobj", "inc", "out")

    def __init__(self, context, server_side, server_hostname=None):
        self.inc = ssl.MemoryBIO()
        self.out = ssl.MemoryBIO()
        self.obj = context.wrap_bio(self.inc, self.out, server_side=server_side,
                                    server_hostname=server_hostname)
        # the C object whose methods ssl.SSLObject's read, write and pending pass their
        # arguments to as they are: called directly, per record, here and by the served
        # loop and the job links (servedloop.pyx, joblinkpath.pyx), without a Python frame
        # (the SSLObject itself, which has the same methods, if a Python has no such object)
        self.sslobj = getattr(self.obj, "_sslobj", self.obj)

    def handshake(self):
        """A step of the handshake: True once it is done, False while it waits for the
        peer. Raises one of TLS_ERRORS when it failed (`take` then holds the alert that
        says why, when there is one)."""
        try:
            self.obj.do_handshake()
        except ssl.SSLWantReadError:
            return False
        return True

    def feed(self, data):
        """Bytes received from the socket."""
        self.inc.write(data)

    def has_input(self):
        """Whether records (or decrypted bytes) wait to be read."""
        return self.inc.pending or self.sslobj.pending()

    def read(self, size=READ_SIZE, buffer=None):
        """Plaintext of the records fed so far, at most `size` bytes (into `buffer`: the
        count); None while a record is incomplete; b"" (or 0) at the peer's close_notify.
        Raises one of TLS_ERRORS on a bad record."""
        try:
            return self.sslobj.read(size, buffer) if buffer is not None else self.sslobj.read(size)
        except ssl.SSLWantReadError:
            return None
        except ssl.SSLZeroReturnError:
            return 0 if buffer is not None else b""

    def encrypt(self, data):
        """The records for `data` (whole: a memory BIO takes everything), with anything
        OpenSSL had waiting before them."""
        self.sslobj.write(data)
        return self.out.read()

    def take(self):
        """The records waiting to be sent (a handshake flight, an alert, a key update)."""
        return self.out.read() if self.out.pending else b""

    def version(self):
        return self.obj.version()

    def cipher_name(self):
        cipher = self.obj.cipher()
        return cipher[0] if cipher else "?"
