"""Sorted-set reads of glide-mq's keys (protocols/resp/keys.py has the overview): ZCARD,
ZSCORE, ZMSCORE, ZCOUNT, ZRANK, ZREVRANK, ZRANGE (rank, BYSCORE, REV, LIMIT, WITHSCORES),
ZREVRANGE, ZRANGEBYSCORE, ZREVRANGEBYSCORE. BYLEX is not offered (a syntax error): glide-mq
does not use it and its zsets have distinct scores.

Zsets: `:scheduled` (keyview.in_scheduled, score keyview.scheduled_score: priority * 2^42 +
due time; golden G29-G33), `:completed` and `:failed` (score finishedOn; missing while empty,
G34-G36, G58), `:suspended` and `:ratelimited` (always missing: jobgate has no suspended or
rate-limited glide-mq jobs; G67). Members are glide-mq job ids, ordered by (score, member
bytes) as Redis orders them.

Shapes: WITHSCORES in RESP3 is an array of [member, Double] pairs, in RESP2 a flat array
with the scores as bulk text (G30, I12); ZSCORE a Double / bulk text (G32, I13), null for a
missing member. Option and range errors are Redis 7.0's texts, raised before the key is read.
"""
from __future__ import annotations

from .commands import SYNTAX, command
from .keyargs import index_range, is_word, parse_int, parse_score_bound, score_reply
from .keyview import ReplyError, bulk, read, replies

_LIMIT_RANK = ("ERR syntax error, LIMIT is only supported in combination with either "
               "BYSCORE or BYLEX")


def _zset(sess, raw: bytes) -> list:
    return read(sess, raw, "zset") or []


def _in(x: float, lo: tuple, hi: tuple) -> bool:
    a, ax = lo
    b, bx = hi
    return (x > a if ax else x >= a) and (x < b if bx else x <= b)


def _reply(sess, items: list, withscores: bool) -> list:
    if not withscores:
        return [bulk(m) for m, _ in items]
    if sess.proto >= 3:
        return [[bulk(m), score_reply(sess, s)] for m, s in items]
    out = []
    for m, s in items:
        out.append(bulk(m))
        out.append(score_reply(sess, s))
    return out


def _generic(sess, args: list, byscore: bool, rev: bool, fixed: bool):
    """Redis's zrangeGenericCommand: `fixed` (ZRANGEBYSCORE and kin): BYSCORE / REV are
    given by the command and refused as options."""
    withscores = False
    offset, limit = 0, -1
    auto_dir = auto_type = not fixed
    j = 3
    while j < len(args):
        a = args[j]
        left = len(args) - j - 1
        if is_word(a, b"WITHSCORES"):
            withscores = True
        elif is_word(a, b"LIMIT") and left >= 2:
            offset, limit = parse_int(args[j + 1]), parse_int(args[j + 2])
            j += 2
        elif auto_dir and is_word(a, b"REV"):
            rev, auto_dir = True, False
        elif auto_type and is_word(a, b"BYSCORE"):
            byscore, auto_type = True, False
        else:
            raise ReplyError(SYNTAX)
        j += 1
    if limit != -1 and not byscore:
        raise ReplyError(_LIMIT_RANK)
    lo_arg, hi_arg = (args[2], args[1]) if rev and byscore else (args[1], args[2])
    if byscore:
        lo, hi = parse_score_bound(lo_arg), parse_score_bound(hi_arg)
    else:
        start, stop = parse_int(lo_arg), parse_int(hi_arg)
    items = _zset(sess, args[0])
    if not items:
        return []
    if byscore:
        sel = [p for p in items if _in(p[1], lo, hi)]
        if rev:
            sel.reverse()
        if offset < 0:
            return []
        sel = sel[offset:] if limit < 0 else sel[offset:offset + limit]
    else:
        r = index_range(start, stop, len(items))
        if r is None:
            return []
        seq = items[::-1] if rev else items
        sel = seq[r[0]:r[1]]
    return _reply(sess, sel, withscores)


@command("ZRANGE", -4)
@replies
def zrange(sess, args):
    """ZRANGE key start stop [BYSCORE] [REV] [LIMIT offset count] [WITHSCORES]."""
    return _generic(sess, args, False, False, False)


@command("ZREVRANGE", -4)
@replies
def zrevrange(sess, args):
    """ZREVRANGE key start stop [WITHSCORES]."""
    return _generic(sess, args, False, True, True)


@command("ZRANGEBYSCORE", -4)
@replies
def zrangebyscore(sess, args):
    """ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]."""
    return _generic(sess, args, True, False, True)


@command("ZREVRANGEBYSCORE", -4)
@replies
def zrevrangebyscore(sess, args):
    """ZREVRANGEBYSCORE key max min [WITHSCORES] [LIMIT offset count]."""
    return _generic(sess, args, True, True, True)


@command("ZCARD", 2)
@replies
def zcard(sess, args):
    """ZCARD key -> the number of members (0 for a missing key)."""
    return len(_zset(sess, args[0]))


def _score(items: list, member: bytes):
    for m, s in items:
        if bulk(m) == member:
            return s
    return None


@command("ZSCORE", 3)
@replies
def zscore(sess, args):
    """ZSCORE key member -> the score (Double / RESP2 bulk) or null."""
    s = _score(_zset(sess, args[0]), args[1])
    return None if s is None else score_reply(sess, s)


@command("ZMSCORE", -3)
@replies
def zmscore(sess, args):
    """ZMSCORE key member... -> [score or null]."""
    items = _zset(sess, args[0])
    out = []
    for m in args[1:]:
        s = _score(items, m)
        out.append(None if s is None else score_reply(sess, s))
    return out


@command("ZCOUNT", 4)
@replies
def zcount(sess, args):
    """ZCOUNT key min max -> the number of members scored within [min, max]."""
    lo, hi = parse_score_bound(args[1]), parse_score_bound(args[2])
    return sum(1 for _, s in _zset(sess, args[0]) if _in(s, lo, hi))


def _rank(sess, args, rev: bool):
    items = _zset(sess, args[0])
    for i, (m, _) in enumerate(items):
        if bulk(m) == args[1]:
            return len(items) - 1 - i if rev else i
    return None


@command("ZRANK", 3)
@replies
def zrank(sess, args):
    """ZRANK key member -> its 0-based rank (lowest score first), or null."""
    return _rank(sess, args, False)


@command("ZREVRANK", 3)
@replies
def zrevrank(sess, args):
    """ZREVRANK key member -> its rank from the highest score, or null."""
    return _rank(sess, args, True)
