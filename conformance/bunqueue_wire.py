"""bunqueue wire format for the conformance suite: frames, values, and the MessagePack wire
type of every value.

A frame is a 4-byte big-endian length followed by that many bytes of MessagePack, in both
directions (../shared/specs/bunqueue-tcp-protocol.txt). The reference server encodes with
msgpackr, so what a reply *means* to the real TypeScript client depends on the wire types, not
only on the values: an integer outside int32 must travel as float64 (msgpackr decodes uint64 /
int64 as BigInt), ext type 0 is JavaScript ``undefined`` (not ``null``), ``str`` is not ``bin``.
This module therefore decodes a reply with its own small walker that records the type name of
every scalar next to its value (``annotate``), with the names the golden file uses in its
``types`` field (../shared/reference/bunqueue-golden.json):

    posfixint negfixint uint8 uint16 uint32 uint64 int8 int16 int32 int64 float32 float64
    str (fixstr, str8, str16, str32)   bin (bin8/16/32)   nil true false   ext(N)

Maps become dicts of those names and arrays lists, mirroring the value. Ext type 0 decodes as
``UNDEFINED``; other ext types as ``Ext(code, data)``.

Requests are encoded with the ``msgpack`` package the way the golden requests were sent
(Python's packer: the most compact integer format, so ints within int32 stay ints and 2**40
goes out as uint64, which msgpackr reads as a BigInt -- golden steps 17 and 18 depend on
that; floats as float64; ``str`` as str and ``bytes`` as bin). The golden file's JSON markers
are turned into Python values by ``from_golden``: ``{"$bin": hex}`` -> bytes,
``{"$undefined": ...}`` -> ``UNDEFINED`` (sent as fixext1 type 0, ``d4 00 00``),
``{"$raw_hex": hex}`` -> ``RawBytes`` (written to the socket as they are, no framing added).

Map headers: msgpackr writes every map as map16 (0xde), even a small one, and the golden
file's ``notes.encoding`` says so. That note *describes* the reference encoder; it is not a
rule a client relies on (the README's list of "encoding rules the real client depends on"
leaves it out, and every MessagePack decoder, msgpackr included, reads fixmap). So
``MAP16_REQUIRED`` is False: the suite does not fail a fixmap, but every ``Annotated`` reply
carries its map headers (``map_headers``, ``all_map16``) so a test can assert it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import msgpack

__all__ = [
    "MAX_FRAME",
    "MAP16_REQUIRED",
    "MAP16_NOTE",
    "UNDEFINED",
    "Undefined",
    "Ext",
    "RawBytes",
    "Annotated",
    "WireError",
    "from_golden",
    "to_golden",
    "pack",
    "frame",
    "annotate",
    "canonical_type",
    "encode_typed",
    ]

MAX_FRAME = 64 * 1024 * 1024

MAP16_REQUIRED = False
MAP16_NOTE = ("notes.encoding describes msgpackr ('every map is written as map16 (0xde) even "
              "when small'); it is not listed among the encoding rules the real client depends "
              "on, and msgpackr decodes fixmap too: recorded per reply, not required")


class Undefined:
    """JavaScript ``undefined`` (MessagePack ext type 0); one instance, ``UNDEFINED``."""

    _instance: "Undefined | None" = None

    def __new__(cls) -> "Undefined":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "undefined"

    def __reduce__(self):
        return (Undefined, ())


UNDEFINED = Undefined()


@dataclass(frozen=True)
class Ext:
    """A MessagePack extension value other than ext 0."""

    code: int
    data: bytes


class RawBytes(bytes):
    """Bytes to write to the socket exactly as they are (a golden ``$raw_hex`` request)."""


class WireError(ValueError):
    """Bytes that are not one well-formed MessagePack value."""


# --------------------------------------------------------------------------------------------
# golden JSON <-> Python values
# --------------------------------------------------------------------------------------------
def from_golden(obj: Any) -> Any:
    """The golden file's JSON form of a value as the Python value it stands for: the
    ``$bin`` / ``$undefined`` / ``$raw_hex`` markers become bytes / ``UNDEFINED`` /
    ``RawBytes``; everything else is kept (dicts keep their key order)."""
    if isinstance(obj, dict):
        if len(obj) == 1:
            (k, v), = obj.items()
            if k == "$bin":
                return bytes.fromhex(v)
            if k == "$undefined":
                return UNDEFINED
            if k == "$raw_hex":
                return RawBytes(bytes.fromhex(v))
        return {k: from_golden(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [from_golden(v) for v in obj]
    return obj


def to_golden(value: Any) -> Any:
    """The inverse of ``from_golden`` (for printing values the way the golden file does)."""
    if value is UNDEFINED:
        return {"$undefined": "fixext1 type0 (d4 00 00)"}
    if isinstance(value, RawBytes):
        return {"$raw_hex": bytes(value).hex()}
    if isinstance(value, (bytes, bytearray)):
        return {"$bin": bytes(value).hex()}
    if isinstance(value, Ext):
        return {"$ext": [value.code, value.data.hex()]}
    if isinstance(value, dict):
        return {k: to_golden(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_golden(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------
# encoding requests
# --------------------------------------------------------------------------------------------
def _default(obj: Any) -> Any:
    if obj is UNDEFINED:
        return msgpack.ExtType(0, b"\x00")
    if isinstance(obj, Ext):
        return msgpack.ExtType(obj.code, obj.data)
    raise TypeError(f"cannot encode {type(obj).__name__}")


def pack(obj: Any) -> bytes:
    """MessagePack bytes of ``obj`` as the golden requests were sent (see the module doc)."""
    return msgpack.packb(obj, use_bin_type=True, default=_default)


def frame(obj: Any) -> bytes:
    """One frame: length prefix + ``pack(obj)``; a ``RawBytes`` is returned unchanged."""
    if isinstance(obj, RawBytes):
        return bytes(obj)
    body = pack(obj)
    return struct.pack(">I", len(body)) + body


# --------------------------------------------------------------------------------------------
# decoding replies with their wire types
# --------------------------------------------------------------------------------------------
@dataclass
class Annotated:
    """One decoded MessagePack value: ``value`` (dicts keep wire order), ``types`` (the same
    shape with a wire type name at every scalar), ``map_headers`` (``fixmap``/``map16``/
    ``map32`` for every map, in wire order) and the ``raw`` bytes."""

    value: Any
    types: Any
    map_headers: list[str] = field(default_factory=list)
    raw: bytes = b""

    @property
    def all_map16(self) -> bool:
        """Whether every map was written as map16 (0xde), as msgpackr does."""
        return all(h == "map16" for h in self.map_headers)


_FIXED = {0xc0: ("nil", None), 0xc2: ("false", False), 0xc3: ("true", True)}
_UINT = {0xcc: ("uint8", ">B", 1), 0xcd: ("uint16", ">H", 2), 0xce: ("uint32", ">I", 4),
         0xcf: ("uint64", ">Q", 8), 0xd0: ("int8", ">b", 1), 0xd1: ("int16", ">h", 2),
         0xd2: ("int32", ">i", 4), 0xd3: ("int64", ">q", 8), 0xca: ("float32", ">f", 4),
         0xcb: ("float64", ">d", 8)}
_FIXEXT = {0xd4: 1, 0xd5: 2, 0xd6: 4, 0xd7: 8, 0xd8: 16}
_VARLEN = {0xd9: ("str", 1), 0xda: ("str", 2), 0xdb: ("str", 4), 0xc4: ("bin", 1),
           0xc5: ("bin", 2), 0xc6: ("bin", 4), 0xc7: ("ext", 1), 0xc8: ("ext", 2),
           0xc9: ("ext", 4)}


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.maps: list[str] = []

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise WireError(f"truncated at byte {self.pos} (need {n} more)")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def uint(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def value(self, depth: int = 0) -> tuple[Any, Any]:
        if depth > 512:
            raise WireError("nesting too deep")
        b = self.take(1)[0]
        if b <= 0x7f:
            return b, "posfixint"
        if b >= 0xe0:
            return b - 0x100, "negfixint"
        if 0xa0 <= b <= 0xbf:
            return self._str(b & 0x1f), "str"
        if 0x80 <= b <= 0x8f:
            return self._map(b & 0x0f, "fixmap", depth)
        if 0x90 <= b <= 0x9f:
            return self._array(b & 0x0f, depth)
        if b in _FIXED:
            name, v = _FIXED[b]
            return v, name
        if b in _UINT:
            name, fmt, n = _UINT[b]
            return struct.unpack(fmt, self.take(n))[0], name
        if b in _FIXEXT:
            return self._ext(_FIXEXT[b])
        if b in _VARLEN:
            kind, n = _VARLEN[b]
            size = self.uint(n)
            if kind == "str":
                return self._str(size), "str"
            if kind == "bin":
                return bytes(self.take(size)), "bin"
            return self._ext(size)
        if b == 0xdc:
            return self._array(self.uint(2), depth)
        if b == 0xdd:
            return self._array(self.uint(4), depth)
        if b == 0xde:
            return self._map(self.uint(2), "map16", depth)
        if b == 0xdf:
            return self._map(self.uint(4), "map32", depth)
        raise WireError(f"byte 0x{b:02x} at {self.pos - 1} is not a MessagePack type")

    def _str(self, n: int) -> str:
        raw = self.take(n)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise WireError(f"str is not UTF-8: {raw[:40]!r}") from exc

    def _ext(self, n: int) -> tuple[Any, str]:
        code = struct.unpack(">b", self.take(1))[0]
        data = bytes(self.take(n))
        if code == 0:
            return UNDEFINED, "ext(0)"
        return Ext(code, data), f"ext({code})"

    def _array(self, n: int, depth: int) -> tuple[list, list]:
        vals, types = [], []
        for _ in range(n):
            v, t = self.value(depth + 1)
            vals.append(v)
            types.append(t)
        return vals, types

    def _map(self, n: int, header: str, depth: int) -> tuple[dict, dict]:
        self.maps.append(header)
        vals: dict = {}
        types: dict = {}
        for _ in range(n):
            k, _kt = self.value(depth + 1)
            if isinstance(k, list):
                k = tuple(k)
            elif isinstance(k, dict):
                k = tuple(k.items())
            v, t = self.value(depth + 1)
            vals[k] = v
            types[k] = t
        return vals, types


def annotate(data: bytes) -> Annotated:
    """Decode exactly one MessagePack value from ``data`` (a frame body) with the wire type of
    every scalar. Raises ``WireError`` for malformed bytes or trailing bytes."""
    r = _Reader(bytes(data))
    value, types = r.value()
    if r.pos != len(r.data):
        raise WireError(f"{len(r.data) - r.pos} bytes after the value")
    return Annotated(value, types, r.maps, bytes(data))


def canonical_type(value: Any) -> Any:
    """The wire type msgpackr's default ``pack`` (as the reference server uses it) gives the
    JavaScript value ``value`` stands for: integral numbers within uint32 / int32 as the most
    compact int, every other number as float64; ``None`` nil; ``UNDEFINED`` ext(0)."""
    if value is None:
        return "nil"
    if value is UNDEFINED:
        return "ext(0)"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return "str"
    if isinstance(value, (bytes, bytearray)):
        return "bin"
    if isinstance(value, Ext):
        return f"ext({value.code})"
    if isinstance(value, dict):
        return {k: canonical_type(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical_type(v) for v in value]
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not value.is_integer():
            return "float64"
        v = int(value)
        if 0 <= v < 2 ** 32:
            return ("posfixint" if v < 0x80 else "uint8" if v < 0x100
                    else "uint16" if v < 0x10000 else "uint32")
        if -2 ** 31 <= v < 0:
            return ("negfixint" if v >= -32 else "int8" if v >= -0x80
                    else "int16" if v >= -0x8000 else "int32")
        return "float64"
    raise TypeError(f"no MessagePack type for {type(value).__name__}")


_ENC_INT = {"uint8": (0xcc, ">B"), "uint16": (0xcd, ">H"), "uint32": (0xce, ">I"),
            "uint64": (0xcf, ">Q"), "int8": (0xd0, ">b"), "int16": (0xd1, ">h"),
            "int32": (0xd2, ">i"), "int64": (0xd3, ">q"), "float32": (0xca, ">f"),
            "float64": (0xcb, ">d")}


def encode_typed(value: Any, types: Any = None, map_header: str = "map16") -> bytes:
    """MessagePack bytes of ``value`` written with exactly the wire types ``types`` names (the
    golden file's ``types`` shape; ``None`` = ``canonical_type(value)``) and every map with
    ``map_header``. It writes what the golden file says the reference sent, so the suite's
    own decoder and normaliser can be checked against the golden file without a server."""
    if types is None:
        types = canonical_type(value)
    out = bytearray()
    _enc(value, types, map_header, out)
    return bytes(out)


def _len_header(out: bytearray, n: int, fix: int, fixmax: int, codes: tuple) -> None:
    if n <= fixmax and fix >= 0:
        out.append(fix | n)
    elif n < 0x100 and codes[0] is not None:
        out += bytes([codes[0], n])
    elif n < 0x10000:
        out.append(codes[1])
        out += struct.pack(">H", n)
    else:
        out.append(codes[2])
        out += struct.pack(">I", n)


def _enc(value: Any, t: Any, mh: str, out: bytearray) -> None:
    if isinstance(t, dict):
        if not isinstance(value, dict) or list(value) != list(t):
            raise ValueError(f"types {t!r} do not mirror {value!r}")
        n = len(value)
        if mh == "fixmap" and n < 16:
            out.append(0x80 | n)
        elif mh in ("map16", "fixmap") and n < 0x10000:
            out.append(0xde)
            out += struct.pack(">H", n)
        else:
            out.append(0xdf)
            out += struct.pack(">I", n)
        for k, v in value.items():
            _enc(k, canonical_type(k), mh, out)
            _enc(v, t[k], mh, out)
        return
    if isinstance(t, list):
        if not isinstance(value, (list, tuple)) or len(value) != len(t):
            raise ValueError(f"types {t!r} do not mirror {value!r}")
        _len_header(out, len(value), 0x90, 15, (None, 0xdc, 0xdd))
        for v, vt in zip(value, t):
            _enc(v, vt, mh, out)
        return
    if t == "nil":
        out.append(0xc0)
    elif t in ("true", "false"):
        out.append(0xc3 if t == "true" else 0xc2)
    elif t == "posfixint":
        if not 0 <= value <= 0x7f:
            raise ValueError(f"{value!r} is not a posfixint")
        out.append(int(value))
    elif t == "negfixint":
        if not -32 <= value < 0:
            raise ValueError(f"{value!r} is not a negfixint")
        out.append(int(value) + 0x100)
    elif t in _ENC_INT:
        code, fmt = _ENC_INT[t]
        out.append(code)
        out += struct.pack(fmt, value if t.startswith("float") else int(value))
    elif t == "str":
        raw = value.encode("utf-8")
        _len_header(out, len(raw), 0xa0, 31, (0xd9, 0xda, 0xdb))
        out += raw
    elif t == "bin":
        raw = bytes(value)
        _len_header(out, len(raw), -1, -1, (0xc4, 0xc5, 0xc6))
        out += raw
    elif isinstance(t, str) and t.startswith("ext("):
        code = int(t[4:-1])
        data = b"\x00" if value is UNDEFINED else value.data
        fixed = {1: 0xd4, 2: 0xd5, 4: 0xd6, 8: 0xd7, 16: 0xd8}
        if len(data) in fixed:
            out.append(fixed[len(data)])
        else:
            _len_header(out, len(data), -1, -1, (0xc7, 0xc8, 0xc9))
        out += struct.pack(">b", code) + data
    else:
        raise ValueError(f"unknown wire type {t!r}")
