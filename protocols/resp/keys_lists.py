"""List and set reads of glide-mq's keys (protocols/resp/keys.py has the overview): LLEN,
LRANGE, LINDEX, SMEMBERS, SCARD, SISMEMBER, SMISMEMBER.

Lists:
- `:lifo`: ready lifo jobs of priority 0 in RPUSH order (golden G37-G38): the reverse of
  the engine's serve order, so the tail (glide-mq's RPOP) is the job served next;
- `:priority`: always empty (missing). glide-mq moves a prioritized job from `:scheduled`
  into this list only when a worker's promote step runs; jobgate has no such step (the
  canonical engine serves a prioritized job straight from its rank), so a prioritized ready
  job stays a `:scheduled` member scored priority * 2^42 until it is reserved, as it is in
  Redis right after addJob (G30, G39);
- `:log:<id>`: the job's log lines: the messages of the bunqueue-style log entries in its
  extras (``logs``: [message, level, ms], e.g. from a bunqueue AddLog), else empty (G41);
- `:groupq:<key>`: always missing (group limits are not modelled).

Sets: `:deps:<id>`: a flow parent's children, the members glide-mq wrote (extras
glide.deps; G43, I14). SMEMBERS is a RESP3 set (`~`), a RESP2 array.
"""
from __future__ import annotations

from .commands import command
from .encode import Set
from .keyargs import index_range, parse_int
from .keyview import bulk, read, replies


def _list(sess, raw: bytes) -> list:
    return read(sess, raw, "list") or []


def _set(sess, raw: bytes) -> list:
    return read(sess, raw, "set") or []


@command("LLEN", 2)
@replies
def llen(sess, args):
    """LLEN key -> the length (0 for a missing key)."""
    return len(_list(sess, args[0]))


@command("LRANGE", 4)
@replies
def lrange(sess, args):
    """LRANGE key start stop -> the elements in [start, stop] (negative from the end);
    indexes are parsed before the key is read (Redis)."""
    start, stop = parse_int(args[1]), parse_int(args[2])
    items = _list(sess, args[0])
    r = index_range(start, stop, len(items))
    return [] if r is None else [bulk(x) for x in items[r[0]:r[1]]]


@command("LINDEX", 3)
@replies
def lindex(sess, args):
    """LINDEX key index -> the element or null; a missing key answers null before the index
    is parsed (Redis)."""
    items = read(sess, args[0], "list")
    if items is None:
        return None
    i = parse_int(args[1])
    if i < 0:
        i += len(items)
    return bulk(items[i]) if 0 <= i < len(items) else None


@command("SMEMBERS", 2)
@replies
def smembers(sess, args):
    """SMEMBERS key -> Set of members (empty for a missing key)."""
    return Set([bulk(m) for m in _set(sess, args[0])])


@command("SCARD", 2)
@replies
def scard(sess, args):
    """SCARD key -> the number of members."""
    return len(_set(sess, args[0]))


@command("SISMEMBER", 3)
@replies
def sismember(sess, args):
    """SISMEMBER key member -> 1 / 0."""
    return 1 if args[1] in {bulk(m) for m in _set(sess, args[0])} else 0


@command("SMISMEMBER", -3)
@replies
def smismember(sess, args):
    """SMISMEMBER key member... -> [1 / 0 per member]."""
    have = {bulk(m) for m in _set(sess, args[0])}
    return [1 if m in have else 0 for m in args[1:]]
