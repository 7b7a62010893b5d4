"""Property tests (hypothesis) for the bunqueue parsers (issue 15: "a fuzz of every parser
stays in CI (short), with bounded memory"; beanstalk: test_beanstalk_fuzz.py, workq:
test_workq_fuzz.py).

Properties, for random and hostile byte streams cut at random points:

- FrameReader never raises; after every feed it holds at most one unfinished frame
  (< limit + 4 bytes), or with `max_frames` (the pre-Auth mode) at most limit + 4 + one read;
- a Connection (pre-Auth or not) never raises, answers only well-formed frames, and its
  `partial_input()` stays within the same bound; after a refused header it holds nothing;
- `decode_steps` (big frames, decoded in slices) gives exactly what `decode_command` gives;
- `pack_steps` (big data, encoded in slices) writes exactly `pack`'s bytes and flags the same
  integers as `data_error`.

A few seconds in all (deadline off: timing is not a property here).
"""
from __future__ import annotations

import msgpack
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core.clock import ManualClock
from core.engine import Engine
from protocols.bunqueue.bulk import pack_steps
from protocols.bunqueue.codec import (FrameReader, TooLarge, decode_command, decode_steps,
                                      frame, pack)
from protocols.bunqueue.connection import Connection
from protocols.bunqueue.info import BunqueueInfo
from protocols.bunqueue.options import data_error

from .test_bunqueue_hostile import Recorder

FAST = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LIMIT = 256


def split(data: bytes, cuts) -> list[bytes]:
    """`data` cut at the given offsets (any order, duplicates and out-of-range allowed)."""
    points = sorted({min(max(c, 0), len(data)) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:])] or [b""]


def run_steps(gen):
    """Drive a steps generator to its end; its return value."""
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value


# ===================================================================== strategies
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
                    st.floats(allow_nan=False), st.text(max_size=8), st.binary(max_size=8))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=20),
    st.dictionaries(st.one_of(st.text(max_size=4), st.integers(-5, 2**40)), inner,
                    max_size=20)), max_leaves=60)
commands = st.fixed_dictionaries(
    {"cmd": st.sampled_from(["Ping", "PUSH", "PUSHB", "Auth", "Hello", "PULL", "Nope", ""])},
    optional={"queue": st.sampled_from(["q", "", "bad q", 7]), "data": values,
              "reqId": st.one_of(st.text(max_size=4), st.integers(0, 9)),
              "token": st.sampled_from(["s3cret", "x", 1]),
              "jobs": st.lists(st.one_of(st.fixed_dictionaries({"data": values}), scalars),
                               max_size=5)})


@st.composite
def hostile_frame(draw):
    """A frame meant to hurt: a valid command, garbage, a lying or huge header, a cut body."""
    kind = draw(st.sampled_from(["cmd", "cmd", "garbage", "huge", "lying", "cut"]))
    if kind == "cmd":
        return frame(pack(draw(commands)))
    if kind == "garbage":
        return frame(draw(st.binary(max_size=64)))
    if kind == "huge":
        return draw(st.sampled_from([LIMIT + 1, 2**31, 2**32 - 1])).to_bytes(4, "big")
    body = draw(st.binary(max_size=40))
    n = len(body) + draw(st.integers(1, 50))
    if kind == "lying":
        return n.to_bytes(4, "big") + body
    return frame(body)[:draw(st.integers(0, len(body) + 3))]


streams = st.lists(hostile_frame(), max_size=10).map(b"".join)
cuts = st.lists(st.integers(0, 3000), max_size=20)


# ===================================================================== frame reader
@FAST
@given(st.binary(max_size=3000), cuts, st.booleans())
@example(b"\x00\x00\x01\x00" + b"a" * 255, [100], False)
def test_reader_random_bytes_bounded(data, at, one_at_a_time):
    r = FrameReader(LIMIT)
    for chunk in split(data, at):
        out = r.feed(chunk, 1 if one_at_a_time else 0)
        if out and out[-1].__class__ is TooLarge:
            assert r.closed and r.buffered() == 0
            return
        if one_at_a_time:
            assert r.buffered() <= LIMIT + 4 + len(chunk)
            while out:
                out = r.feed(b"", 1)
                if out and out[-1].__class__ is TooLarge:
                    return
        assert r.buffered() < LIMIT + 4


@FAST
@given(streams, cuts)
def test_reader_one_at_a_time_cuts_the_same_frames(data, at):
    whole = FrameReader(LIMIT).feed(data)
    r = FrameReader(LIMIT)
    got = []
    for chunk in split(data, at):
        out = r.feed(chunk, 1)
        while out:
            got += out
            if out[-1].__class__ is TooLarge:
                break
            out = r.feed(b"", 1)
    norm = [x.error if x.__class__ is TooLarge else x for x in got]
    assert norm == [x.error if x.__class__ is TooLarge else x for x in whole]


# ===================================================================== connection
@FAST
@given(streams, cuts, st.booleans())
def test_connection_never_raises_and_holds_at_most_one_frame(data, at, tokens):
    info = BunqueueInfo(Engine(clock=ManualClock()), ["s3cret"] if tokens else (),
                        max_frame=4 * LIMIT, pre_auth_max_frame=LIMIT)
    t = Recorder()
    c = Connection(info, t)
    for chunk in split(data, at):
        c.data_received(chunk)
        t.drain()
        limit = LIMIT if c.handshake_pending() else 4 * LIMIT
        assert c.partial_input() <= limit + 4 + len(chunk)
        if t.closed:
            assert c.partial_input() == 0
    c.eof_received()
    t.drain()
    for data_, _ in t.sent:
        assert int.from_bytes(data_[:4], "big") == len(data_) - 4
        r = msgpack.unpackb(data_[4:], raw=False, strict_map_key=False,
                            ext_hook=lambda code, d: None)
        assert r.__class__ is dict and ("ok" in r or r.get("type") == "event"), r
    c.connection_lost()


# ===================================================================== sliced codecs
@FAST
@given(st.one_of(st.binary(max_size=300), values.map(pack), commands.map(pack),
                 st.tuples(commands.map(pack), st.binary(min_size=1, max_size=4)).map(
                     b"".join)),
       st.integers(1, 64))
@example(b"\xc1", 1)
@example(b"\x81\xa3cmd", 2)
@example(b"\x93\xc1", 3)   # found by CI: an array longer than the body, a step past its end
def test_decode_steps_equals_decode_command(body, step):
    assert run_steps(decode_steps(body, step)) == decode_command(body)


@FAST
@given(values, st.integers(1, 50))
def test_pack_steps_equals_pack_and_flags_bigints_like_data_error(value, budget):
    out, big = run_steps(pack_steps(value, budget))
    assert out == pack(value)
    if value.__class__ in (dict, list, int):
        assert big == (data_error(value) is not None)
