"""The Cython request parser held against hiredis (a reference RESP parser) and SPEC 1.2."""
import tracemalloc

import hiredis
import pytest
from hypothesis import given, settings, strategies as st

from disque._fast.resp import ProtocolError, RequestParser, parse_int, split_args

args_st = st.lists(st.binary(max_size=40), min_size=1, max_size=6)


def encode(argv):
    return b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv)


@settings(max_examples=300, deadline=None)
@given(st.lists(args_st, min_size=1, max_size=12), st.lists(st.integers(1, 50), max_size=30))
def test_multibulk_stream_matches_hiredis_whatever_the_read_boundaries(commands, cuts):
    stream = b"".join(encode(c) for c in commands)
    ours = RequestParser()
    ref = hiredis.Reader()
    got, expected = [], []
    pos = 0
    for size in cuts + [len(stream)]:
        piece = stream[pos:pos + size]
        pos += size
        ours.feed(piece)
        got.extend(ours.commands())
        ref.feed(piece)
        while (item := ref.gets()) is not False:
            expected.append(item)
        if pos >= len(stream):
            break
    assert got == expected == commands
    assert ours.pending == 0


@pytest.mark.parametrize("raw, message", [
    (b"*abc\r\n", "Protocol error: invalid multibulk length"),
    (b"*2000000\r\n", "Protocol error: invalid multibulk length"),
    (b"*1\r\n:5\r\n", "Protocol error: expected '$', got ':'"),
    (b"*1\r\n$-3\r\n", "Protocol error: invalid bulk length"),
    (b"*1\r\n$999999999999\r\n", "Protocol error: invalid bulk length"),
    (b"PING \"unbalanced\r\n", "Protocol error: unbalanced quotes in request"),
    (b"x" * (64 * 1024 + 1), "Protocol error: too big inline request"),
    (b"*" + b"1" * (64 * 1024 + 1), "Protocol error: too big mbulk count string"),
    (b"*1\r\n$" + b"1" * (64 * 1024 + 1), "Protocol error: too big bulk count string"),
])
def test_protocol_errors_have_upstream_text(raw, message):
    p = RequestParser()
    p.feed(raw)
    with pytest.raises(ProtocolError) as e:
        p.commands()
    assert str(e.value) == message


def test_commands_before_an_error_come_first():
    p = RequestParser()
    p.feed(b"PING\r\n*1\r\n$4\r\nPING\r\n*x\r\n")
    assert p.commands() == [[b"PING"], [b"PING"]]
    with pytest.raises(ProtocolError):
        p.commands()


def test_inline_and_empty_multibulk():
    p = RequestParser()
    p.feed(b"*0\r\n*-1\r\n  \r\nADDJOB q \"a b\" 0\n'it\\'s' \"\\x41\\n\"\r\n")
    assert p.commands() == [[b"ADDJOB", b"q", b"a b", b"0"], [b"it's", b"A\n"]]


def test_inline_drops_empty_arguments():
    assert split_args(b'a "" b') == [b"a", b"", b"b"]
    p = RequestParser()
    p.feed(b'PING ""\r\n')
    assert p.commands() == [[b"PING"]]


@pytest.mark.parametrize("text, value", [
    (b"", 0), (b"0", 0), (b"+7", 7), (b"-7", -7), (b"007", 7),
    (b"9223372036854775807", 2 ** 63 - 1), (b"-9223372036854775808", -2 ** 63),
    (b"9223372036854775808", None), (b" 1", None), (b"1 ", None), (b"1.5", None),
    (b"+", None), (b"-", None), (b"0x10", None), (b"1_000", None),
])
def test_parse_int_is_strtoll_with_full_consumption(text, value):
    assert parse_int(text) == value


BIG = 32 * 1024         # resp.pyx BIG_ARG: from here an incomplete bulk is read into its object
big_args_st = st.lists(st.sampled_from([0, 7, BIG - 1, BIG, BIG + 1, 3 * BIG + 5]),
                       min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(st.lists(big_args_st, min_size=1, max_size=4),
       st.lists(st.integers(1, 2 * BIG), max_size=20), st.integers(0, 20))
def test_big_arguments_whatever_the_read_boundaries_and_a_hand_over_midway(sizes, cuts, move_at):
    """A big argument still arriving goes straight into its bytes object: the commands are
    the same whatever the reads' boundaries (one inside the CRLF after the body included),
    `pending` counts what was received and not returned, and take_unparsed in the middle of
    a big argument gives back the bytes a client sent (the connection moves on)."""
    commands = [[bytes([65 + (i + j) % 26]) * n for j, n in enumerate(c)]
                for i, c in enumerate(sizes)]
    stream = b"".join(encode(c) for c in commands)
    ours = RequestParser()
    got = []
    pos = 0
    for k, size in enumerate(cuts + [len(stream)]):
        piece = stream[pos:pos + size]
        pos += size
        ours.feed(piece)
        got.extend(ours.commands())
        returned = sum(len(encode(c)) for c in got)
        assert ours.pending <= min(pos, len(stream)) - returned + 32
        if k == move_at:
            moved = RequestParser()
            moved.feed(ours.take_unparsed())
            assert ours.pending == 0 and ours.commands() == []
            got.extend(moved.commands())
            ours = moved
        if pos >= len(stream):
            break
    assert got == commands
    assert ours.pending == 0


def test_the_input_buffer_stays_between_full_reads_and_goes_after_a_short_one():
    """A client streaming a pipeline fills every read: its buffer keeps its allocation
    (resizing it per read was a malloc search of a fragmented heap); once a short read is
    all parsed the client waits for replies, and an idle connection holds no buffer."""
    command = encode([b"ADDJOB", b"q", b"x" * 1000, b"0"])
    stream = command * 200
    parser = RequestParser()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        got = 0
        for at in range(0, 65536 * 3, 65536):          # three full reads, cut mid-command
            parser.feed(stream[at:at + 65536])
            got += len(parser.commands())
            held = tracemalloc.get_traced_memory()[0] - before
            assert held >= 65536, held                  # kept while the reads come full
        parser.feed(stream[65536 * 3:])                 # the pipeline's short last read
        got += len(parser.commands())
        assert got == 200
        assert tracemalloc.get_traced_memory()[0] - before < 4096
        assert parser.pending == 0
    finally:
        tracemalloc.stop()
