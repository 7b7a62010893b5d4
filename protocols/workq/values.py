"""Argument values of the workq protocol, parsed exactly as the reference server parses them.

The reference (iamduo/workq, Go) reads numbers with Go's strconv, ids with satori/go.uuid and
times with time.Parse; these functions accept and refuse the same inputs (reference behaviour,
../shared/reference/workq-golden.txt). Every parser returns None for input it refuses.

Limits (workq-protocol.txt and ../shared/reference/README.md): TTR 1-86,400,000 ms, TTL
1-2,592,000,000 ms, wait-timeout 0-86,400,000 ms, priority int32, max-attempts and max-fails
0-255, names `[a-zA-Z0-9_.-]{1,255}`, payload and result up to 1 MiB, inspect limit 1-100.
"""
from __future__ import annotations

import calendar
import re
import time

MAX_PAYLOAD = 1_048_576
MAX_NAME = 255
MAX_TTR = 86_400_000
MAX_TTL = 2_592_000_000
MAX_TIMEOUT = 86_400_000
MAX_LIMIT = 100

_NAME = re.compile(rb"[a-zA-Z0-9_.-]+\Z")
#: The common spelling of a workq id: canonical, lower case, version 4, RFC 4122 variant.
_CANON_V4 = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\Z")
_HEX = re.compile(rb"[0-9a-fA-F]{32}\Z")
_TIME = re.compile(rb"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{1,2}):([0-9]{2}):([0-9]{2})"
                   rb"(?:[.,]([0-9]+))?Z\Z")


def parse_uint(b: bytes, bits: int) -> int | None:
    """Go strconv.ParseUint(s, 10, bits): decimal digits only (no sign), value < 2**bits."""
    if not b.isdigit():   # bytes.isdigit: ASCII digits only, False when empty
        return None
    v = int(b)
    return v if v < (1 << bits) else None


def parse_int(b: bytes, bits: int) -> int | None:
    """Go strconv.ParseInt(s, 10, bits): optional sign, decimal digits, in the signed range."""
    digits = b[1:] if b[:1] in (b"+", b"-") else b
    if not digits.isdigit():
        return None
    v = int(b)
    lim = 1 << (bits - 1)
    return v if -lim <= v < lim else None


def atoi(b: bytes) -> int | None:
    """Go strconv.Atoi (64-bit int): optional sign, decimal digits."""
    return parse_int(b, 64)


def parse_uuid(b: bytes) -> bytes | None:
    """satori/go.uuid FromString: canonical 8-4-4-4-12 hex, the same in braces, with a
    `urn:uuid:` prefix, or 32 hex digits; any case. Returns the 16 bytes."""
    n = len(b)
    if n == 45 or n == 41:
        if b[:9] != b"urn:uuid:":
            return None
        b = b[9:]
        n -= 9
    elif n == 38:
        if b[:1] != b"{" or b[37:] != b"}":
            return None
        b = b[1:37]
        n = 36
    if n == 36:
        if b[8:9] != b"-" or b[13:14] != b"-" or b[18:19] != b"-" or b[23:24] != b"-":
            return None
        b = b[:8] + b[9:13] + b[14:18] + b[19:23] + b[24:]
    elif n != 32:
        return None
    if not _HEX.match(b):
        return None
    return bytes.fromhex(b.decode())


def parse_id(b: bytes) -> tuple[str, bool] | None:
    """An id argument -> (canonical lower-case form, is a UUIDv4), or None when it is not a
    uuid at all (parse_uuid's forms). The common canonical v4 spelling takes a fast path."""
    if _CANON_V4.match(b):
        return b.decode(), True
    u = parse_uuid(b)
    return None if u is None else (canonical(u), is_v4(u))


def is_v4(u: bytes) -> bool:
    """workq's ValidateID: not nil, version 4, RFC 4122 variant."""
    return (u[6] >> 4) == 4 and (u[8] & 0xC0) == 0x80


def canonical(u: bytes) -> str:
    """The canonical lower-case 8-4-4-4-12 form of a 16-byte uuid."""
    h = u.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_valid_names: dict[bytes, str] = {}


def valid_name(b: bytes) -> bool:
    """workq's ValidateName: 1-255 bytes of `[a-zA-Z0-9_.-]`."""
    return b in _valid_names or (0 < len(b) <= MAX_NAME and _NAME.match(b) is not None)


def queue_name(b: bytes) -> str | None:
    """The queue name `b` decoded when it is valid (valid_name), else None. Valid names are
    remembered (up to 10,000), so a busy queue's name is checked and decoded once."""
    s = _valid_names.get(b)
    if s is not None:
        return s
    if not (0 < len(b) <= MAX_NAME and _NAME.match(b) is not None):
        return None
    s = b.decode()
    if len(_valid_names) < 10_000:
        _valid_names[b] = s
    return s


def parse_time(b: bytes) -> int | None:
    """Go time.Parse("2006-01-02T15:04:05Z", s) -> wall ms since the epoch (UTC).

    As in Go: a fractional second may follow the seconds (kept to the ms), the hour may have one
    digit, month / day / minute / second are range-checked. Year 0 is refused (no date before
    year 1 can be scheduled in the future anyway)."""
    m = _TIME.match(b)
    if m is None:
        return None
    y, mo, d, h, mi, s = (int(x) for x in m.groups()[:6])
    if not (1 <= mo <= 12 and 0 <= h < 24 and mi < 60 and s < 60 and y >= 1):
        return None
    if not 1 <= d <= calendar.monthrange(y, mo)[1]:
        return None
    frac = m.group(7)
    ms = int((frac + b"000")[:3]) if frac else 0
    return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) * 1000 + ms


def format_time(ms: int) -> str:
    """Wall ms -> "2006-01-02T15:04:05Z" (UTC, whole seconds, as workq formats times)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms // 1000))
