"""Configuration errors (upstream's fatal messages) and the early exits of the command line."""
from __future__ import annotations

import sys

from disque.config.constants import DISQUE_VERSION



class ConfigError(Exception):
    """A bad configuration: a file/command-line line, or a refused CONFIG SET / REWRITE.

    With a line attached, ``str()`` is upstream's four-line fatal report; without one it is the
    bare message (what CONFIG SET / REWRITE reply after ``-ERR ``).
    """

    def __init__(
        self,
        message: str,
        *,
        line_number: int | None = None,
        line: str | None = None,
        filename: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.line_number = line_number
        self.line = line
        self.filename = filename  # set only for errors inside an included file

    def __str__(self) -> str:
        if self.line_number is None:
            return self.message
        return (
            "*** FATAL CONFIG FILE ERROR ***\n"
            f"Reading the configuration file, at line {self.line_number}\n"
            f">>> '{self.line}'\n"
            f"{self.message}"
        )

    @property
    def one_line(self) -> str:
        """The same error on one line, for a server that logs one line and exits 1."""
        if self.line_number is None:
            return f"config error: {self.message}"
        where = f"line {self.line_number}"
        if self.filename:
            where += f" of {self.filename}"
        return f"config error at {where} ('{self.line}'): {self.message}"


class CommandLineExit(Exception):
    """The command line asked for text instead of a server: print ``text`` and exit 0."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class ShowHelp(CommandLineExit):
    """``-h`` / ``--help``."""


class ShowVersion(CommandLineExit):
    """``-v`` / ``--version``."""


def version_text() -> str:
    bits = 64 if sys.maxsize > 2**32 else 32
    return f"Disque server v={DISQUE_VERSION} sha=00000000:0 malloc=libc bits={bits} build=0"


