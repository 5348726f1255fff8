"""The frame writer of the links (disque/_fast/msgframe.pyx) writes exactly the bytes
msgpack's Packer writes, framed, for every box: the shapes it writes itself at every size
boundary of msgpack's formats, and anything else through the Packer. Its reader gives what
msgpack's unpackb gives for every box of those shapes, and gives up (None) on anything
else, however broken, for unpackb to read or refuse."""
import random

import msgpack
import pytest

from disque._fast.frames import frame
from disque._fast.msgframe import PACKER_BUFFER, Packer, box_of_frame_data, frame_of_box
from disque.contracts import bus_messages as bus_msg

pytestmark = pytest.mark.unit

INTS = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63,
        2**64 - 1]
SIZES = [0, 1, 15, 16, 255, 256, 65535, 65536, 70000]


def expected(box):
    return frame(msgpack.packb(box))


@pytest.mark.parametrize("n", INTS)
def test_ints_at_every_format_boundary(n):
    box = [[n, n, [b"x", n]]]
    assert frame_of_box(box) == expected(box)


@pytest.mark.parametrize("size", SIZES)
def test_bytes_and_lists_at_every_format_boundary(size):
    for box in ([[bus_msg.REPLJOB, 0, b"j" * size]], [[1] * size], [list(range(3))] * size):
        assert frame_of_box(box) == expected(box)


def random_boxes(seed, count=2000):
    """Boxes of what the links send (ints, bytes, lists of those, up to 5 deep)."""
    rng = random.Random(seed)

    def value(depth):
        k = rng.randrange(4 if depth < 4 else 2)
        if k == 0:
            return rng.choice(INTS)
        if k == 1:
            return rng.randbytes(rng.choice([0, 3, 40, 300]))
        return [value(depth + 1) for _ in range(rng.randrange(5))]
    for _ in range(count):
        yield [value(0) for _ in range(rng.randrange(1, 6))]


def test_what_the_links_send_at_random():
    for box in random_boxes(7):
        assert frame_of_box(box) == expected(box)


@pytest.mark.parametrize("odd", [-1, -2**63, "text", None, True, 1.5, {b"k": 1}, (1, 2),
                                 [[[[[[[[[1]]]]]]]]]])
def test_anything_else_goes_through_the_packer(odd):
    box = [[bus_msg.GOTJOB, 0, [b"D-" + b"0" * 38, 0]], [bus_msg.SETACK, 0, [odd, 1]]]
    assert frame_of_box(box) == expected(box)
    assert msgpack.unpackb(frame_of_box(box)[4:], use_list=True) == msgpack.unpackb(
        msgpack.packb(box), use_list=True)


def test_an_int_msgpack_cannot_hold_fails_as_the_packer_fails():
    with pytest.raises(OverflowError):
        msgpack.packb([2**64])
    with pytest.raises(OverflowError):
        frame_of_box([[1, 0, [b"x", 2**64]]])


def test_a_packer_packs_as_msgpack_and_is_renewed_after_a_message_past_its_buffer():
    """msgpack's Packer keeps the buffer a big message grew for good: the long-lived
    packers (a worker's replies, the front-end's requests) get a new one after such a
    message, and keep theirs after any smaller one."""
    packer = Packer()
    first = packer.inner
    for box in ([[1, b"x" * 100]], [b"y" * (PACKER_BUFFER - 16)], [None, "s", -1, {b"k": 2}]):
        assert packer.pack(box) == msgpack.packb(box)
    assert packer.inner is first                    # none was past the buffer
    big = [b"z" * (PACKER_BUFFER + 1)]
    assert packer.pack(big) == msgpack.packb(big)
    assert packer.inner is not first


def read_back(box):
    """What the reader gives for `box` as the links frame it, checked against unpackb."""
    data = frame_of_box(box)[4:]
    got = box_of_frame_data(data)
    assert got is None or got == msgpack.unpackb(data)
    return got


@pytest.mark.parametrize("n", INTS)
def test_the_reader_takes_ints_at_every_format_boundary(n):
    box = [[n, n, [b"x", n]]]
    assert read_back(box) == box


@pytest.mark.parametrize("size", SIZES)
def test_the_reader_takes_bytes_and_lists_at_every_format_boundary(size):
    for box in ([[bus_msg.REPLJOB, 0, b"j" * size]], [[1] * size], [list(range(3))] * size):
        assert read_back(box) == box


def test_the_reader_takes_what_the_links_send_at_random():
    for box in random_boxes(11):
        assert read_back(box) == box


@pytest.mark.parametrize("odd", [-1, -2**63, "text", None, True, 1.5, {b"k": 1}, (1, 2),
                                 [[[[[[[[[1]]]]]]]]]])
def test_the_reader_leaves_anything_else_to_unpackb(odd):
    """(A tuple is written as a list: the reader reads it as unpackb does, as a list.)"""
    box = [[bus_msg.GOTJOB, 0, [b"D-" + b"0" * 38, 0]], [bus_msg.SETACK, 0, [odd, 1]]]
    data = msgpack.packb(box)
    got = box_of_frame_data(data)
    if isinstance(odd, tuple):
        assert got == msgpack.unpackb(data)
    else:
        assert got is None
        assert box_of_frame_data(msgpack.packb([[1, 2], odd])) is None
    assert msgpack.unpackb(data) == msgpack.unpackb(frame_of_box(box)[4:])


def test_the_reader_gives_up_on_broken_data_that_unpackb_refuses():
    """Cut anywhere, with a byte too many, with lengths past the end (an array of 2**32
    - 1 items in 5 bytes allocates nothing), or not a list at all: None, and unpackb raises
    (or, for a lone int, reads what is not a box)."""
    box = [[bus_msg.REPLJOB, 0, b"j" * 300], [bus_msg.GOTJOB, 0, [b"D-" + b"0" * 38, 2**40]]]
    data = frame_of_box(box)[4:]
    for cut in range(len(data)):
        assert box_of_frame_data(data[:cut]) is None
        with pytest.raises(Exception):
            msgpack.unpackb(data[:cut])
    for broken in (data + b"\x00", b"\xdd\xff\xff\xff\xff", b"\xdc\x00\x05\x01",
                   b"\x91\xc6\xff\xff\xff\xff", b"\x91\xcf\x00", b"\xc1", b""):
        assert box_of_frame_data(broken) is None
        with pytest.raises(Exception):
            msgpack.unpackb(broken)
    for not_a_box in (msgpack.packb(7), msgpack.packb(b"x")):
        assert box_of_frame_data(not_a_box) is None


def test_random_bytes_are_read_as_unpackb_reads_them_or_left_to_it():
    rng = random.Random(5)
    for _ in range(20000):
        data = bytes([rng.choice([0x90, 0x91, 0x92, 0x93, 0xc4, 0xcc, 0xcd, 0xdc, 0x01,
                                  0x7f, 0x00, 0x05, 0xff])
                      for _ in range(rng.randrange(1, 12))])
        got = box_of_frame_data(data)
        if got is not None:
            assert got == msgpack.unpackb(data)
