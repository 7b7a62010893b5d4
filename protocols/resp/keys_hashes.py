"""Hash and string reads of glide-mq's keys (protocols/resp/keys.py has the overview):
HGETALL, HGET, HMGET, HLEN, HEXISTS, HKEYS, HVALS, HSTRLEN, GET, MGET.

Hashes: `:job:<id>` (glide.job_hash: the job as addJob wrote it plus what the worker side
set, `state` from the canonical state), `:meta`, `:dedup`, `:ordering`, `:group:<key>`
(GlideState records). Strings: `:id` (the id counter), glidemq_tryLock locks; `:list-active`
never exists (GET answers null, golden G40). Field order is addJob's; the golden sorts
fields, so any order matches it.

Reply shapes (golden G01-G23, I06, I11, I17, I25): HGETALL a Map (RESP3 map, RESP2 flat
array), a missing key an empty Map (G17); HGET / GET of a missing key or field null (RESP3
`_`, RESP2 nil bulk); HMGET an array with nulls. A key of another type: WRONGTYPE (H14,
H19), checked before any field.
"""
from __future__ import annotations

from .commands import command
from .encode import Map
from .keyview import bulk, read, replies, resolve


def _hash(sess, raw: bytes) -> list:
    return read(sess, raw, "hash") or []


def _field(pairs: list, name: bytes):
    for f, v in pairs:
        if bulk(f) == name:
            return bulk(v)
    return None


@command("HGETALL", 2)
@replies
def hgetall(sess, args):
    """HGETALL key -> Map of (field, value) bulk pairs; empty for a missing key."""
    return Map([(bulk(f), bulk(v)) for f, v in _hash(sess, args[0])])


@command("HGET", 3)
@replies
def hget(sess, args):
    """HGET key field -> the value, or null (missing key or field). O(1) for a job hash: the
    job is found by its canonical uid (port.lookup), not by a scan (Job.getState polls
    `HGET ... state`)."""
    return _field(_hash(sess, args[0]), args[1])


@command("HMGET", -3)
@replies
def hmget(sess, args):
    """HMGET key field... -> [value or null per field]."""
    pairs = _hash(sess, args[0])
    return [_field(pairs, f) for f in args[1:]]


@command("HLEN", 2)
@replies
def hlen(sess, args):
    """HLEN key -> the number of fields (0 for a missing key)."""
    return len(_hash(sess, args[0]))


@command("HEXISTS", 3)
@replies
def hexists(sess, args):
    """HEXISTS key field -> 1 / 0."""
    return 0 if _field(_hash(sess, args[0]), args[1]) is None else 1


@command("HKEYS", 2)
@replies
def hkeys(sess, args):
    """HKEYS key -> [field...] ([] for a missing key)."""
    return [bulk(f) for f, _ in _hash(sess, args[0])]


@command("HVALS", 2)
@replies
def hvals(sess, args):
    """HVALS key -> [value...] ([] for a missing key)."""
    return [bulk(v) for _, v in _hash(sess, args[0])]


@command("HSTRLEN", 3)
@replies
def hstrlen(sess, args):
    """HSTRLEN key field -> the value's length in bytes (0 when missing)."""
    v = _field(_hash(sess, args[0]), args[1])
    return 0 if v is None else len(v)


@command("GET", 2)
@replies
def get(sess, args):
    """GET key -> the string (`:id` counter as decimal text, a lock's token), or null."""
    v = read(sess, args[0], "string")
    return None if v is None else bulk(v)


@command("MGET", -2)
@replies
def mget(sess, args):
    """MGET key... -> [string or null]; a key of another type reads as null (Redis)."""
    out = []
    for k in args:
        e = resolve(sess, k)
        out.append(bulk(e[1]) if e is not None and e[0] == "string" else None)
    return out
