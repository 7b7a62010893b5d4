"""The parsers' buffers do linear work: a large body arriving in 1-byte reads is appended once
and copied out once, never re-copied per read (issue 13, "Hygiene"). Nothing here is timed: each
parser counts the bytes it moves inside its buffer (`copied`), and the tests bound that count.
Before, beanstalk's and workq's parsers rebuilt their buffer on every read (`buf = buf + data`):
for a 64 MiB body in 1-byte reads that is about 2^51 bytes copied, which never finishes.

The 1-byte reads run in C (`deque(map(feed, repeat(b"x", n)), 0)`), so the tests take seconds.
"""
from __future__ import annotations

from collections import deque
from itertools import repeat

import msgpack

from protocols.beanstalk.parser import Parser as BeanstalkParser
from protocols.bunqueue.codec import FrameReader
from protocols.workq.parser import MAX_READ, Command, Parser as WorkqParser
from protocols.workq.values import MAX_PAYLOAD

MiB = 1 << 20


def _bytewise(feed, n: int, byte: bytes = b"x") -> None:
    """Call feed(byte) n times; every call must return nothing."""
    out = deque(map(feed, repeat(byte, n)), 1)
    assert not out or out[0] == [], out


def test_beanstalk_64_mib_body_in_1_byte_reads_moves_nothing():
    size = 64 * MiB
    p = BeanstalkParser(max_job_size=size)
    assert p.feed(b"put 7 0 60 %d\r\n" % size) == []
    _bytewise(p.feed, size)
    assert p.buffered() == size
    (cmd,) = p.feed(b"\r\n")
    assert cmd[:4] == (b"put", 7, 0, 60) and len(cmd[4]) == size and cmd[4] == b"x" * size
    assert p.copied == 0 and p.buffered() == 0


def test_beanstalk_pipelined_commands_in_small_reads_move_each_byte_at_most_once():
    stream = b"".join(b"put 0 0 60 %d\r\n%s\r\nreserve-with-timeout 0\r\n" % (n, b"b" * n)
                      for n in range(0, 3000, 7))
    p = BeanstalkParser()
    got = []
    for i in range(0, len(stream), 5):
        got += p.feed(stream[i:i + 5])
    assert len(got) == 2 * len(range(0, 3000, 7))
    assert [len(c[4]) for c in got if c[0] == b"put"] == list(range(0, 3000, 7))
    assert p.copied <= len(stream)


def test_bunqueue_64_mib_frame_in_1_byte_reads_moves_nothing():
    body = msgpack.packb({"cmd": "PUSH", "queue": "big", "data": "y" * (64 * MiB - 64)})
    assert len(body) <= 64 * MiB
    r = FrameReader()
    frame = len(body).to_bytes(4, "big") + body
    head = frame.index(b"yyyy")            # length prefix and MessagePack up to the string
    for i in range(head):
        assert r.feed(frame[i:i + 1]) == []
    _bytewise(r.feed, len(frame) - 1 - head, b"y")
    assert r.buffered() == len(frame) - 1
    (out,) = r.feed(frame[-1:])
    assert out == body
    assert r.copied == 0 and r.buffered() == 0


def test_bunqueue_many_frames_in_small_reads_move_each_byte_at_most_once():
    frames = [msgpack.packb({"cmd": "Ping", "reqId": "x" * n}) for n in range(0, 2000, 13)]
    stream = b"".join(len(f).to_bytes(4, "big") + f for f in frames)
    r = FrameReader()
    got = []
    for i in range(0, len(stream), 3):
        got += r.feed(stream[i:i + 3])
    assert got == frames
    assert r.copied <= len(stream)


def test_workq_largest_payload_and_longest_line_in_1_byte_reads_move_nothing():
    p = WorkqParser()
    head = b"add 6ba7b810-9dad-41d1-80b4-00c04fd430c8 q 1000 60000 %d\r\n" % MAX_PAYLOAD
    assert p.feed(head) == []
    _bytewise(p.feed, MAX_PAYLOAD)
    (cmd,) = p.feed(b"\r\n")
    assert isinstance(cmd, Command) and cmd.payload == b"x" * MAX_PAYLOAD
    # a line of MAX_READ - 1 bytes is still waited on, byte by byte, without moving, and the
    # search for its line end resumes where the last one stopped: each byte searched once
    scanned = p.scanned
    _bytewise(p.feed, MAX_READ - 1)
    assert len(p._buf) == MAX_READ - 1
    assert p.copied == 0
    assert p.scanned - scanned == MAX_READ - 1


def test_workq_pipelined_commands_in_small_reads_move_each_byte_at_most_once():
    uid = b"6ba7b810-9dad-41d1-80b4-00c04fd430c8"
    stream = b"".join(b"complete %s %d\r\n%s\r\nlease q 0\r\n" % (uid, n, b"r" * n)
                      for n in range(0, 3000, 11))
    p = WorkqParser()
    got = []
    for i in range(0, len(stream), 4):
        got += p.feed(stream[i:i + 4])
    assert len(got) == 2 * len(range(0, 3000, 11))
    assert p.copied <= len(stream) and p.scanned <= 2 * len(stream)
