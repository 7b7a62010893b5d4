"""glide-mq addJobs on a node in shared mode, taken together (issue 19; docs/scaling.md
"glide-mq across nodes", "Cost"): the look-ahead of a connection's pipelined addJobs, so that a
pipeline of n addJobs waits for the database once (one counter statement, one custom-id
check), not n times. The rest of the shared-mode glide-mq functions: protocols/resp/shared.py.
"""
from __future__ import annotations

from collections import deque

from .encode import Error
from .shared import (NOPERM, Prepared, _call, _Gather, _plan, _unavailable, numeric_floor,
                     visible_base, want)

#: at most this many addJobs parsed behind the running one take their ids with it
AHEAD_MAX = 1000


def add_job(sess, fn, keys: list, argv: list, first: tuple):
    """glidemq_addJob in shared mode, `first` its (base, custom id). An addJob the look-ahead
    of an earlier one planned (this very command, parsed behind it in the same pipeline)
    runs at once with the ids and custom-id answers fetched then. Any other takes ids for
    itself and for the addJobs parsed behind it (at most AHEAD_MAX, up to the first one
    whose numeric custom id moves the counter, so ids come out in a single server's order)
    in one statement, and checks their custom ids in the same round: a pipeline of n
    addJobs waits for the database once, not n times. What a plan fetched for commands that
    did not come (refused before their id, or not sent) is dropped at the next unplanned
    addJob: never handed to a later command."""
    base, custom = first
    if not visible_base(sess, base):
        return Error(NOPERM)
    uid = f"{base}:{custom}" if custom else None
    item = sess.current
    planned = sess.planned
    if planned:
        if planned.pop(id(item), None) is item:
            if uid is not None or sess.id_stock.get(base):
                return _run_stocked(sess, fn, keys, argv)
        else:   # an unplanned addJob: the last plan is over
            _drop_plan(sess)
    elif sess.id_stock or sess.taken_stock:
        _drop_plan(sess)
    st = sess.state
    wants: dict = {}          # base -> [auto ids, floor]
    customs: list = []
    want(st, wants, customs, base, custom)
    plan = {}
    ahead = sess.ahead() if sess.ahead is not None else ()
    for i, nxt in enumerate(ahead):
        if i >= AHEAD_MAX:
            break
        if nxt.__class__ is not list or len(nxt) < 3 or nxt[0] != b"FCALL" \
                or nxt[1] != b"glidemq_addJob":
            continue
        parsed = _split(nxt[2:])
        if parsed is None:
            continue
        p = _plan(b"glidemq_addJob", *parsed)
        if p is None or not visible_base(sess, p[0][0]):
            continue
        if numeric_floor(p[0][1]) is not None:
            break   # it moves the counter: the ids behind it are taken after it, with it
        want(st, wants, customs, *p[0])
        plan[id(nxt)] = nxt
    bases = list(wants)

    def then(res) -> None:
        sess.taken_stock |= res[0]
        for b, last in zip(bases, res[1:]):
            n = wants[b][0]
            q = sess.id_stock.get(b)
            if q is None:
                q = sess.id_stock[b] = deque()
            q.extend(str(i) for i in range(last - n + 1, last + 1))
        sess.planned = plan
        sess.wake(_run_stocked(sess, fn, keys, argv))

    from .session import WAIT
    g = _Gather(1 + len(bases), then, lambda e: sess.wake(_unavailable(e)))
    sess.preparing = True
    sess.port.uids_taken_global(customs, g.slot(0))
    for i, b in enumerate(bases):
        n, floor = wants[b]
        sess.port.count_up_global(f"glidemq:id:{b}", n, floor, g.slot(i + 1))
    return WAIT


def _drop_plan(sess) -> None:
    """Forget what the last look-ahead fetched (its ids are skipped)."""
    sess.planned = {}
    sess.id_stock = {}
    sess.taken_stock = set()


def _split(args: list):
    """FCALL's `numkeys keys... args...` -> (keys, argv), or None when malformed."""
    try:
        n = int(args[0])
    except ValueError:
        return None
    if n < 0 or n > len(args) - 1:
        return None
    return args[1:1 + n], args[1 + n:]


def _run_stocked(sess, fn, keys: list, argv: list):
    """Run addJob with the ids and custom-id answers its plan fetched; its reply."""
    sess.prepared = Prepared(sess.id_stock, sess.taken_stock)
    try:
        return _call(sess, fn, keys, argv)
    finally:
        sess.prepared = None


__all__ = ["add_job", "AHEAD_MAX"]
