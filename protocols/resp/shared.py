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
  handed out again: ids can skip a number, which one Redis never does.
- **Custom job ids** are checked against the database too (Port.uids_taken_global): a
  custom id any node stored answers `"duplicate"`. Two nodes given one new custom id at the
  same moment can both create it (as bunqueue's custom ids across nodes).
- **Deduplication** (`glidemq_dedup`): the dedup entry is read as the database holds it (the
  last one any node stored: Port.dialect_record_global), and the job it names, when no node
  holds it, is brought here (Port.reach_jobs) so that a debounce can replace it; a job
  another node holds is active (simple and debounce skip). Two nodes given one new dedup id
  at the same moment can both add.
- **Pause and resume** pause the queue on every node (Port.pause_global) before the reply.
- **Key reads** (HGET, HGETALL, EXISTS, ... of `job:<id>`, `log:<id>`, `deps:<id>`; XLEN,
  ZCARD, ZRANGE, ... of `stream`, `scheduled`, `completed`, `failed`, `lifo`) read the
  database's rows of the jobs and queues they name beside this node's jobs: a job spilled
  to the database, or held by another node, reads as it was last committed. A queue-level
  read reads at most QUEUE_ROWS_MAX rows of the queue. `GET <base>:id` reads the shared
  counter.
- **Not across nodes** (each node's own): the `:events` stream, ordering keys' sequences,
  the `meta` and `dedup` hashes as keys read them, tryLock locks, and SCAN / KEYS / DBSIZE
  (which list the `id` key as this node knows it).

A failed database read or counter answers `ERR jobgate: storage unavailable (...)` and
changes nothing.
"""
from __future__ import annotations

from collections import deque

from core.api import AccessDenied

from .encode import Error
from .glide import parse_key, uid_of

#: at most this many rows of a queue a queue-level key read takes from the database
QUEUE_ROWS_MAX = 100_000
#: key kinds named with a job id, read by the job's uid
JOB_KINDS = frozenset(("job", "log", "deps"))
#: queue-level key kinds computed from the queue's jobs
QUEUE_KINDS = frozenset(("stream", "scheduled", "completed", "failed", "lifo"))
#: a numeric custom id of at most this many digits moves the shared counter up (a longer
#: one is created but leaves the counter: the counter is a PostgreSQL bigint)
FLOOR_DIGITS = 18
#: at most this many addJobs parsed behind the running one take their ids with it
AHEAD_MAX = 1000
#: ms a custom id found free stays trusted for the addJob parsed behind (then asked again)
CHECKED_MS = 1000
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
def _id_key(raw: bytes):
    k = parse_key(raw)
    return k if k is not None and k.kind == "id" and k.arg is None else None


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
    from .functions_jobs import _num
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
        return _add_job(sess, fn, keys, argv, plan[0])
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
    customs = []
    for base, custom in plan:
        w = wants.get(base)
        if w is None:
            w = wants[base] = [0, st.counter(base)]   # a single server's counter: the floor
        if custom:
            customs.append(f"{base}:{custom}")
            if custom.isdigit() and len(custom) <= FLOOR_DIGITS:
                w[1] = max(w[1], int(custom))
        else:
            w[0] += 1
    bases = list(wants)
    for base in bases + ([dedup[0]] if dedup else []):
        if not visible_base(sess, base):
            return Error(NOPERM)

    def run(prep: Prepared) -> None:
        sess.prepared = prep
        try:
            reply = _call(sess, fn, keys, argv)
        finally:
            sess.prepared = None
        sess.wake(reply)

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
        if uid is None or port.find(uid) is not None:
            run(prep)
            return

        def reached(where) -> None:   # last: nothing may commit between it and the run
            if isinstance(where, Exception):
                sess.wake(_unavailable(where))
                return
            prep.held = frozenset(where)
            run(prep)
        port.reach_jobs([uid], reached)

    from .session import WAIT
    n = 1 + len(bases) + (dedup is not None)
    g = _Gather(n, then, lambda e: sess.wake(_unavailable(e)))
    sess.preparing = True
    port.uids_taken_global(customs, g.slot(0))
    for i, base in enumerate(bases):
        w, floor = wants[base]
        port.count_up_global(f"glidemq:id:{base}", w, floor, g.slot(i + 1))
    if dedup is not None:
        port.dialect_record_global(f"glidemq:dedup:{dedup[0]}:{dedup[1]}", g.slot(n - 1))
    return WAIT


def _add_job(sess, fn, keys: list, argv: list, first: tuple):
    """glidemq_addJob in shared mode, `first` its (base, custom id): at once when this
    connection holds an id for it (taken with an earlier call's) or checked its custom id;
    else the ids of it and of the addJobs parsed behind it (at most AHEAD_MAX) are taken in
    one batch and their custom ids checked together, so a pipeline of n addJobs waits for
    the database once, not n times."""
    base, custom = first
    if not visible_base(sess, base):
        return Error(NOPERM)
    uid = f"{base}:{custom}" if custom else None
    if (sess.id_stock.get(base) if uid is None else
            sess.checked.get(uid, 0) > sess.clock.monotonic_ms()):
        return _run_stocked(sess, fn, keys, argv, uid)
    st = sess.state
    wants: dict = {}          # base -> [auto ids, floor]
    customs: list = []

    def want(b: str, c: str) -> None:
        w = wants.get(b)
        if w is None:
            w = wants[b] = [0, st.counter(b)]   # a single server's counter: the floor
        if c:
            customs.append(f"{b}:{c}")
            if c.isdigit() and len(c) <= FLOOR_DIGITS:
                w[1] = max(w[1], int(c))
        else:
            w[0] += 1
    want(base, custom)
    ahead = sess.ahead() if sess.ahead is not None else ()
    for i, item in enumerate(ahead):
        if i >= AHEAD_MAX:
            break
        if item.__class__ is not list or len(item) < 3 or item[0] != b"FCALL" \
                or item[1] != b"glidemq_addJob":
            continue
        parsed = _split(item[2:])
        if parsed is None:
            continue
        p = _plan(b"glidemq_addJob", *parsed)
        if p is not None and visible_base(sess, p[0][0]):
            want(*p[0])
    bases = list(wants)

    def then(res) -> None:
        sess.taken_stock |= res[0]
        until = sess.clock.monotonic_ms() + CHECKED_MS
        sess.checked.update((u, until) for u in customs if u not in res[0])
        for b, last in zip(bases, res[1:]):
            n = wants[b][0]
            q = sess.id_stock.get(b)
            if q is None:
                q = sess.id_stock[b] = deque()
            q.extend(str(i) for i in range(last - n + 1, last + 1))
        sess.wake(_run_stocked(sess, fn, keys, argv, uid))

    from .session import WAIT
    g = _Gather(1 + len(bases), then, lambda e: sess.wake(_unavailable(e)))
    sess.preparing = True
    sess.port.uids_taken_global(customs, g.slot(0))
    for i, b in enumerate(bases):
        n, floor = wants[b]
        sess.port.count_up_global(f"glidemq:id:{b}", n, floor, g.slot(i + 1))
    return WAIT


def _split(args: list):
    """FCALL's `numkeys keys... args...` -> (keys, argv), or None when malformed."""
    try:
        n = int(args[0])
    except ValueError:
        return None
    if n < 0 or n > len(args) - 1:
        return None
    return args[1:1 + n], args[1 + n:]


def _run_stocked(sess, fn, keys: list, argv: list, uid: str | None):
    """Run addJob with this connection's stock of ids and checked custom ids; its reply."""
    sess.prepared = Prepared(sess.id_stock, sess.taken_stock)
    try:
        return _call(sess, fn, keys, argv)
    finally:
        sess.prepared = None
        if uid is not None:
            sess.checked.pop(uid, None)
            sess.taken_stock.discard(uid)
        if sess.checked and not (sess.ahead() if sess.ahead is not None else ()):
            # the pipeline is over: a custom id checked for a command that did not come
            # (or failed before its id) is asked again next time, never trusted later
            sess.checked.clear()
            sess.taken_stock.clear()


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


# ------------------------------------------------------------------ key reads
def prefetch(sess, cmd, args: list):
    """Before read command `cmd` (its arguments `args`) on a node in shared mode: None when
    it names no job or queue key (it runs at once), else WAIT and the command runs once the
    rows are read, its reply through `sess.wake`."""
    uids = []
    queues = []
    counters = []
    port = sess.port
    for a in args:
        if a.__class__ is not bytes or b":{" not in a:
            continue
        k = parse_key(a)
        if k is None:
            continue
        if not visible_base(sess, k.base):
            continue   # reads as missing, as on one server (keyview.visible)
        if k.kind in JOB_KINDS and k.arg:
            uid = uid_of(k.prefix, k.queue, k.arg)
            if port.find(uid) is None and uid not in uids:
                uids.append(uid)
        elif k.kind in QUEUE_KINDS and k.arg is None and k.queue not in queues:
            queues.append(k.queue)
        elif k.kind == "id" and k.arg is None and k.base not in counters:
            counters.append(k.base)
    if not uids and not queues and not counters:
        return None
    from .session import WAIT

    def then(res) -> None:
        sess.remote = res[0] if uids else {}
        rest = res[1:] if uids else res
        sess.rows = dict(zip(queues, rest))
        sess.counters = dict(zip(counters, rest[len(queues):]))
        try:
            reply = _call(sess, cmd.fn, args)
        finally:
            sess.remote = sess.rows = sess.counters = None
        sess.wake(reply)
    g = _Gather(len(queues) + len(counters) + (1 if uids else 0), then,
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
    for base in counters:   # the shared counter's value: n = 0 takes none
        port.count_up_global(f"glidemq:id:{base}", 0, st.counter(base), g.slot(i))
        i += 1
    return WAIT


def visible_base(sess, base: str) -> bool:
    """True when the connection may see the queue of `base` (`<prefix>:{<queue>}`)."""
    p = getattr(sess.port, "principal", None)
    return p is None or p.allows(base[base.find(":{") + 2:-1])


__all__ = ["run_function", "next_id", "prefetch", "Prepared", "PREPARED", "QUEUE_ROWS_MAX"]
