"""Value kinds: how one directive's arguments are parsed, checked and printed."""
from __future__ import annotations

import errno
import os
import re
from typing import Any, Callable, Iterable, NamedTuple

from disque.config.constants import MAX_BIND_ADDRESSES, MAX_PASSWORD_LENGTH, MIN_SECRET_LENGTH
from disque.config.errors import ConfigError
from disque.config.values import format_memory, parse_integer, parse_memory, parse_yes_no, quote_arg



class _Invalid(ValueError):
    """A value refused by a kind; the loader turns it into a ConfigError for the line."""


class Kind:
    """Parsing and printing rules for one directive. Subclasses override what differs.

    * ``parse(args, current)``: the arguments of a config line -> typed value, or raise
      ``_Invalid(message)`` with upstream's fatal message.
    * ``parse_set(text, current)``: a CONFIG SET value -> typed value; ValueError means "Invalid
      argument", a ConfigError is replied as it is.
    * ``show(value)``: the CONFIG GET text. ``rewrite_args(value)``: the text after the name in a
      rewritten file, or None when the directive must be absent.
    """

    min_args = 1
    max_args: int | None = 1

    def __init__(self, error: str = "") -> None:
        self.error = error

    def accepts(self, count: int) -> bool:
        return count >= self.min_args and (self.max_args is None or count <= self.max_args)

    def parse(self, args: list[str], current: Any) -> Any:
        try:
            return self.parse_set(args[0], current)
        except ValueError:
            raise _Invalid(self.error) from None

    def parse_set(self, text: str, current: Any) -> Any:
        raise NotImplementedError

    def show(self, value: Any) -> str:
        return str(value)

    def rewrite_args(self, value: Any) -> str | None:
        return self.show(value)

    def to_json(self, value: Any) -> Any:
        return value

    def from_json(self, data: Any) -> Any:
        return data


class Bool(Kind):
    def __init__(self) -> None:
        super().__init__("argument must be 'yes' or 'no'")

    def parse_set(self, text: str, current: Any) -> bool:
        return parse_yes_no(text)

    def show(self, value: bool) -> str:
        return "yes" if value else "no"


class Integer(Kind):
    """An integer in [minimum, maximum]; ``clamp`` pulls values into a range instead of refusing
    them; ``set_minimum`` lets CONFIG SET use a different floor than the file (SPEC 4.3)."""

    def __init__(
        self,
        error: str,
        minimum: int | None = None,
        maximum: int | None = None,
        *,
        set_minimum: int | None = None,
        clamp: tuple[int, int] | None = None,
    ) -> None:
        super().__init__(error)
        self.minimum = minimum
        self.maximum = maximum
        self.set_minimum = minimum if set_minimum is None else set_minimum
        self.clamp = clamp

    def parse(self, args: list[str], current: Any) -> int:
        try:
            return self._checked(parse_integer(args[0]), self.minimum)
        except ValueError:
            raise _Invalid(self.error) from None

    def parse_set(self, text: str, current: Any) -> int:
        return self._checked(parse_integer(text), self.set_minimum)

    def _checked(self, value: int, minimum: int | None) -> int:
        if minimum is not None and value < minimum:
            raise ValueError("too small")
        if self.maximum is not None and value > self.maximum:
            raise ValueError("too large")
        if self.clamp:
            value = max(self.clamp[0], min(self.clamp[1], value))
        return value


class KeepaliveInteger(Integer):
    """tcp-keepalive: seconds in the file, but CONFIG GET/SET treat it as yes/no [quirk, SPEC 4.3]."""

    def parse_set(self, text: str, current: Any) -> int:
        return 1 if parse_yes_no(text) else 0

    def show(self, value: int) -> str:
        return "yes" if value else "no"

    def rewrite_args(self, value: int) -> str:
        return str(value)


class Memory(Kind):
    """A byte count with optional unit (k, kb, m, mb, g, gb)."""

    def __init__(self, error: str, minimum: int = 0, *, set_minimum: int | None = None) -> None:
        super().__init__(error)
        self.minimum = minimum
        self.set_minimum = minimum if set_minimum is None else set_minimum

    def parse(self, args: list[str], current: Any) -> int:
        try:
            value = parse_memory(args[0])
        except ValueError:
            raise _Invalid(self.error) from None
        if value < self.minimum:
            raise _Invalid(self.error)
        return value

    def parse_set(self, text: str, current: Any) -> int:
        value = parse_memory(text)
        if value < self.set_minimum:
            raise ValueError("too small")
        return value

    def rewrite_args(self, value: int) -> str:
        return format_memory(value)


class String(Kind):
    """Free text. ``empty_is_none``: "" means unset (None). ``check`` raises _Invalid to refuse."""

    def __init__(
        self,
        error: str = "",
        *,
        max_length: int | None = None,
        empty_is_none: bool = False,
        check: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(error)
        self.max_length = max_length
        self.empty_is_none = empty_is_none
        self.check = check

    def parse(self, args: list[str], current: Any) -> str | None:
        text = args[0]
        if self.max_length is not None and len(text) > self.max_length:
            raise _Invalid(self.error)
        if self.check:
            self.check(text)
        return None if (self.empty_is_none and not text) else text

    def parse_set(self, text: str, current: Any) -> str | None:
        try:
            return self.parse([text], current)
        except _Invalid:
            raise ValueError(text) from None

    def show(self, value: str | None) -> str:
        return value or ""

    def rewrite_args(self, value: str | None) -> str | None:
        return None if value is None else quote_arg(value)


class Secret(String):
    """A secret (cluster-secret): CONFIG GET shows only whether it is set, CONFIG REWRITE never
    writes it (the directive is not rewritten: its lines stay as they are in the file)."""

    HIDDEN = "(hidden)"

    def __init__(self, name: str) -> None:
        super().__init__(empty_is_none=True, check=lambda text: _check_secret(name, text))

    def show(self, value: str | None) -> str:
        return self.HIDDEN if value else ""

    def rewrite_args(self, value: str | None) -> str | None:
        return None


def _check_secret(name: str, text: str) -> None:
    if text and len(text) < MIN_SECRET_LENGTH:
        raise _Invalid(f"{name} must be at least {MIN_SECRET_LENGTH} characters long "
                       "(try `openssl rand -hex 32`)")
    if len(text) > MAX_PASSWORD_LENGTH:
        raise _Invalid(f"{name} is longer than {MAX_PASSWORD_LENGTH} characters")


class Enum(Kind):
    """One word out of ``choices``, case-insensitive, stored lowercase."""

    def __init__(self, error: str, choices: Iterable[str]) -> None:
        super().__init__(error)
        self.choices = tuple(choices)

    def parse_set(self, text: str, current: Any) -> str:
        lowered = text.lower()
        if lowered not in self.choices:
            raise ValueError(text)
        return lowered


class Octal(Kind):
    """unixsocketperm: octal digits, at most 0777; shown and rewritten in octal."""

    def parse_set(self, text: str, current: Any) -> int:
        if not re.fullmatch(r"[0-7]+", text) or int(text, 8) > 0o777:
            raise ValueError(text)
        return int(text, 8)

    def show(self, value: int) -> str:
        return format(value, "o")


class AddressList(Kind):
    """bind: one to 16 addresses, shown and rewritten space-joined."""

    max_args = None

    def parse(self, args: list[str], current: Any) -> list[str]:
        if len(args) > MAX_BIND_ADDRESSES:
            raise _Invalid(self.error)
        return list(args)

    def show(self, value: list[str]) -> str:
        return " ".join(value)

    def from_json(self, data: Any) -> list[str]:
        return list(data)


class ClientOutputBufferLimit(NamedTuple):
    hard_limit_bytes: int
    soft_limit_bytes: int
    soft_limit_seconds: int


class OutputBufferLimits(Kind):
    """``client-output-buffer-limit normal <hard> <soft> <seconds>``; only the class ``normal``
    exists. CONFIG SET takes one or more such groups in one string; the last one wins."""

    min_args = max_args = 4

    def parse(self, args: list[str], current: Any) -> ClientOutputBufferLimit:
        if args[0].lower() != "normal":
            raise _Invalid("Unrecognized client limit class")
        try:
            hard, soft = parse_memory(args[1]), parse_memory(args[2])
            seconds = parse_integer(args[3])
        except ValueError:
            raise _Invalid("Invalid client-output-buffer-limit value") from None
        if hard < 0 or soft < 0 or seconds < 0:
            raise _Invalid("Negative number of seconds in soft limit is invalid")
        return ClientOutputBufferLimit(hard, soft, seconds)

    def parse_set(self, text: str, current: Any) -> ClientOutputBufferLimit:
        words = text.split()
        if len(words) % 4:
            raise ValueError(text)
        value = current  # an empty string is accepted and changes nothing, as upstream
        for start in range(0, len(words), 4):
            try:
                value = self.parse(words[start:start + 4], current)
            except _Invalid:
                raise ValueError(text) from None
        return value

    def show(self, value: ClientOutputBufferLimit) -> str:
        return f"normal {value[0]} {value[1]} {value[2]}"

    def rewrite_args(self, value: ClientOutputBufferLimit) -> str:
        return f"normal {format_memory(value[0])} {format_memory(value[1])} {value[2]}"

    def to_json(self, value: ClientOutputBufferLimit) -> list[int]:
        return list(value)

    def from_json(self, data: Any) -> ClientOutputBufferLimit:
        return ClientOutputBufferLimit(*data)


class CommandRenames(Kind):
    """rename-command: accumulates {ORIGINAL-UPPERCASE: new name or "" (= disabled)}."""

    min_args = max_args = 2

    def parse(self, args: list[str], current: dict[str, str]) -> dict[str, str]:
        renames = dict(current)
        renames[args[0].upper()] = args[1]
        return renames

    def from_json(self, data: Any) -> dict[str, str]:
        return dict(data)


def _directory_problem(path: str) -> int | None:
    """The errno chdir(path) would fail with, or None if it would succeed."""
    if not os.path.exists(path):
        return errno.ENOENT
    if not os.path.isdir(path):
        return errno.ENOTDIR
    if not os.access(path, os.X_OK):
        return errno.EACCES
    return None


class Directory(Kind):
    """dir: stored as an absolute path; relative values are relative to the current ``dir``
    (upstream chdirs at each ``dir`` line, so they chain the same way)."""

    @staticmethod
    def _resolve(text: str, current: str) -> tuple[str, int | None]:
        path = os.path.normpath(os.path.join(current, text))
        return path, (errno.ENOENT if not text else _directory_problem(path))

    def parse(self, args: list[str], current: str) -> str:
        path, problem = self._resolve(args[0], current)
        if problem is not None:
            raise _Invalid(f"Can't chdir to '{args[0]}': {os.strerror(problem)}")
        return path

    def parse_set(self, text: str, current: str) -> str:
        path, problem = self._resolve(text, current)
        if problem is not None:
            raise ConfigError(f"Changing directory: {os.strerror(problem)}")
        return path

    def rewrite_args(self, value: str) -> str:
        return quote_arg(value)


class Include(Kind):
    """include: handled by the loader itself; it has no value of its own."""


def _check_bare_filename(text: str) -> None:
    if not text or "/" in text or "\\" in text:
        raise _Invalid("appendfilename can't be a path, just a filename")


def _check_ip_literal(text: str) -> None:
    """cluster-announce-ip: an IPv4 or IPv6 literal (the other nodes connect to it as given),
    or empty: not set."""
    if not text:
        return
    import ipaddress            # only for this directive: not on every start's path
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise _Invalid("Invalid cluster-announce-ip (must be an IP address): %s" % text) from None
