"""RESP replies, RESP2 and RESP3, as Redis 7.0 writes them (sans-IO: values in, bytes out).

`encode(value, proto)` maps Python values and the marker types below to reply bytes; `proto`
is the connection's protocol (2 until `HELLO 3`). Each type's bytes were checked against a
scratch redis-server 7.0.15 (tests/test_resp_codec.py keeps them):

| value                  | RESP3                     | RESP2                            |
| ---------------------- | ------------------------- | -------------------------------- |
| `int`                  | `:n`                      | `:n`                             |
| `bool`                 | `#t` / `#f`               | `:1` / `:0` (addReplyBool)       |
| `bytes`, `str` (UTF-8) | `$len` bulk               | same                             |
| `None`                 | `_`                       | `$-1` (null bulk)                |
| `NullArray`            | `_`                       | `*-1` (BLPOP timeout, XREAD)     |
| `list`, `tuple`        | `*n` array                | same                             |
| `Simple(s)`            | `+s`                      | same                             |
| `Error(s)`             | `-s` (s as given)         | same                             |
| `Map(pairs)`           | `%n` k v ...              | `*2n` flat array (HGETALL)       |
| `Set(items)`           | `~n`                      | `*n` (SMEMBERS)                  |
| `Push(items)`          | `>n`                      | `*n` (pub/sub messages)          |
| `Double(x)`, `float`   | `,x`                      | bulk of the same text (ZSCORE)   |
| `Verbatim(fmt, text)`  | `=len` `fmt:text`         | bulk of text (INFO)              |

Doubles are written as Redis 7.0's addReplyDouble does: C `%.17g` (1.1 -> 1.1000000000000001,
21990232555520 -> 21990232555520, 1e17 -> 1e+17), `inf` / `-inf`. (Redis 7.2 changed this to
the shortest round-trip text; the golden is 7.0.)
Status and error texts never carry CR or LF: they are replaced by spaces, as Redis does for
its formatted errors, so a reply can never break the framing.

Fast paths for the hot replies: `bulk`, `simple`, `error`, `integer`, and the constants `OK`,
`PONG`, `NULL_BULK`, `NULL3`.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

CRLF = b"\r\n"
OK = b"+OK\r\n"
PONG = b"+PONG\r\n"
NULL_BULK = b"$-1\r\n"      # RESP2 null
NULL_ARRAY2 = b"*-1\r\n"    # RESP2 null array
NULL3 = b"_\r\n"            # RESP3 null

_BULK_HEAD = [b"$%d\r\n" % i for i in range(1024)]


class Simple(str):
    """A status reply, `+text` (e.g. Simple("OK"))."""
    __slots__ = ()


class Error(str):
    """An error reply, `-text`, text as given with its code (e.g. "ERR Function not found",
    "WRONGTYPE Operation against a key holding the wrong kind of value"). Raw bytes from a
    request can be carried as str decoded with errors="surrogateescape"."""
    __slots__ = ()


class Double(float):
    """A RESP3 double (RESP2: a bulk string of the same text)."""
    __slots__ = ()


class Set(list):
    """A RESP3 set of items (RESP2: an array)."""
    __slots__ = ()


class Push(list):
    """A RESP3 push of items (RESP2: an array)."""
    __slots__ = ()


class Map(list):
    """A RESP3 map: a list of (key, value) pairs, or built from a dict (RESP2: a flat array
    k1, v1, k2, v2 ...)."""
    __slots__ = ()

    def __init__(self, pairs=()):
        super().__init__(pairs.items() if isinstance(pairs, Mapping) else pairs)


class Verbatim(NamedTuple):
    """A RESP3 verbatim string: `fmt` is three characters ("txt", "mkd"), `text` the body
    (RESP2: a bulk of `text`)."""
    fmt: str
    text: bytes | str


class _NullArray:
    __slots__ = ()

    def __repr__(self):
        return "NullArray"


#: The null array: RESP2 `*-1`, RESP3 `_` (a BLPOP timeout, XREAD with nothing new).
NullArray = _NullArray()


def _text(s) -> bytes:
    b = s if type(s) is bytes else str(s).encode("utf-8", "surrogateescape")
    if b"\r" in b or b"\n" in b:
        b = b.replace(b"\r", b" ").replace(b"\n", b" ")
    return b


def bulk(b: bytes | str) -> bytes:
    """A bulk string reply: `$len\\r\\n` data `\\r\\n` (str as UTF-8)."""
    if type(b) is not bytes:
        b = b.encode("utf-8", "surrogateescape") if isinstance(b, str) else bytes(b)
    n = len(b)
    if n < 1024:
        return _BULK_HEAD[n] + b + CRLF
    return b"$%d\r\n%s\r\n" % (n, b)


def simple(s: str | bytes) -> bytes:
    """A status reply: `+s\\r\\n`."""
    return b"+" + _text(s) + CRLF


def error(s: str | bytes) -> bytes:
    """An error reply: `-s\\r\\n`, s with its code ("ERR ...", "WRONGTYPE ...")."""
    return b"-" + _text(s) + CRLF


def integer(n: int) -> bytes:
    """An integer reply: `:n\\r\\n`."""
    return b":%d\r\n" % n


def format_double(x: float) -> bytes:
    """`x` as Redis 7.0 prints a double: `%.17g`, `inf`, `-inf`."""
    if x != x:
        return b"nan"
    if x in (float("inf"), float("-inf")):
        return b"inf" if x > 0 else b"-inf"
    return b"%.17g" % x


def null(proto: int) -> bytes:
    """The null reply: RESP2 `$-1`, RESP3 `_`."""
    return NULL3 if proto >= 3 else NULL_BULK


def encode(value, proto: int = 2) -> bytes:
    """The reply bytes for `value` (module table) on a connection speaking RESP`proto`
    (2 or 3). Raises TypeError for a value of any other type."""
    t = type(value)
    if t is bytes:
        return bulk(value)
    if t is int:
        return b":%d\r\n" % value
    if t is str:     # addJob's reply, the job id
        return bulk(value)
    out = []
    _encode(value, proto >= 3, out.append)
    return b"".join(out)


def _encode(v, r3: bool, put) -> None:
    t = type(v)
    if t is bytes:
        n = len(v)
        put(_BULK_HEAD[n] if n < 1024 else b"$%d\r\n" % n)
        put(v)
        put(CRLF)
    elif t is int:
        put(b":%d\r\n" % v)
    elif t is str:
        put(bulk(v))
    elif v is None:
        put(NULL3 if r3 else NULL_BULK)
    elif t is list or t is tuple:
        put(b"*%d\r\n" % len(v))
        for x in v:
            _encode(x, r3, put)
    elif t is Map:
        put(b"%%%d\r\n" % len(v) if r3 else b"*%d\r\n" % (2 * len(v)))
        for k, x in v:
            _encode(k, r3, put)
            _encode(x, r3, put)
    elif t is Simple:
        put(simple(v))
    elif t is Error:
        put(error(v))
    elif t is Set or t is Push:
        put(b"%s%d\r\n" % ((b"~" if t is Set else b">") if r3 else b"*", len(v)))
        for x in v:
            _encode(x, r3, put)
    elif t is Double or t is float:
        d = format_double(v)
        put(b"," + d + CRLF if r3 else bulk(d))
    elif t is bool:
        put((b"#t\r\n" if v else b"#f\r\n") if r3 else (b":1\r\n" if v else b":0\r\n"))
    elif t is Verbatim:
        text = v.text if type(v.text) is bytes else v.text.encode("utf-8", "surrogateescape")
        if r3:
            fmt = v.fmt.encode("ascii")
            if len(fmt) != 3:
                raise ValueError(f"verbatim format must be 3 characters, not {v.fmt!r}")
            put(b"=%d\r\n%s:%s\r\n" % (len(text) + 4, fmt, text))
        else:
            put(bulk(text))
    elif v is NullArray:
        put(NULL3 if r3 else NULL_ARRAY2)
    elif isinstance(v, (bytearray, memoryview)):
        put(bulk(bytes(v)))
    elif isinstance(v, int):          # an int subclass (IntEnum ...)
        put(b":%d\r\n" % int(v))
    elif isinstance(v, (list, tuple)):
        _encode(list(v), r3, put)
    else:
        raise TypeError(f"no RESP encoding for {t.__name__}")
