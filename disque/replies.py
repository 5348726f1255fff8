"""Fixed replies, in one place (the original's shared objects): RESP bytes ready to write.

Error texts are the contract of docs/spec.md (section numbers below); a reply used by more
than one part of the server lives here rather than as a second literal.
"""

OK = b"+OK\r\n"
PONG = b"+PONG\r\n"
SYNTAX_ERROR = b"-ERR syntax error\r\n"                                        # SPEC 1.3
NOT_INTEGER = b"-ERR value is not an integer or out of range\r\n"              # SPEC 1.3
BADID = b"-BADID Invalid Job ID format.\r\n"                                  # SPEC 5
# a node leaving the cluster refuses to wait for copies or jobs (SPEC 8.7)
LEAVING_ERROR = (b"-LEAVING This node is leaving the cluster, please connect to a "
                 b"different one\r\n")
TIMEOUT_NOT_INTEGER = b"-ERR timeout is not an integer or out of range\r\n"   # SPEC 3.1, 3.2
TIMEOUT_NEGATIVE = b"-ERR timeout is negative\r\n"                            # SPEC 3.1, 3.2
DELAY_NEGATIVE = b"-ERR DELAY time must be a non negative number\r\n"         # SPEC 3.1
INTERNAL_ERROR = b"-ERR internal error, check server logs\r\n"
WORKER_DIED = (b"-ERR worker process died while running this command (the node restarted "
               b"it); retry\r\n")


def misconf(error):
    """-MISCONF after a failed AOF write (SPEC 1.3 step 6, 12)."""
    return b"-MISCONF Errors writing to the AOF file: %s\r\n" % error.encode("utf-8", "replace")


def arity_error(name):
    return b"-ERR wrong number of arguments for '%s' command\r\n" % name.encode()


def one_line(text):
    """Client input echoed in an error: CR/LF become spaces, as upstream's
    addReplyErrorFormat does, so a client cannot break (or forge) the reply stream."""
    return text.replace(b"\r", b" ").replace(b"\n", b" ")
