"""Fixed replies have one home, disque/replies.py (the original's shared objects).

A reply text used by exactly one handler may stay next to it (that is where a reader looks for
it); a reply text written out in two places must move to replies.py, so the two can never drift
apart. This test finds every complete RESP error/status literal in the server's sources and
fails when one appears more than once outside replies.py.
"""
import collections
import pathlib
import re

import pytest

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCES = [p for p in sorted((ROOT / "disque").rglob("*"))
           if p.suffix in (".py", ".pyx", ".pxd") and p.name != "replies.py"]
# a whole fixed reply: b"-ERR ...\r\n" or b"+OK\r\n", with no formatting placeholder
LITERAL = re.compile(rb"""b(["'])([-+][A-Z][^"'%\\]*?\\r\\n)\1""")


def fixed_reply_literals():
    found = collections.defaultdict(list)
    for path in SOURCES:
        for lineno, line in enumerate(path.read_bytes().splitlines(), 1):
            for _, text in LITERAL.findall(line):
                text = text[:-4] + b"\r\n"        # the source's backslash escapes, as sent
                found[text].append(f"{path.relative_to(ROOT)}:{lineno}")
    return found


def test_the_scan_sees_the_literals_it_must_police():
    found = fixed_reply_literals()
    assert any(text.startswith(b"-ERR") for text in found), "the pattern matches nothing"
    assert LITERAL.findall(b'x = b"-ERR syntax error\\r\\n"')
    assert b"-ERR TTL must be a number > 0\r\n" in found
    assert not LITERAL.findall(b'x = b"-ERR Unknown %s\\r\\n"')


def test_no_fixed_reply_is_written_out_twice():
    repeated = {text: places for text, places in fixed_reply_literals().items()
                if len(places) > 1}
    assert not repeated, "move these to disque/replies.py:\n" + "\n".join(
        f"{text!r}: {', '.join(places)}" for text, places in sorted(repeated.items()))


def test_shared_replies_are_not_written_out_again():
    from disque import replies
    shared = {value for name, value in vars(replies).items()
              if name.isupper() and isinstance(value, bytes)}
    again = {text: places for text, places in fixed_reply_literals().items() if text in shared}
    assert not again, "use the name from disque/replies.py instead:\n" + "\n".join(
        f"{text!r}: {', '.join(places)}" for text, places in sorted(again.items()))
