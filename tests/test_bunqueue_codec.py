"""bunqueue frames and MessagePack rules, sans-IO (protocols/bunqueue/codec.py): golden bytes from
bunqueue-golden.json (raw-hex steps and the wire types of replies), partial frames, oversized
frames, garbage, ext 0, big integers; hypothesis fuzzing of the frame reader and decoder."""
from __future__ import annotations

import json
import os

import msgpack
import pytest
from hypothesis import given, settings, strategies as st

from protocols.bunqueue.codec import (MAX_FRAME, UNDEFINED, FrameReader, TooLarge,
                                      decode_command, frame, map_body, num, pack, pack_value,
                                      splice_map, unpack_value)

GOLDEN = os.path.join(os.path.dirname(__file__), "data", "bunqueue-golden.json")


def golden_steps():
    with open(GOLDEN) as f:
        return json.load(f)["steps"]


def _raw_steps():
    return [s for s in golden_steps() if isinstance(s["request"], dict)
            and "$raw_hex" in s["request"] and s["name"] != "Frame header > 64MiB"]


@pytest.mark.parametrize("step", _raw_steps(), ids=lambda s: s["name"])
def test_golden_raw_frames_get_the_reference_error(step):
    data = bytes.fromhex(step["request"]["$raw_hex"])
    bodies = FrameReader().feed(data)
    assert len(bodies) == 1
    got = decode_command(bodies[0])
    assert got == step["response"]["error"]
    assert step["response"]["reqId"] == {"$undefined": "fixext1 type0 (d4 00 00)"}


def test_golden_oversized_header_is_refused_with_the_reference_text():
    step = [s for s in golden_steps() if s["name"] == "Frame header > 64MiB"][0]
    r = FrameReader()
    out = r.feed(bytes.fromhex(step["request"]["$raw_hex"]))
    assert len(out) == 1 and isinstance(out[0], TooLarge)
    assert out[0].error == step["response"][0]["error"]
    assert r.feed(b"\x00\x00\x00\x01\x80") == []   # closed: nothing more is read
    assert r.buffered() == 0


def test_exactly_max_frame_header_is_accepted_and_buffered_not_refused():
    r = FrameReader(limit=1024)
    assert r.feed((1024).to_bytes(4, "big") + b"\x00" * 10) == []
    assert r.buffered() == 14
    out = r.feed(b"\x00" * 1014)
    assert out == [b"\x00" * 1024]
    assert r.buffered() == 0
    assert MAX_FRAME == 67108864


def test_partial_frames_across_reads_byte_by_byte():
    body = pack({"cmd": "Ping", "reqId": "split"})
    data = frame(body) * 3
    r = FrameReader()
    got = []
    for i in range(len(data)):
        got += r.feed(data[i:i + 1])
    assert got == [body] * 3
    assert r.buffered() == 0


def test_several_frames_in_one_read_and_an_empty_frame():
    b1, b2 = pack({"cmd": "Ping"}), pack({"cmd": "Stats"})
    assert FrameReader().feed(frame(b1) + frame(b"") + frame(b2)) == [b1, b"", b2]
    assert decode_command(b"") == "Invalid command format"


@pytest.mark.parametrize("body,expected", [
    (b"\xc1", "Invalid command"),                                  # never-used byte
    (pack("hello"), "Invalid command"),                            # not a map
    (pack([1, 2, 3]), "Invalid command"),
    (pack({"foo": 1}), ("Invalid command", UNDEFINED)),            # no cmd
    (pack({"cmd": 5, "reqId": "r"}), ("Unknown command: 5", "r")),  # cmd not a string
    (pack({"cmd": "", "reqId": 7}), ("Invalid command", UNDEFINED)),  # empty; int reqId
    (pack(None), "Invalid command format"),
    (b'{"cmd":"Ping"}', "Invalid command format"),                 # JSON, not MessagePack
    (bytes.fromhex("82a3636d64"), "Invalid command format"),       # truncated map
    (pack({"cmd": "Ping"}) + b"\x00", "Invalid command format"),   # trailing bytes
])
def test_decode_errors_match_the_reference(body, expected):
    assert decode_command(body) == expected


def test_ext0_decodes_as_none_and_other_ext_types_survive():
    body = pack({"cmd": "Progress", "message": UNDEFINED, "x": msgpack.ExtType(5, b"ab")})
    cmd = decode_command(body)
    assert cmd["message"] is None
    assert cmd["x"] == msgpack.ExtType(5, b"ab")


def test_undefined_is_written_as_fixext1_type0():
    assert pack(UNDEFINED) == b"\xd4\x00\x00"


@pytest.mark.parametrize("v,wire", [
    (0, b"\x00"), (127, b"\x7f"), (-1, b"\xff"), (65535, b"\xcd\xff\xff"),
    (2**32 - 1, b"\xce\xff\xff\xff\xff"), (-(2**31), b"\xd2\x80\x00\x00\x00"),
])
def test_num_keeps_32_bit_integers_as_integers(v, wire):
    assert num(v) == v and pack(num(v)) == wire


@pytest.mark.parametrize("v", [2**32, 1795315233060, -(2**31) - 1, 2**53])
def test_num_sends_larger_integers_as_float64(v):
    b = pack(num(v))
    assert b[0] == 0xcb and msgpack.unpackb(b) == float(v)


def test_bytes_are_bin_and_text_is_str():
    assert pack(b"\x00\x01\x02")[0] == 0xc4
    assert pack("abc")[0] == 0xa3


def test_pack_value_of_raw_payloads_from_other_dialects():
    assert msgpack.unpackb(pack_value(b"hello", 0)) == "hello"
    assert msgpack.unpackb(pack_value(b"\xff\xfe", 0)) == b"\xff\xfe"   # not UTF-8: bin
    packed = pack({"a": [1, 2]})
    assert pack_value(packed, 1) is packed                             # spliced, not re-packed
    assert unpack_value(packed, 1) == {"a": [1, 2]}
    assert unpack_value(b"hi", 0) == "hi"


def test_splice_map_builds_one_valid_map_in_order():
    head = {"ok": True}
    raw = [("job", pack({"id": "x"})), ("token", pack("t"))]
    b = splice_map(head, raw, {"reqId": "r1"})
    assert list(msgpack.unpackb(b).items()) == [("ok", True), ("job", {"id": "x"}),
                                                ("token", "t"), ("reqId", "r1")]
    big = {f"k{i}": i for i in range(40)}       # map16 header stripped correctly
    b = splice_map(big, [("data", pack(1))])
    d = msgpack.unpackb(b)
    assert len(d) == 41 and d["data"] == 1 and d["k39"] == 39
    assert map_body({}) == b""


# ------------------------------------------------------------------ fuzzing
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048))
def test_fuzz_random_bytes_never_crash_and_the_buffer_stays_bounded(data):
    r = FrameReader(limit=4096)
    for item in r.feed(data):
        if isinstance(item, TooLarge):
            assert r.closed
            break
        res = decode_command(item)
        assert isinstance(res, (str, tuple, dict))
    assert r.buffered() <= 4096 + 4


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=5), st.one_of(
    st.none(), st.booleans(), st.integers(-2**40, 2**40), st.floats(allow_nan=False),
    st.text(max_size=20), st.binary(max_size=20)), max_size=5), min_size=1, max_size=6),
    st.lists(st.integers(1, 64), max_size=20))
def test_fuzz_frames_decode_the_same_however_the_stream_is_split(cmds, cuts):
    bodies = [pack(dict(c, cmd="Ping")) for c in cmds]
    data = b"".join(frame(b) for b in bodies)
    r = FrameReader()
    got = []
    pos = 0
    for c in cuts:
        got += r.feed(data[pos:pos + c])
        pos += c
    got += r.feed(data[pos:])
    assert got == bodies
    for b, c in zip(got, cmds):
        d = decode_command(b)
        assert d["cmd"] == "Ping"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_fuzz_decoder_on_random_bodies_returns_a_command_or_an_error_string(body):
    res = decode_command(body)
    assert isinstance(res, (str, tuple)) or (isinstance(res, dict)
                                             and isinstance(res["cmd"], str))


@pytest.mark.parametrize("v,wire", [(8.0, b"\x08"), (0.0, b"\x00"), (14.22, None),
                                    (-3.0, b"\xfd"), (2.0**40, None)])
def test_js_num_writes_integral_computed_numbers_as_ints_like_msgpackr(v, wire):
    from protocols.bunqueue.codec import js_num
    b = pack(js_num(v))
    if wire is None:
        assert b[0] == 0xcb and msgpack.unpackb(b) == v
    else:
        assert b == wire
