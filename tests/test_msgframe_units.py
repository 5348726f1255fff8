"""The frame writer of the links (disque/_fast/msgframe.pyx) writes exactly the bytes
msgpack's Packer writes, framed, for every box: the shapes it writes itself at every size
boundary of msgpack's formats, and anything else through the Packer."""
import random

import msgpack
import pytest

from disque._fast.frames import frame
from disque._fast.msgframe import PACKER_BUFFER, Packer, frame_of_box
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


def test_what_the_links_send_at_random():
    rng = random.Random(7)

    def value(depth):
        k = rng.randrange(4 if depth < 4 else 2)
        if k == 0:
            return rng.choice(INTS)
        if k == 1:
            return rng.randbytes(rng.choice([0, 3, 40, 300]))
        return [value(depth + 1) for _ in range(rng.randrange(5))]
    for _ in range(2000):
        box = [value(0) for _ in range(rng.randrange(1, 6))]
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
