"""Argument parsing and number formatting of the key reads, as Redis 7.0 does them (each
rule checked against redis-server 7.0.15; tests/test_resp_keys.py pins them):

- integers (`parse_int`): Redis's strict string2ll: optional `-`, no `+`, no spaces, no
  leading zeros, int64 range; else `ERR value is not an integer or out of range`;
- stream ids (`parse_sid`): `-`, `+`, `<ms>` or `<ms>-<seq>` of unsigned 64-bit parts, each
  as C strtoull reads it (leading spaces, a sign; `-N` wraps); `(` makes a bound exclusive;
- scores (`parse_score_bound`): C strtod (leading spaces, `inf`, `infinity`, hex), NaN
  refused; `(` exclusive;
- scores out (`score_reply`): RESP3 a Double, RESP2 a bulk string formatted `%.17g`
  (Redis 7.0's addReplyDouble: "21990232555520", "inf").
"""
from __future__ import annotations

import re

from .commands import NOT_INTEGER, SYNTAX
from .encode import Double
from .keyview import ReplyError

U64 = (1 << 64) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
INVALID_ID = "ERR Invalid stream ID specified as stream command argument"
NOT_FLOAT = "ERR min or max is not a float"

_INT = re.compile(rb"(0|-?[1-9][0-9]*)\Z")
_STRTOULL = re.compile(rb"[ \t\n\v\f\r]*([+-]?)([0-9]+)\Z")
_DEC = re.compile(rb"[ \t\n\v\f\r]*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")
_HEX = re.compile(rb"[ \t\n\v\f\r]*[+-]?0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)"
                  rb"([pP][+-]?[0-9]+)?\Z")
_INF = re.compile(rb"[ \t\n\v\f\r]*([+-]?)(inf|infinity)\Z", re.I)


def parse_int(b: bytes) -> int:
    """An int64 argument; raises ReplyError(NOT_INTEGER)."""
    if len(b) <= 20 and _INT.match(b):
        n = int(b)
        if I64_MIN <= n <= I64_MAX:
            return n
    raise ReplyError(NOT_INTEGER)


def index_range(start: int, stop: int, n: int) -> tuple | None:
    """Redis's inclusive index range [start, stop] over `n` elements (negative counts from the
    end; LRANGE, ZRANGE by rank) as a slice (start, stop + 1), or None when it selects
    nothing."""
    if start < 0:
        start += n
    if stop < 0:
        stop += n
    start = max(start, 0)
    if start > stop or start >= n:
        return None
    return start, min(stop, n - 1) + 1


def is_word(b: bytes, word: bytes) -> bool:
    """Case-insensitive option keyword test (`word` upper case)."""
    return b.upper() == word


def _u64(b: bytes) -> int | None:
    m = _STRTOULL.match(b)
    if m is None:
        return None
    digits = m.group(2).lstrip(b"0") or b"0"
    if len(digits) > 20:
        return None
    n = int(digits)
    if n > U64:
        return None
    return (-n) & U64 if m.group(1) == b"-" else n


def parse_sid(b: bytes, end: bool, exclusive_ok: bool = True) -> tuple:
    """A stream id bound -> ((ms, seq), exclusive). `end`: a bare `<ms>` means `<ms>-max`
    (else `<ms>-0`). Raises ReplyError(INVALID_ID)."""
    ex = exclusive_ok and b[:1] == b"(" and len(b) > 1
    if ex:
        b = b[1:]
    if b == b"-" or b == b"+":
        if ex:
            raise ReplyError(INVALID_ID)
        return ((0, 0) if b == b"-" else (U64, U64)), False
    ms_s, dash, seq_s = b.partition(b"-")
    ms = _u64(ms_s)
    seq = _u64(seq_s) if dash else (U64 if end else 0)
    if ms is None or seq is None:
        raise ReplyError(INVALID_ID)
    return (ms, seq), ex


def sid_incr(t: tuple):
    """The id after `t`, or None after the last one."""
    ms, seq = t
    if seq < U64:
        return (ms, seq + 1)
    return None if ms == U64 else (ms + 1, 0)


def sid_decr(t: tuple):
    """The id before `t`, or None before 0-0."""
    ms, seq = t
    if seq > 0:
        return (ms, seq - 1)
    return None if ms == 0 else (ms - 1, U64)


def _strtod(b: bytes) -> float | None:
    if _DEC.match(b):
        return float(b)
    m = _INF.match(b)
    if m:
        return float("-inf") if m.group(1) == b"-" else float("inf")
    if _HEX.match(b):
        s = b.strip().decode()
        neg = s[:1] == "-"
        v = float.fromhex(s.lstrip("+-"))
        return -v if neg else v
    return None


def parse_score_bound(b: bytes) -> tuple:
    """A ZRANGEBYSCORE bound -> (score, exclusive). Raises ReplyError(NOT_FLOAT)."""
    ex = b[:1] == b"("
    v = _strtod(b[1:] if ex else b)
    if v is None or v != v:
        raise ReplyError(NOT_FLOAT)
    return v, ex


def parse_count(args: list, i: int) -> int:
    """XRANGE's options from `args[i]` on: only `COUNT n` (n < 0 counts as 0); -1 when
    absent. Raises ReplyError(SYNTAX / NOT_INTEGER)."""
    count = -1
    while i < len(args):
        if is_word(args[i], b"COUNT") and i + 1 < len(args):
            count = max(0, parse_int(args[i + 1]))
            i += 2
        else:
            raise ReplyError(SYNTAX)
    return count


def fmt_score(x: float) -> bytes:
    """A score as Redis 7.0 writes a double in RESP2 (`%.17g`, `inf`, `-inf`)."""
    if x == float("inf"):
        return b"inf"
    if x == float("-inf"):
        return b"-inf"
    return (b"%.17g" % x)


def score_reply(sess, x: float):
    """A score reply: Double in RESP3, bulk text in RESP2 (golden G32 / I13)."""
    return Double(x) if sess.proto >= 3 else fmt_score(x)
