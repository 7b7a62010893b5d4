"""Stream reads of glide-mq's keys (protocols/resp/keys.py has the overview): XLEN, XRANGE,
XREVRANGE, XPENDING.

`:stream` lists the jobs a glide-mq worker would find there: ready or reserved jobs of
glide priority 0 that are not lifo (keyview.in_stream), fields `jobId <id> name <name>`
(golden G26). Entry id: `<created wall ms>-<canonical job id>`. It is stable (a job keeps
its id while it stays, also across a retry or a restart: both parts are stored with the job)
and unique (the job id), and entries are listed sorted by it, so XRANGE always shows
increasing ids. A NEW job's id is greater than every earlier one as long as the server's wall
clock does not step back between the two puts: canonical ids increase with creation, and so
does the created time on a clock that only moves forward. After a clock step back, a new
entry sorts before older ones (a reader that resumes from its last seen id would skip it);
glide-mq's producers do not resume reads of `:stream`, its workers use the consumer group.

`:events` is GlideState.events (ids from GlideState.next_sid, always increasing).

A stream exists while it has entries, and `:stream` also while its consumer group
`workers` exists (XGROUP CREATE ... MKSTREAM), as Redis keeps an emptied stream.

XPENDING <stream> <group>: NOGROUP (exact text of golden G44 / I22) unless the stream's key
is in GlideState.groups and `group` is `workers`; then the pending entries are the reserved
jobs of the stream, their consumer the lease's owner name (a glide-mq worker's consumer, or
e.g. `beanstalk#3`), delivery count the job's reserves, idle time the ms since its lease
started (extras processedOn when set, else the lease deadline minus the job's TTR).
"""
from __future__ import annotations

from core.api import RESERVED

from .commands import SYNTAX, WRONGTYPE, command
from .encode import NullArray
from .glide import parse_key
from .keyargs import is_word, parse_count, parse_int, parse_sid, sid_decr, sid_incr
from .keyview import (ReplyError, bulk, entry_id, glide_jobs, in_stream, read, replies,
                      resolve, sid)


def _bounds(lo: bytes, hi: bytes) -> tuple:
    """(start, end) ids of an interval given as start `lo`, end `hi`; None start/end: empty."""
    start, sx = parse_sid(lo, end=False)
    end, ex = parse_sid(hi, end=True)
    if sx:
        start = sid_incr(start)
        if start is None:
            raise ReplyError("ERR invalid start ID for the interval")
    if ex:
        end = sid_decr(end)
        if end is None:
            raise ReplyError("ERR invalid end ID for the interval")
    return start, end


def _entry(e) -> list:
    return [sid(e[0]), [bulk(x) for x in e[1]]]


def _range(sess, args, rev: bool):
    key = args[0]
    start, end = _bounds(args[2], args[1]) if rev else _bounds(args[1], args[2])
    count = parse_count(args, 3)
    entries = read(sess, key, "stream")
    if entries is None:
        return []
    if count == 0:
        return NullArray                  # Redis: a null array for COUNT 0 on a stream
    sel = [e for e in entries if start <= e[0] <= end]
    if rev:
        sel.reverse()
    if count > 0:
        sel = sel[:count]
    return [_entry(e) for e in sel]


@command("XLEN", 2)
@replies
def xlen(sess, args):
    """XLEN key -> the number of entries (0 for a missing key)."""
    return len(read(sess, args[0], "stream") or ())


@command("XRANGE", -4)
@replies
def xrange(sess, args):
    """XRANGE key start end [COUNT n] -> [[id, [field, value, ...]], ...] in id order; ids
    `-`, `+`, `<ms>`, `<ms>-<seq>`, `(` exclusive. Errors: invalid id, invalid interval,
    syntax, not an integer (parsed before the key is read, as Redis does)."""
    return _range(sess, args, False)


@command("XREVRANGE", -4)
@replies
def xrevrange(sess, args):
    """XREVRANGE key end start [COUNT n] -> entries from `end` down to `start`."""
    return _range(sess, args, True)


def _pending(sess, key: bytes) -> list:
    """[(entry id, consumer, idle ms, deliveries)] of the reserved jobs in `key`'s stream."""
    k = parse_key(key)
    now = sess.state.clock.wall_ms()
    out = []
    for v, g in glide_jobs(sess, k, (RESERVED,)):
        if not in_stream(v, g) or v.lease is None:
            continue
        start = (v.ext or {}).get("processedOn")
        try:
            start = int(start) if start is not None else v.lease.due_ms - v.ttr_ms
        except (TypeError, ValueError):
            start = v.lease.due_ms - v.ttr_ms
        out.append((entry_id(v), v.lease.owner, max(0, now - start), v.reserves))
    out.sort(key=lambda p: p[0])
    return out


@command("XPENDING", -3)
@replies
def xpending(sess, args):
    """XPENDING key group -> [count, min id, max id, [[consumer, count text], ...]]
    ([0, null, null, null array] when nothing is pending); XPENDING key group [IDLE ms] start end
    count [consumer] -> [[id, consumer, idle ms, deliveries], ...]. NOGROUP until the group
    exists (see the module docstring)."""
    key, group = args[0], args[1]
    ext = None
    if len(args) >= 5:
        i, min_idle = 2, 0
        if is_word(args[2], b"IDLE"):
            min_idle = parse_int(args[3])
            if len(args) < 7:
                raise ReplyError(SYNTAX)
            i = 4
        count = max(0, parse_int(args[i + 2]))
        start, end = _bounds(args[i], args[i + 1])
        consumer = args[i + 3] if i + 3 < len(args) else None
        ext = (min_idle, count, start, end, consumer)
    elif len(args) != 2:
        raise ReplyError(SYNTAX)
    e = resolve(sess, key)
    if e is not None and e[0] != "stream":
        raise ReplyError(WRONGTYPE)
    k = key.decode("utf-8", "replace")
    if e is None or group != b"workers" or k not in sess.state.groups:
        text = (f"NOGROUP No such key '{k}' or consumer group "
                f"'{group.decode('utf-8', 'replace')}'")
        raise ReplyError(text.replace("\r", " ").replace("\n", " "))  # as Redis: one line
    pend = _pending(sess, key)
    if ext is None:
        if not pend:
            return [0, None, None, NullArray]
        per: dict = {}
        for p in pend:
            per[p[1]] = per.get(p[1], 0) + 1
        return [len(pend), sid(pend[0][0]), sid(pend[-1][0]),
                [[bulk(c), bulk(n)] for c, n in sorted(per.items(), key=lambda x: bulk(x[0]))]]
    min_idle, count, start, end, consumer = ext
    out = []
    for p in pend:
        if len(out) >= count:
            break
        if not (start <= p[0] <= end) or p[2] < min_idle:
            continue
        if consumer is not None and bulk(p[1]) != consumer:
            continue
        out.append([sid(p[0]), bulk(p[1]), p[2], p[3]])
    return out
