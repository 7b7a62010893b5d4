"""Key-space reads over glide-mq's keys (protocols/resp/keys.py has the overview): TYPE,
EXISTS, TTL, PTTL, SCAN, KEYS, DBSIZE.

The key space is keyview.all_keys: every key that exists in the view (job hashes, their
deps sets and log lists, the queue keys that hold something, records, events streams, live
tryLock locks), for the connection's principal. Keys that are not glide-mq keys never exist.

SCAN's cursor is a position in a fixed order of all possible keys: a 64-bit hash of the key
(BLAKE2b, 8 bytes, mapped to 1..2^64-1). A call returns the keys whose hash is at or after
the cursor, COUNT of them (default 10; keys with equal hashes are never split), then MATCH
and TYPE filter them (so a batch can be empty while the cursor is not 0, as in Redis), and
the next cursor is the hash of the next key, 0 at the end. A key that exists during the
whole iteration is returned exactly once; keys added or removed meanwhile may or may not
be, as Redis guarantees. The key order is not Redis's (the golden sorts SCAN and KEYS
results: G64-G66). KEYS answers its matches sorted.
"""
from __future__ import annotations

import re
from bisect import bisect_left
from hashlib import blake2b

from .commands import SYNTAX, command
from .encode import Simple
from .globmatch import glob_match
from .keyargs import U64, is_word, parse_int
from .keyview import ReplyError, all_keys, bulk, replies, resolve

_CURSOR = re.compile(rb"([+-]?)([0-9]+)\Z")


@command("TYPE", 2)
@replies
def type_(sess, args):
    """TYPE key -> simple string, `none` for a missing key (golden G50-G61)."""
    e = resolve(sess, args[0])
    return Simple("none" if e is None else e[0])


@command("EXISTS", -2)
@replies
def exists(sess, args):
    """EXISTS key... -> how many of the keys exist (a repeated key counts each time)."""
    return sum(1 for k in args if resolve(sess, k) is not None)


def _ttl_ms(sess, raw: bytes) -> int:
    if resolve(sess, raw) is None:
        return -2
    held = sess.state.locks.get(raw.decode("utf-8", "replace"))
    if held is None or not held[1]:
        return -1
    return max(0, held[1] - sess.state.clock.monotonic_ms())


@command("PTTL", 2)
@replies
def pttl(sess, args):
    """PTTL key -> ms left of a lock's expiry; -1 for a key without one; -2 missing."""
    return _ttl_ms(sess, args[0])


@command("TTL", 2)
@replies
def ttl(sess, args):
    """TTL key -> PTTL in seconds, rounded as Redis rounds it; -1 / -2 as PTTL."""
    ms = _ttl_ms(sess, args[0])
    return ms if ms < 0 else (ms + 500) // 1000


def position(key: str) -> int:
    """The SCAN order of `key`: 1..2^64-1."""
    h = int.from_bytes(blake2b(key.encode("utf-8", "surrogateescape"), digest_size=8).digest(),
                       "big")
    return h % U64 + 1


def _cursor(b: bytes) -> int:
    if b == b"":
        return 0                          # C strtoul reads "" as 0
    m = _CURSOR.match(b)
    digits = b"" if m is None else (m.group(2).lstrip(b"0") or b"0")
    if not digits or len(digits) > 20 or int(digits) > U64:
        raise ReplyError("ERR invalid cursor")
    n = int(digits)
    return (-n) & U64 if m.group(1) == b"-" else n


@command("SCAN", -2)
@replies
def scan(sess, args):
    """SCAN cursor [MATCH pattern] [COUNT n] [TYPE type] -> [next cursor, [key, ...]].
    Errors: `ERR invalid cursor`, COUNT not an integer, COUNT < 1 or an unknown option: syntax
    error. TYPE compares case-insensitively; an unknown type matches nothing (Redis 7.0)."""
    cur = _cursor(args[0])
    count, pat, typ = 10, None, None
    i = 1
    while i < len(args):
        if len(args) - i < 2:
            raise ReplyError(SYNTAX)
        opt, val = args[i], args[i + 1]
        if is_word(opt, b"COUNT"):
            count = parse_int(val)
            if count < 1:
                raise ReplyError(SYNTAX)
        elif is_word(opt, b"MATCH"):
            pat = None if val == b"*" else val
        elif is_word(opt, b"TYPE"):
            typ = val.decode("latin-1").lower()
        else:
            raise ReplyError(SYNTAX)
        i += 2
    keys = all_keys(sess)
    order = sorted((position(k), k) for k in keys)
    at = bisect_left(order, (cur, ""))
    end = min(at + count, len(order))
    while 0 < end < len(order) and order[end][0] == order[end - 1][0]:
        end += 1
    nxt = order[end][0] if end < len(order) else 0
    out = []
    for _, k in order[at:end]:
        if typ is not None and keys[k] != typ:
            continue
        b = bulk(k)
        if pat is not None and not glob_match(pat, b):
            continue
        out.append(b)
    return [str(nxt).encode(), out]


@command("KEYS", 2)
@replies
def keys(sess, args):
    """KEYS pattern -> the matching keys, sorted."""
    pat = args[0]
    return sorted(b for b in (bulk(k) for k in all_keys(sess)) if glob_match(pat, b))


@command("DBSIZE", 1)
@replies
def dbsize(sess, args):
    """DBSIZE -> how many keys exist in the view."""
    return len(all_keys(sess))
