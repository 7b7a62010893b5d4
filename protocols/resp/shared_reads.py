"""glide-mq key reads on a node in shared mode (issue 19; docs/scaling.md "glide-mq across
nodes"): a read command naming jobs (`job:<id>`, `log:<id>`, `deps:<id>`), queues (`stream`,
`scheduled`, `completed`, `failed`, `lifo`), the id counter or the `meta` and `dedup` hashes
first reads what the database holds of them (the jobs' rows, the queue's rows beside this
node's jobs, the shared counter, the meta hash the last pause or resume through any node
stored: Queue.isPaused reads it, every node's dedup entries), then runs as on one server
over that (protocols/resp/keyview.py reads `sess.remote`, `sess.rows`, `sess.counters`,
`sess.metas` {(kind, base): value}). Keys of queues the connection may not use read as
missing.
"""
from __future__ import annotations

from .glide import parse_key, uid_of
from .keyview import visible
from .shared import _call, _Gather, _unavailable

#: at most this many rows of a queue a queue-level key read takes from the database
QUEUE_ROWS_MAX = 100_000
#: key kinds named with a job id, read by the job's uid
JOB_KINDS = frozenset(("job", "log", "deps"))
#: queue-level key kinds computed from the queue's jobs
QUEUE_KINDS = frozenset(("stream", "scheduled", "completed", "failed", "lifo"))


def prefetch(sess, cmd, args: list):
    """Before read command `cmd` (its arguments `args`) on a node in shared mode: None when
    it names no job or queue key (it runs at once), else WAIT and the command runs once the
    rows are read, its reply through `sess.wake`."""
    uids = []
    queues = []
    counters = []
    metas = []
    port = sess.port
    for a in args:
        if a.__class__ is not bytes or b":{" not in a:
            continue
        k = parse_key(a)
        if k is None:
            continue
        if not visible(sess, k.queue):
            continue   # reads as missing, as on one server (keyview.visible)
        if k.kind in JOB_KINDS and k.arg:
            uid = uid_of(k.prefix, k.queue, k.arg)
            if port.find(uid) is None and uid not in uids:
                uids.append(uid)
        elif k.kind in QUEUE_KINDS and k.arg is None and k.queue not in queues:
            queues.append(k.queue)
        elif k.kind == "id" and k.arg is None and k.base not in counters:
            counters.append(k.base)
        elif k.kind in ("meta", "dedup") and k.arg is None and (k.kind, k.base) not in metas:
            metas.append((k.kind, k.base))
    if not uids and not queues and not counters and not metas:
        return None
    from .session import WAIT

    def then(res) -> None:
        sess.remote = res[0] if uids else {}
        rest = res[1:] if uids else res
        sess.rows = dict(zip(queues, rest))
        rest = rest[len(queues):]
        sess.counters = dict(zip(counters, rest))
        sess.metas = dict(zip(metas, rest[len(counters):]))
        try:
            reply = _call(sess, cmd.fn, args)
        finally:
            sess.remote = sess.rows = sess.counters = sess.metas = None
        sess.wake(reply)
    g = _Gather(len(queues) + len(counters) + len(metas) + (1 if uids else 0), then,
                lambda e: sess.wake(_unavailable(e)))
    sess.preparing = True
    i = 0
    if uids:
        port.lookup_remote_many(uids, g.slot(0))
        i = 1
    for q in queues:
        port.jobs_global(q, None, False, QUEUE_ROWS_MAX, g.slot(i))
        i += 1
    st = sess.state
    for base in counters:   # the shared counter's value, read without a write
        port.counter_global(f"glidemq:id:{base}", st.counter(base), g.slot(i))
        i += 1
    for kind, base in metas:
        if kind == "meta":   # the meta hash the last pause or resume on any node stored
            port.dialect_record_global(f"glidemq:meta:{base}", g.slot(i))
        else:   # every node's dedup entries
            port.dialect_records_global(f"glidemq:dedup:{base}:", g.slot(i))
        i += 1
    return WAIT


__all__ = ["prefetch", "QUEUE_ROWS_MAX"]
