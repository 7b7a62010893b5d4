"""glide-mq on a node in shared mode (issue 19; docs/scaling.md "glide-mq across nodes").

On one server, glide-mq's functions and key reads run at once on the engine. On a node of a
shared database they need what only the database knows, so the command first fetches it,
then runs exactly as on one server (the function or read of the other modules, unchanged),
and answers; the connection's later commands wait behind it, as behind a blocking command.

- **Job ids** (`glidemq_addJob`, `glidemq_addFlow`): the per-queue counter `glide:{Q}:id`
  is a counter every node shares (Port.count_up_global, core/shared_counters.py): each id
  a node hands out is taken from the database first, so no two nodes hand out one id; a
  numeric custom id above the counter moves it up, as glide-mq's INCR does. A counter a
  single-node server kept (its dialect record) is the floor. An id taken by a call that then
  creates nothing (its custom id is a duplicate, the node stops before its commit) is not
  handed out again: ids can skip a number, which one Redis never does. A connection's
  pipelined addJobs take their ids together (protocols/resp/shared_adds.py).
- **Custom job ids** are checked against the database too (Port.uids_taken_global): a
  custom id any node stored answers `"duplicate"`. Two nodes given one new custom id at the
  same moment can both create it (as bunqueue's custom ids across nodes).
- **Deduplication** (`glidemq_dedup`): the dedup entry is read as the database holds it (the
  last one any node stored: Port.dialect_record_global), and the job it names, when no node
  holds it, is brought here (Port.reach_jobs) so that a debounce can replace it; a job
  another node holds is active (simple and debounce skip). On one node, the dedup calls of
  one dedup id run one after the other (GlideState.dedup_busy). Two nodes given one new
  dedup id at the same moment can both add.
- **Pause and resume** pause the queue on every node (Port.pause_global) before the reply.
- **Key reads** (HGET, HGETALL, EXISTS, ... of `job:<id>`, `log:<id>`, `deps:<id>`; XLEN,
  ZCARD, ZRANGE, ... of `stream`, `scheduled`, `completed`, `failed`, `lifo`) read the
  database's rows of the jobs and queues they name beside this node's jobs: a job spilled
  to the database, or held by another node, reads as it was last committed. A queue-level
  read reads at most 100,000 rows of the queue. `GET <base>:id` reads the shared counter,
  the `meta` hash reads as the last pause or resume through any node stored it
  (`HGET <base>:meta paused`, Queue.isPaused), and the `dedup` hash lists every node's
  entries (protocols/resp/shared_reads.py).
- **Not across nodes** (each node's own): the `:events` stream, ordering keys' sequences,
  tryLock locks, and SCAN / KEYS / DBSIZE (which list the `id` key as this node knows it).

A failed database read or counter answers `ERR jobgate: storage unavailable (...)` and
changes nothing.
"""
from __future__ import annotations

from collections import deque

from core.api import AccessDenied

from .encode import Error
from .glide import parse_key
from .keyview import visible

#: a numeric custom id of at most this many digits moves the shared counter up (a longer
#: one is created but leaves the counter: the counter is a PostgreSQL bigint)
FLOOR_DIGITS = 18
#: the functions that fetch before they run (the others run at once)
PREPARED = frozenset((b"glidemq_addJob", b"glidemq_addFlow", b"glidemq_dedup",
                      b"glidemq_pause", b"glidemq_resume"))
NOPERM = "NOPERM this user has no permissions to access one of the keys used as arguments"


def _s(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def _unavailable(e) -> Error:
    return Error(f"ERR jobgate: storage unavailable ({type(e).__name__}); nothing was changed")


def _call(sess, fn, *args):
    """fn(sess, *args) as Handler.handle runs it: a disallowed queue answers NOPERM; any
    other exception an error reply (the connection must get its answer: it waits)."""
    try:
        return fn(sess, *args)
    except AccessDenied:
        sess.need_commit = False
        return Error(NOPERM)
    except Exception as e:   # a defect: answered, not left hanging
        return Error(f"ERR jobgate: internal error ({type(e).__name__})")


class _Gather:
    """Answers of several asynchronous port calls; `then(results)` once all have come, or
    `failed(exception)` at the first error (once)."""

    def __init__(self, n: int, then, failed) -> None:
        self.left = n
        self.out = [None] * n
        self.then = then
        self.failed = failed
        self.over = False

    def slot(self, i: int):
        def got(res) -> None:
            if self.over:
                return
            if isinstance(res, Exception):
                self.over = True
                self.failed(res)
                return
            self.out[i] = res
            self.left -= 1
            if self.left == 0:
                self.over = True
                self.then(self.out)
        return got


# ------------------------------------------------------------------ ids of a function call
class Prepared:
    """What a function call fetched from the database before it runs (`sess.prepared`):
    `ids` {base: deque of the ids it may hand out (str)}, `taken` (custom uids a row has),
    `record` (glidemq_dedup: the dedup entry as the database holds it, or None), `held`
    (glidemq_dedup: the uid of the entry's job when another node holds it)."""

    __slots__ = ("ids", "taken", "record", "held")

    def __init__(self, ids: dict, taken, record=None, held=frozenset()) -> None:
        self.ids = ids
        self.taken = taken
        self.record = record
        self.held = held


def _plan(name: bytes, keys: list, argv: list):
    """What function `name` needs first: [(base, custom id)] of the jobs it may create, or
    None when its arguments are malformed (the function answers its error)."""
    from .functions_jobs import Refused, _num, _queue_key

    def _id_key(raw: bytes):   # the function's own parse (and its cache of keys)
        try:
            return _queue_key(raw, "id")
        except Refused:
            return None
    if name == b"glidemq_addJob" or name == b"glidemq_dedup":
        if name == b"glidemq_dedup":   # its dedup key, then addJob's keys and arguments
            keys, argv = keys[1:], argv[3:]
        if len(keys) < 4:
            return None
        k = _id_key(keys[0])
        if k is None:
            return None
        custom = _s(argv[16]) if len(argv) > 16 else ""
        return [(k.base, custom)]
    # glidemq_addFlow: the parent's custom id (arg 9), each child's (its arg 9)
    if len(keys) < 4 or len(argv) < 9:
        return None
    n = _num(argv[7])   # as the function reads it (Lua's tonumber)
    if n < 0 or len(argv) < 9 + 9 * n or len(keys) < 4 + 4 * n:
        return None
    out = []
    for i in range(n + 1):
        k = _id_key(keys[4 * i])
        if k is None:
            return None
        out.append((k.base, _s(argv[8] if i == 0 else argv[9 + 9 * (i - 1) + 8])))
    return out


def numeric_floor(custom: str) -> int | None:
    """The floor a numeric custom id puts under the counter (a bigint: at most FLOOR_DIGITS
    digits), or None."""
    return int(custom) if custom.isdigit() and len(custom) <= FLOOR_DIGITS else None


def want(st, wants: dict, customs: list, base: str, custom: str) -> None:
    """Add a new job of `base` with `custom` id (or "") to a fetch: `wants` {base: [auto ids,
    floor]} (the floor starts at the counter a single server kept, GlideState `st`),
    `customs` the custom uids to check."""
    w = wants.get(base)
    if w is None:
        w = wants[base] = [0, st.counter(base)]
    if custom:
        customs.append(f"{base}:{custom}")
        f = numeric_floor(custom)
        if f is not None and f > w[1]:
            w[1] = f
    else:
        w[0] += 1


def run_function(sess, name: bytes, fn, keys: list, argv: list):
    """FCALL `name` on a node in shared mode: the reply at once (functions that need nothing
    from the database, malformed calls) or protocols.resp.streams.WAIT, the reply coming
    through `sess.wake` once the database answered (see the module docstring)."""
    if name not in PREPARED:
        return fn(sess, keys, argv)
    if name in (b"glidemq_pause", b"glidemq_resume"):
        return _pause(sess, name, fn, keys, argv)
    plan = _plan(name, keys, argv)
    if plan is not None and name == b"glidemq_addJob":
        return add_job(sess, fn, keys, argv, plan[0])
    if plan is not None and name == b"glidemq_dedup":
        dedup = _dedup_entry(keys, argv)
        if dedup is False:
            plan = None
    else:
        dedup = None
    if plan is None:   # malformed: the function answers its error, and takes no id
        sess.prepared = Prepared({}, set())
        try:
            return fn(sess, keys, argv)
        finally:
            sess.prepared = None
    st = sess.state
    port = sess.port
    wants: dict = {}          # base -> [auto ids, floor]
    customs: list = []
    for base, custom in plan:
        want(st, wants, customs, base, custom)
    bases = list(wants)
    for base in bases + ([dedup[0]] if dedup else []):
        if not visible_base(sess, base):
            return Error(NOPERM)

    key = f"{dedup[0]}:{dedup[1]}" if dedup else None
    busy = st.dedup_busy

    def finish(reply) -> None:
        sess.wake(reply)
        if key is not None:   # the next dedup call of this id on this node may start
            q = busy[key]
            if q:
                q.popleft()()
            else:
                del busy[key]

    def run(prep: Prepared) -> None:
        sess.prepared = prep
        try:
            reply = _call(sess, fn, keys, argv)
        finally:
            sess.prepared = None
        finish(reply)

    def then(res) -> None:
        ids = {}
        for base, last in zip(bases, res[1:]):
            n = wants[base][0]
            ids[base] = deque(str(i) for i in range(last - n + 1, last + 1))
        prep = Prepared(ids, res[0])
        if dedup is None:
            run(prep)
            return
        prep.record = rec = res[-1]
        uid = _entry_job(dedup, rec)
        if uid is None or port.lookup(uid) is not None:
            run(prep)
            return

        def reached(where) -> None:   # last: nothing may commit between it and the run
            if isinstance(where, Exception):
                finish(_unavailable(where))
                return
            prep.held = frozenset(where)
            run(prep)
        port.reach_jobs([uid], reached)

    from .session import WAIT

    def start() -> None:
        n = 1 + len(bases) + (dedup is not None)
        g = _Gather(n, then, lambda e: finish(_unavailable(e)))
        port.uids_taken_global(customs, g.slot(0))
        for i, base in enumerate(bases):
            w, floor = wants[base]
            port.count_up_global(f"glidemq:id:{base}", w, floor, g.slot(i + 1))
        if dedup is not None:
            port.dialect_record_global(f"glidemq:dedup:{key}", g.slot(n - 1))
    sess.preparing = True
    if key is not None:
        # one dedup call per dedup id at a time on this node: the next reads the entry the
        # one before stored, and no two take in its job at once
        if key in busy:
            busy[key].append(start)
            return WAIT
        busy[key] = deque()
    start()
    return WAIT


def _dedup_entry(keys: list, argv: list):
    """glidemq_dedup's (dedup base, dedupId, mode), or False when its dedup key or
    arguments are malformed (the function answers its error)."""
    k = parse_key(keys[0]) if keys else None
    if k is None or k.kind != "dedup" or k.arg is not None or len(argv) < 3:
        return False
    return k.base, _s(argv[0]), _s(argv[2])


def _entry_job(dedup: tuple, rec) -> str | None:
    """The uid of the job dedup entry `rec` ("<jobId>:<timestamp>") names, when the mode
    looks at that job (simple, debounce); else None."""
    if not isinstance(rec, str) or dedup[2] not in ("simple", "debounce"):
        return None
    jid = rec.rpartition(":")[0]
    return f"{dedup[0]}:{jid}" if jid else None


def next_id(sess, base: str, custom: str) -> str | None:
    """functions_jobs._next_id in shared mode: the custom id (None when a row or this node
    has it) or the next id fetched for `base`. Raises functions_jobs.Refused when no id was
    fetched for `base` (a call `_plan` could not read: never a node's own counter)."""
    p = sess.prepared
    if custom:
        uid = f"{base}:{custom}"
        if uid in p.taken or sess.port.find(uid) is not None:
            return None
        return custom
    q = p.ids.get(base)
    if not q:
        from .functions_jobs import Refused
        raise Refused("ERR jobgate: malformed call (its job ids could not be read from its "
                      "keys and arguments)")
    return q.popleft()


def _pause(sess, name: bytes, fn, keys: list, argv: list):
    """glidemq_pause / resume: this node's function (meta, event, local pause), then the
    pause across nodes; the reply once it is stored."""
    from .functions_jobs import _queue_key, Refused
    from .state import PAUSE_FOREVER_MS
    from .session import WAIT
    reply = fn(sess, keys, argv)
    if reply.__class__ is Error:
        return reply
    try:
        q = _queue_key(keys[0], "meta").queue
    except Refused:
        return reply
    sess.preparing = True
    on = name == b"glidemq_pause"

    def done(res) -> None:
        if isinstance(res, Exception):   # this node's pause (or resume) is made: say so
            reply_ = Error(f"ERR jobgate: storage unavailable ({type(res).__name__}); the "
                           f"queue is {'paused' if on else 'resumed'} on this node only")
        else:
            reply_ = reply
        sess.wake(reply_)
    # the function paused this node's queue (counted once): the others only
    sess.port.pause_global(q, PAUSE_FOREVER_MS if on else 0, done, here=False)
    return WAIT


def visible_base(sess, base: str) -> bool:
    """keyview.visible for the queue of `base` (`<prefix>:{<queue>}`)."""
    return visible(sess, base[base.find(":{") + 2:-1])


__all__ = ["run_function", "next_id", "Prepared", "PREPARED", "visible_base"]


from .shared_adds import add_job  # noqa: E402  (it uses the helpers above)
