"""What each glide-mq key holds, computed from the canonical jobs and GlideState (the model
behind the read commands of protocols/resp/keys.py; docs in that module).

`resolve(sess, raw)` -> (redis type, content) or None (the key does not exist);
`read(sess, raw, want)` -> the content when the key is of type `want`, None when it does not
exist, ReplyError(WRONGTYPE) when it is of another type. Contents by type:

- hash: [(field str, value str)] pairs; string: str; list: [str]; set: [str];
- zset: [(member str, score float)] sorted by (score, member bytes) as Redis orders them;
- stream: [((ms, seq), [field, value, ...])] sorted by entry id, fields str or bytes.

Which job is where (only jobs whose extras have ``glide`` and whose prefix is the key's):
`in_stream` (ready or reserved, glide priority 0, not lifo), `in_scheduled` (delayed and
not waiting for children, or ready with priority > 0), `in_lifo` (ready lifo, priority 0),
completed (state completed), failed (state buried). `all_keys(sess)` lists every key that
exists, for SCAN / KEYS / DBSIZE.

Access: a connection whose principal may not use a queue sees none of its keys (they read as
missing), as core.api ScopedPort hides its jobs from `lookup`.
"""
from __future__ import annotations

import functools

from core.api import BURIED, COMPLETED, DELAYED, READY, RESERVED

from .commands import WRONGTYPE
from .encode import Error
from .glide import (SCORE_SHIFT, TYPES, finished_on, glide_of, gprio, job_hash, parse_key,
                    uid_of)

#: Kinds whose key has an argument (`job:<id>`, `group:<key>`, ...).
WITH_ARG = frozenset(("job", "log", "deps", "group", "groupq"))
#: Queue-level kinds that can exist in this view (the others of glide.TYPES never do).
QUEUE_KINDS = ("id", "stream", "scheduled", "events", "meta", "dedup", "completed", "failed",
               "lifo", "ordering")


class ReplyError(Exception):
    """An error reply (`text`, e.g. WRONGTYPE) raised inside a handler; `replies` turns it
    into an encode.Error."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def replies(fn):
    """Decorate a handler `fn(sess, args)` so that a ReplyError becomes its Error reply."""
    @functools.wraps(fn)
    def run(sess, args):
        try:
            return fn(sess, args)
        except ReplyError as e:
            return Error(e.text)
    return run


def bulk(x) -> bytes:
    """A bulk string reply of `x` (bytes as is; str as UTF-8, lone surrogates from a binary
    payload back to their bytes; int as decimal)."""
    if x.__class__ is bytes:
        return x
    if x.__class__ is str:
        return x.encode("utf-8", "surrogateescape")
    return str(x).encode()


def visible(sess, queue: str) -> bool:
    """True when the connection may see `queue` (its port is a core.api ScopedPort whose
    principal allows it, or an unscoped Port)."""
    p = getattr(sess.port, "principal", None)
    return p is None or p.allows(queue)


# ------------------------------------------------------------------ jobs of a queue
def glide_jobs(sess, key, states=None) -> list:
    """[(JobView, glide extras)] of `key`'s queue and prefix, in id order (port.jobs)."""
    if not visible(sess, key.queue):
        return []
    out = []
    rows = sess.rows   # shared mode: this node's jobs and the rows (protocols/resp/shared.py)
    views = sess.port.jobs(key.queue, states) if rows is None or key.queue not in rows else \
        [v for v in rows[key.queue] if states is None or v.state in states]
    for v in views:
        g = glide_of(v)
        if g is not None and g.get("pfx", "glide") == key.prefix:
            out.append((v, g))
    return out


def _lifo(v) -> bool:
    return bool((v.ext or {}).get("lifo"))


def in_stream(v, g) -> bool:
    """A job with an entry in `:stream`: ready or reserved, glide priority 0, not lifo."""
    return (v.state is READY or v.state is RESERVED) and gprio(g) == 0 and not _lifo(v)


def in_scheduled(v, g) -> bool:
    """A member of `:scheduled`: delayed (not waiting for children) or prioritized ready."""
    if v.state is DELAYED:
        return not v.blocked
    return v.state is READY and gprio(g) > 0


def in_lifo(v, g) -> bool:
    """A member of `:lifo`: a ready lifo job of priority 0."""
    return v.state is READY and gprio(g) == 0 and _lifo(v)


def scheduled_score(v, g) -> float:
    """priority * 2^42 + due time; the due time of a job still delayed by addJob is the
    producer's timestamp + delay (glide.due), of any other delayed job (a retry's backoff, a
    beanstalk release with delay) the engine's due time in wall ms; a ready prioritized job
    has due time 0 (glide-mq-NOTES.md "Keys per queue")."""
    p = gprio(g)
    if v.state is not DELAYED:
        return float(p * SCORE_SHIFT)
    due = g.get("due")
    if due is None or v.reserves:
        due = v.due_ms
    try:
        due = int(due)
    except (TypeError, ValueError):
        due = v.due_ms
    return float(p * SCORE_SHIFT + due)


def entry_id(v) -> tuple:
    """The `:stream` entry id of job `v` as (ms, seq): (created wall ms, canonical id)."""
    return (v.created_ms, v.id)


def sid(t: tuple) -> bytes:
    """A stream entry id (ms, seq) as its wire text `<ms>-<seq>`."""
    return b"%d-%d" % t


def _zset(pairs) -> list | None:
    out = sorted(pairs, key=lambda p: (p[1], bulk(p[0])))
    return out or None


# ------------------------------------------------------------------ contents by kind
def _job(sess, key):
    """(JobView, glide extras) of `job:<id>` / `log:<id>` / `deps:<id>`'s job, or None."""
    uid = uid_of(key.prefix, key.queue, key.arg)
    v = sess.port.lookup(uid)
    if v is None and sess.remote:   # shared mode: its row (protocols/resp/shared.py)
        v = sess.remote.get(uid)
    if v is None or v.queue != key.queue:
        return None
    g = glide_of(v)
    return None if g is None else (v, g)


def _c_job(sess, key):
    j = _job(sess, key)
    return None if j is None else job_hash(j[0])


def _c_log(sess, key):
    j = _job(sess, key)
    if j is None:
        return None
    out = []
    for e in (j[0].ext or {}).get("logs") or ():   # bunqueue AddLog: [message, level, ms]
        m = e[0] if isinstance(e, (list, tuple)) and e else e
        out.append(m if isinstance(m, (str, bytes)) else str(m))
    return out or None


def _c_deps(sess, key):
    j = _job(sess, key)
    return None if j is None else (list(j[1].get("deps") or ()) or None)


def _record_hash(d) -> list | None:
    return [(str(k), str(v)) for k, v in d.items()] if d else None


def _c_meta(sess, key):
    if not visible(sess, key.queue):
        return None
    m = sess.metas   # shared mode: as the database holds it (protocols/resp/shared_reads.py)
    if m is not None and ("meta", key.base) in m:
        d = m["meta", key.base]
        return _record_hash(d) if d.__class__ is dict else None
    return _record_hash(sess.state.meta(key.base))


def _c_dedup(sess, key):
    if not visible(sess, key.queue):
        return None
    m = sess.metas   # shared mode: every node's entries (protocols/resp/shared_reads.py)
    if m is not None and ("dedup", key.base) in m:
        pfx = len(f"glidemq:dedup:{key.base}:")
        return _record_hash({k[pfx:]: v for k, v in m["dedup", key.base].items()})
    return _record_hash(sess.state.dedup_hash(key.base))


def _c_ordering(sess, key):
    return _record_hash(sess.state.ordering(key.base)) if visible(sess, key.queue) else None


def _c_group(sess, key):
    if not visible(sess, key.queue):
        return None
    return _record_hash(sess.state.group(key.base, key.arg))


def _c_id(sess, key):
    c = sess.counters   # shared mode: the counter every node shares (resp/shared.py)
    if c is not None and key.base in c:
        n = c[key.base]
    else:
        n = sess.state.counter(key.base) if visible(sess, key.queue) else 0
    return str(n) if n else None


def _c_stream(sess, key, pairs=None):
    if pairs is None:
        pairs = glide_jobs(sess, key, (READY, RESERVED))
    out = [(entry_id(v), ["jobId", g["id"], "name", (v.ext or {}).get("name") or ""])
           for v, g in pairs if in_stream(v, g)]
    if not out and key.raw.decode() not in sess.state.groups:
        return None
    out.sort(key=lambda e: e[0])
    return out


def _c_events(sess, key):
    if not visible(sess, key.queue):
        return None
    d = sess.state.events.get(key.base)
    if not d:
        return None
    return list(d)


def _c_scheduled(sess, key, pairs=None):
    if pairs is None:
        pairs = glide_jobs(sess, key, (DELAYED, READY))
    return _zset((g["id"], scheduled_score(v, g)) for v, g in pairs if in_scheduled(v, g))


def _finished(state):
    def content(sess, key, pairs=None):
        if pairs is None:
            pairs = glide_jobs(sess, key, (state,))
        return _zset((g["id"], float(finished_on(v))) for v, g in pairs if v.state is state)
    return content


def _c_lifo(sess, key):
    """Ready lifo jobs in RPUSH order: the reverse of the engine's serve order, so that the
    list's tail (RPOP) is the job served next."""
    if not visible(sess, key.queue):
        return None
    q = sess.port.queue(key.queue)
    if q is None or not q.ready:
        return None
    out = []
    for v in sess.port.ready_page(key.queue, 0, q.ready):
        g = glide_of(v)
        if g is not None and g.get("pfx", "glide") == key.prefix and in_lifo(v, g):
            out.append(g["id"])
    out.reverse()
    return out or None


CONTENT = {
    "job": _c_job, "log": _c_log, "deps": _c_deps, "meta": _c_meta, "dedup": _c_dedup,
    "ordering": _c_ordering, "group": _c_group, "id": _c_id, "stream": _c_stream,
    "events": _c_events, "scheduled": _c_scheduled, "completed": _finished(COMPLETED),
    "failed": _finished(BURIED), "lifo": _c_lifo,
    # always missing: list-active, suspended, priority, ratelimited, schedulers, groupq
}


def _lock(sess, raw: bytes):
    """The token of an unexpired glidemq_tryLock lock named `raw`, or None."""
    locks = sess.state.locks
    if not locks:
        return None
    try:
        held = locks.get(raw.decode())
    except UnicodeDecodeError:
        return None
    if held is None or (held[1] and held[1] <= sess.state.clock.monotonic_ms()):
        return None
    k = parse_key(raw)
    return held[0] if k is None or visible(sess, k.queue) else None


def resolve(sess, raw: bytes):
    """(type, content) of key `raw` (bytes), or None when it does not exist in the view."""
    tok = _lock(sess, raw)
    if tok is not None:
        return ("string", tok)
    key = parse_key(raw)
    if key is None:
        return None
    fn = CONTENT.get(key.kind)
    if fn is None or (key.kind in WITH_ARG) != (key.arg is not None):
        return None
    c = fn(sess, key)
    return None if c is None else (TYPES[key.kind], c)


def read(sess, raw: bytes, want: str):
    """The content of `raw` when it is a `want` key; None when it does not exist; raises
    ReplyError(WRONGTYPE) when it is of another type."""
    e = resolve(sess, raw)
    if e is None:
        return None
    if e[0] != want:
        raise ReplyError(WRONGTYPE)
    return e[1]


# ------------------------------------------------------------------ every key
def _split_base(base: str):
    k = parse_key((base + ":x").encode())
    return None if k is None else (k.prefix, k.queue)


def all_keys(sess) -> dict:
    """{key str: type} of every key that exists in the view (for the connection's
    principal): per queue one pass over port.jobs for the job-derived keys, then the records
    (counter, meta, dedup, ordering, groups), the events streams and the live locks."""
    st = sess.state
    out: dict = {}
    bases: set = set()
    per: dict = {}                        # (prefix, queue) -> [(view, glide)]
    for q in sess.port.queue_names():     # allowed queues only
        for v in sess.port.jobs(q):
            g = glide_of(v)
            if g is None:
                continue
            pfx = g.get("pfx", "glide")
            per.setdefault((pfx, q), []).append((v, g))
            base = f"{pfx}:{{{q}}}"
            out[f"{base}:job:{g['id']}"] = "hash"
            if g.get("deps"):
                out[f"{base}:deps:{g['id']}"] = "set"
            if (v.ext or {}).get("logs"):
                out[f"{base}:log:{g['id']}"] = "list"
    for b in list(st.bases()) + list(st.events):
        s = _split_base(b)
        if s is not None:
            bases.add(s)
    bases.update(per)
    for pfx, q in bases:
        if not visible(sess, q):
            continue
        base = f"{pfx}:{{{q}}}"
        pairs = per.get((pfx, q), [])
        for kind in QUEUE_KINDS:
            raw = f"{base}:{kind}"
            key = parse_key(raw.encode())
            fn = CONTENT[kind]
            if kind in ("stream", "scheduled", "completed", "failed"):
                c = fn(sess, key, pairs)
            elif kind == "lifo":
                c = True if any(in_lifo(v, g) for v, g in pairs) else None
            else:
                c = fn(sess, key)
            if c is not None:
                out[raw] = TYPES[kind]
        for gk in st.group_keys(base):
            if st.group(base, gk):
                out[f"{base}:group:{gk}"] = "hash"
    for name in list(st.locks):
        if _lock(sess, name.encode()) is not None:
            out[name] = "string"
    return out
