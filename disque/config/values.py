"""Parsing helpers shared with other modules: memory units, integers, yes/no, shell-like quoting, globs."""
from __future__ import annotations

import re

from disque.config.constants import _INT64_MAX, _INT64_MIN



_MEMORY_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1024,
    "m": 1000**2, "mb": 1024**2,
    "g": 1000**3, "gb": 1024**3,
}
_MEMORY_RE = re.compile(r"(-?[0-9]+)([A-Za-z]*)")
_INTEGER_RE = re.compile(r"([+-]?[0-9]+)?")


def parse_memory(text: str) -> int:
    """Parse ``1gb``, ``100mb``, ``64k``, ``512`` ... (units case-insensitive) into bytes.

    k/m/g are powers of 1000, kb/mb/gb powers of 1024. Raises ValueError.
    """
    match = _MEMORY_RE.fullmatch(text)
    if not match or match.group(2).lower() not in _MEMORY_UNITS:
        raise ValueError(f"invalid memory value: {text!r}")
    value = int(match.group(1)) * _MEMORY_UNITS[match.group(2).lower()]
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"memory value out of range: {text!r}")
    return value


def format_memory(value: int) -> str:
    """The shortest exact form CONFIG REWRITE uses: ``1gb``, ``64mb``, ``3kb`` or plain bytes."""
    for unit, size in (("gb", 1024**3), ("mb", 1024**2), ("kb", 1024)):
        if value and value % size == 0:
            return f"{value // size}{unit}"
    return str(value)


def human_bytes(value: int) -> str:
    """INFO's human size: ``<n>B`` below 1024, else two decimals and K/M/G/T/P (binary)."""
    if value < 1024:
        return f"{value}B"
    for power, suffix in enumerate("KMGTP", start=1):
        if value < 1024 ** (power + 1):
            return f"{value / 1024**power:.2f}{suffix}"
    return f"{value}B"  # beyond petabytes upstream falls back to bytes


def parse_integer(text: str) -> int:
    """C ``strtoll`` base 10 with the whole string consumed (SPEC 1.3): ``+`` and leading zeros
    are fine, surrounding spaces are not, and the empty string is 0. Raises ValueError."""
    if not _INTEGER_RE.fullmatch(text):
        raise ValueError(f"not an integer: {text!r}")
    value = int(text) if text else 0
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"integer out of range: {text!r}")
    return value


def parse_yes_no(text: str) -> bool:
    lowered = text.lower()
    if lowered == "yes":
        return True
    if lowered == "no":
        return False
    raise ValueError(f"not yes/no: {text!r}")


_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "a": "\a"}
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_TOKEN_ENDS = " \n\r\t"


def split_args(line: str) -> list[str]:
    """Split a line like upstream's ``sdssplitargs``.

    Double quotes understand ``\\n \\r \\t \\b \\a \\xHH`` and escape anything else with a
    backslash; single quotes only ``\\'``. A closing quote must be followed by a space or the end.
    Empty quoted arguments are kept. Raises ValueError on unbalanced quotes.
    """
    args: list[str] = []
    pos, end = 0, len(line)
    while True:
        while pos < end and line[pos].isspace():
            pos += 1
        if pos >= end:
            return args
        current: list[str] = []
        in_double = in_single = False
        while True:
            char = line[pos] if pos < end else ""
            if in_double:
                if char == "\\" and line[pos + 1:pos + 2] == "x" and set(line[pos + 2:pos + 4]) <= _HEX_DIGITS \
                        and len(line[pos + 2:pos + 4]) == 2:
                    current.append(chr(int(line[pos + 2:pos + 4], 16)))
                    pos += 3
                elif char == "\\" and pos + 1 < end:
                    pos += 1
                    current.append(_ESCAPES.get(line[pos], line[pos]))
                elif char == '"':
                    if pos + 1 < end and not line[pos + 1].isspace():
                        raise ValueError("closing quote must be followed by a space")
                    pos += 1
                    break
                elif not char:
                    raise ValueError("unbalanced double quotes")
                else:
                    current.append(char)
            elif in_single:
                if char == "\\" and line[pos + 1:pos + 2] == "'":
                    pos += 1
                    current.append("'")
                elif char == "'":
                    if pos + 1 < end and not line[pos + 1].isspace():
                        raise ValueError("closing quote must be followed by a space")
                    pos += 1
                    break
                elif not char:
                    raise ValueError("unbalanced single quotes")
                else:
                    current.append(char)
            elif not char or char in _TOKEN_ENDS:
                break
            elif char == '"':
                in_double = True
            elif char == "'":
                in_single = True
            else:
                current.append(char)
            pos += 1
        args.append("".join(current))


_REPR_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "\a": "\\a", "\b": "\\b"}


def quote_arg(text: str) -> str:
    """Double-quote a string the way ``split_args`` reads it back (upstream ``sdscatrepr``)."""
    out = ['"']
    for char in text:
        if char in _REPR_ESCAPES:
            out.append(_REPR_ESCAPES[char])
        elif ord(char) < 32 or ord(char) == 127:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def glob_match(pattern: str, name: str) -> bool:
    """Redis ``stringmatch``: ``*``, ``?``, ``[abc]``, ``[^a-z]`` and ``\\`` escapes, case-sensitive."""
    return _glob_regex(pattern).fullmatch(name) is not None


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    pos, end = 0, len(pattern)
    while pos < end:
        char = pattern[pos]
        if char == "*":
            out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "\\" and pos + 1 < end:
            pos += 1
            out.append(re.escape(pattern[pos]))
        elif char == "[":
            pos += 1
            negate = pos < end and pattern[pos] == "^"
            if negate:
                pos += 1
            items: list[str] = []
            while pos < end and pattern[pos] != "]":  # an unclosed class runs to the end
                if pattern[pos] == "\\" and pos + 1 < end:
                    items.append(re.escape(pattern[pos + 1]))
                    pos += 2
                elif pos + 2 < end and pattern[pos + 1] == "-":
                    low, high = sorted((pattern[pos], pattern[pos + 2]))
                    items.append(f"{re.escape(low)}-{re.escape(high)}")
                    pos += 3
                else:
                    items.append(re.escape(pattern[pos]))
                    pos += 1
            if items:
                out.append(f"[{'^' if negate else ''}{''.join(items)}]")
            else:
                out.append("." if negate else "(?!)")
        else:
            out.append(re.escape(char))
        pos += 1
    return re.compile("".join(out), re.DOTALL)


