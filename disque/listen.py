"""Listening TCP sockets, bound before the workers start so that a busy port fails fast."""
import socket


def bind_tcp(addrs, port, backlog, what):
    """One non-blocking listening socket per address; on failure every socket made so far is
    closed and OSError says `what` could not be created, with the address and the reason."""
    socks = []
    for addr in addrs:
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        s = socket.socket(family, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((addr, port))
        except OSError as e:
            s.close()
            for o in socks:
                o.close()
            raise OSError("Creating %s %s:%d: %s" % (what, addr, port, e.strerror)) from e
        s.listen(backlog)
        s.setblocking(False)
        socks.append(s)
    return socks
