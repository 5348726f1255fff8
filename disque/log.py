"""Logging for every process of a node: level, time, pid and role on every line.

    12345:frontend 2026-11-21 06:50:01.123 notice Ready to accept connections
"""
import logging
import sys

LEVELS = {"debug": logging.DEBUG, "verbose": 15, "notice": logging.INFO, "warning": logging.WARNING}
logging.addLevelName(15, "VERBOSE")
NAMES = {logging.DEBUG: "debug", 15: "verbose", logging.INFO: "notice",
         logging.WARNING: "warning", logging.ERROR: "error", logging.CRITICAL: "critical"}


class _Formatter(logging.Formatter):
    def __init__(self, role):
        super().__init__()
        self.role = role

    def format(self, record):
        t = self.formatTime(record, "%Y-%m-%d %H:%M:%S")
        msg = record.getMessage()
        if record.exc_info:
            msg += "\n" + self.formatException(record.exc_info)
        return "%d:%s %s.%03d %s %s" % (record.process, self.role, t, record.msecs,
                                         NAMES.get(record.levelno, record.levelname.lower()), msg)


def setup(role, level="notice", logfile=""):
    stream = open(logfile, "a", buffering=1) if logfile else sys.stdout
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_Formatter(role))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LEVELS.get(level, logging.INFO))
    return logging.getLogger("disque")
