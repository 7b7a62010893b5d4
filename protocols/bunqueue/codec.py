"""bunqueue frames and MessagePack values, sans-IO (bunqueue-tcp-protocol.txt, "Wire Format").

A frame is a 4-byte big-endian length and that many bytes of MessagePack. `FrameReader` cuts a
byte stream into frame bodies; `decode_command` turns a body into a command dict or the
reference's error string; `frame`, `pack` and `splice_map` write replies the way the reference
(msgpackr) does where the real client depends on it:

- integers outside the uint32/int32 range travel as float64 (the client reads 64-bit integers as
  BigInt and rejects them), so `num()` turns them into floats;
- JavaScript `undefined` is MessagePack ext type 0 (`d4 00 00`): UNDEFINED writes it and
  decoding reads any ext 0 as None;
- text is `str`, bytes are `bin`.

Limits: MAX_FRAME (64 MiB, the spec's maximum; larger frames get one error frame, then the
connection closes). A FrameReader's `limit` may change between reads: a connection that has not
authenticated yet reads with a small one (docs/bunqueue.md "Hostile clients").

`decode_steps` decodes a large body in slices of DECODE_SLICE bytes (msgpack's streaming
Unpacker keeps its place between slices), so a 64 MiB frame does not stall the event loop; it
gives exactly what `decode_command` gives.
"""
from __future__ import annotations

import msgpack

#: Largest frame body accepted, bytes (spec: "Maximum frame size is 64 MB").
MAX_FRAME = 64 * 1024 * 1024

#: msgpackr's `undefined`, as the reference writes it (fixext1, type 0, data 0).
UNDEFINED = msgpack.ExtType(0, b"\x00")

_packer = msgpack.Packer(use_bin_type=True, autoreset=True)
#: MessagePack encoding of one value (str as str, bytes as bin, ExtType as ext).
pack = _packer.pack

_INT_MIN = -0x80000000
_UINT_MAX = 0xFFFFFFFF


def num(v: int):
    """`v` as the reference writes a JavaScript number: an int within int32/uint32, else a
    float64 (for example ms timestamps)."""
    return v if _INT_MIN <= v <= _UINT_MAX else float(v)


def js_num(v: float):
    """A computed JavaScript number as msgpackr writes it: an integral value within the
    int32/uint32 range as an int (8.0 -> 8), anything else as float64."""
    if v.__class__ is float and v.is_integer() and _INT_MIN <= v <= _UINT_MAX:
        return int(v)
    return num(v) if v.__class__ is int else v


def _ext(code: int, data: bytes):
    if code == 0:
        return None   # msgpackr undefined
    return msgpack.ExtType(code, data)


class TooLarge:
    """A frame header announced more than the limit: answer `error` and close (reference)."""

    __slots__ = ("size", "error")

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.error = f"Frame too large: {size} bytes exceeds maximum {limit}"


class FrameReader:
    """Cuts a byte stream into frame bodies. `feed(data)` returns a list of bodies (bytes, or a
    read-only-by-convention memoryview for a large frame that filled the buffer exactly: no
    copy) and, after an oversized header, a final TooLarge (the reader then ignores further
    input).

    The buffer holds at most one partial frame: its size is bounded by `limit` + 4 bytes. It is
    a bytearray read by offset: each read is appended once, frames are sliced out of it, and
    the unconsumed tail moves to the front once per `feed` (`copied` counts those bytes; each
    byte moves at most once, so a frame arriving in 1-byte reads costs linear work).
    """

    def __init__(self, limit: int = MAX_FRAME) -> None:
        self.limit = limit
        self._buf = bytearray()
        self._want = 4          # buffered bytes needed before the next frame can be cut
        self.copied = 0
        self.closed = False

    def feed(self, data: bytes, max_frames: int = 0) -> list:
        """Append `data`; the complete frame bodies now buffered, in order (at most
        `max_frames` of them when it is not 0: the rest stay buffered for the next call,
        `feed(b"")`, which lets the caller change `limit` between frames). An oversized header
        ends the list with a TooLarge; the reader is then closed."""
        if self.closed:
            return []
        buf = self._buf
        buf += data
        n = len(buf)
        if n < self._want:      # the frame in progress is still incomplete: nothing to do
            return []
        out: list = []
        pos = 0
        while n - pos >= 4:
            size = int.from_bytes(buf[pos:pos + 4], "big")
            if size > self.limit:
                out.append(TooLarge(size, self.limit))
                self.closed = True
                buf.clear()
                return out
            end = pos + 4 + size
            if end > n:
                break
            if size < 65536:
                out.append(bytes(buf[pos + 4:end]))
            elif pos == 0 and end == n:
                # the buffer holds exactly this (large) frame: hand it over as a view instead
                # of copying megabytes on the event loop; a new buffer takes the next input
                out.append(memoryview(buf)[4:end])
                self._buf = buf = bytearray()
                n = 0
            else:   # one copy of a large frame, not two
                with memoryview(buf) as mv:
                    out.append(mv[pos + 4:end].tobytes())
            pos = end
            if max_frames and len(out) >= max_frames:
                break
        if pos:
            if pos < n:
                self.copied += n - pos
            del buf[:pos]
        left = len(buf)
        if left >= 4:
            size = int.from_bytes(buf[:4], "big")
            # a header over the limit (seen after max_frames stopped the loop): the next feed
            # must reach the check in the loop, not wait for a body it will never accept
            self._want = 4 + size if size <= self.limit else 0
        else:
            self._want = 4
        return out

    def buffered(self) -> int:
        """Bytes held for an incomplete frame."""
        return len(self._buf)


#: Bytes of a large body decoded per step of decode_steps (about 5 ms of work on a slow core).
DECODE_SLICE = 64 * 1024


def decode_command(body: bytes):
    """A frame body as a command dict, or the reference's error string for it: an empty or
    undecodable body (or a nil / undefined one) is "Invalid command format"; a value that is
    not a map is "Invalid command"; a map with no or an empty `cmd` is ("Invalid command",
    reqId echoed when it is a string), one whose `cmd` is not a string is
    ("Unknown command: <String(cmd)>", reqId) (reference behaviour). Map keys may be any
    type; ext 0 decodes as None, except in the `result` of ACK and the `results` of ACKB, where
    it stays UNDEFINED (an undefined result is not a null one)."""
    if not body:
        return "Invalid command format"
    try:
        obj = msgpack.unpackb(body, raw=False, ext_hook=_ext, strict_map_key=False)
    except msgpack.FormatError:
        return "Invalid command"   # e.g. 0xc1: msgpackr reads it, as a non-map value
    except (ValueError, msgpack.ExtraData, msgpack.StackError, TypeError):
        return "Invalid command format"
    obj = command_of(obj)
    if obj.__class__ is dict and obj["cmd"] in _RESULT_CMDS and _UNDEFINED_BYTES in body:
        return _with_undefined_results(body, obj)
    return obj


#: Commands whose result values keep `undefined` apart from nil (the reference stores a null
#: result, and keeps none for an undefined one); the key that holds them.
_RESULT_CMDS = {"ACK": "result", "ACKB": "results"}
_UNDEFINED_BYTES = b"\xd4\x00\x00"


def _keep_ext(code: int, data: bytes):
    return UNDEFINED if code == 0 else msgpack.ExtType(code, data)


def _with_undefined_results(body: bytes, obj: dict) -> dict:
    """`obj` (ACK or ACKB, decoded from `body`) with its result(s) decoded again so that an
    undefined value stays UNDEFINED (at any depth: packing the result writes it back as the
    reference would) instead of None."""
    key = _RESULT_CMDS[obj["cmd"]]
    if key not in obj:
        return obj
    try:
        again = msgpack.unpackb(body, raw=False, ext_hook=_keep_ext, strict_map_key=False)
    except Exception:   # it decoded once: keep that
        return obj
    obj[key] = again.get(key)
    return obj


def decode_steps(body: bytes, step: int = DECODE_SLICE):
    """A generator decoding `body` `step` bytes at a time: it yields None after each slice but
    the last and returns (StopIteration.value) what `decode_command(body)` returns. Memory: the
    Unpacker holds at most one slice besides the value being built."""
    if not body:
        return "Invalid command format"
    n = len(body)
    # unpackb's length limits (those of the body's own size: an array header claiming more
    # items than the body has bytes fails at once, before any item is read), whatever `step`
    u = msgpack.Unpacker(raw=False, ext_hook=_ext, strict_map_key=False,
                         max_buffer_size=max(n, step),
                         read_size=max(n, step),   # one buffer: no regrowth copies
                         max_str_len=n, max_bin_len=n, max_array_len=n, max_map_len=n // 2,
                         max_ext_len=n)
    with memoryview(body) as mv:
        for pos in range(0, n, step):
            try:
                u.feed(mv[pos:pos + step])
                obj = u.unpack()
            except msgpack.OutOfData:
                yield None
                continue
            except msgpack.FormatError:
                return "Invalid command"
            except (ValueError, msgpack.StackError, TypeError):
                return "Invalid command format"
            if u.tell() != n:    # bytes after the value: unpackb's ExtraData
                return "Invalid command format"
            return command_of(obj)
    return "Invalid command format"   # the value never ended: incomplete input


def command_of(obj):
    """A decoded frame value as a command dict, or the reference's error (decode_command)."""
    if obj is None:
        return "Invalid command format"   # nil or undefined: msgpackr's unpack fails on it
    if obj.__class__ is not dict:
        return "Invalid command"
    cmd = obj.get("cmd")
    if cmd.__class__ is not str:
        rid = obj.get("reqId")
        if cmd is None or cmd is False or cmd == 0:   # falsy in JavaScript: no command
            return ("Invalid command", rid if rid.__class__ is str else UNDEFINED)
        return (f"Unknown command: {_js_string(cmd)}", UNDEFINED if rid is None else rid)
    if not cmd:
        rid = obj.get("reqId")
        return ("Invalid command", rid if rid.__class__ is str else UNDEFINED)
    return obj


def nil_req_id(body) -> bool:
    """True when the command map in frame `body` has a top-level `reqId` that is MessagePack
    nil (0xc0), not undefined (ext 0): both decode as None, but the reference echoes nil as
    nil (B11). Reads the map's keys only; values are skipped without being built."""
    u = msgpack.Unpacker(raw=False, ext_hook=_ext, strict_map_key=False,
                         max_buffer_size=max(len(body), 1024))
    u.feed(body)
    try:
        for _ in range(u.read_map_header()):
            if u.unpack() == "reqId":
                return body[u.tell()] == 0xC0
            u.skip()
    except (ValueError, msgpack.UnpackException, IndexError, TypeError):
        return False
    return False


def _js_string(v) -> str:
    """JavaScript's String(v) for the scalar types MessagePack carries."""
    if v is True:
        return "true"
    if v.__class__ is float and v.is_integer():
        return str(int(v))
    return str(v)


def frame(body: bytes) -> bytes:
    """`body` with its 4-byte big-endian length prefix."""
    return len(body).to_bytes(4, "big") + body


def array_header(n: int) -> bytes:
    """The MessagePack header of an array with `n` items."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def map_header(n: int) -> bytes:
    """The MessagePack header of a map with `n` entries."""
    if n < 16:
        return bytes((0x80 | n,))
    if n < 0x10000:
        return b"\xde" + n.to_bytes(2, "big")
    return b"\xdf" + n.to_bytes(4, "big")


def map_body(d: dict) -> bytes:
    """The packed entries of `d` without their map header (to splice maps together)."""
    b = pack(d)
    n = len(d)
    return b[1:] if n < 16 else b[3:] if n < 0x10000 else b[5:]


def splice_map(head: dict, raw: list, tail: dict | None = None) -> bytes:
    """One MessagePack map: the entries of `head`, then `raw` (key str, already-packed value
    bytes) pairs, then the entries of `tail`."""
    n = len(head) + len(raw) + (len(tail) if tail else 0)
    parts = [map_header(n), map_body(head)]
    for k, v in raw:
        parts.append(pack(k))
        parts.append(v)
    if tail:
        parts.append(map_body(tail))
    return b"".join(parts)


def pack_value(payload: bytes, fmt: int) -> bytes:
    """A stored payload or result as a packed value: MessagePack bytes as they are (fmt 1);
    raw bytes (other dialects) as a str when they are UTF-8, else as bin."""
    if fmt == 1:
        return payload
    try:
        return pack(payload.decode("utf-8"))
    except UnicodeDecodeError:
        return pack(payload)


def unpack_value(payload: bytes, fmt: int):
    """The inverse of pack_value, as a Python value (None for an empty MessagePack payload)."""
    if fmt == 1:
        return msgpack.unpackb(payload, raw=False, ext_hook=_ext, strict_map_key=False) \
            if payload else None
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return payload
