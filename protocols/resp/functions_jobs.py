"""The glidemq functions a producer calls, on the canonical engine (glide-mq-NOTES.md
"Producer-level functions"; docs/glide-mq.md): version, addJob, dedup, addFlow, pause, resume,
and the three a Queue calls in the background (tryLock, unlock, sweepSuspended).

This module has addJob and what creation shares; functions_dedup.py, functions_flow.py and
functions_queue.py the others. Each runs atomically: every check comes before the first change, so an error reply leaves
nothing behind (Redis's Lua can leave a job hash or a counter step behind an error; jobgate
does not — except that ERR:COST_EXCEEDS_CAPACITY uses up the id, as the reference does, so
later ids match).

Argument layouts (both work): the seed's v41 (addJob 17 arguments, +1 parentQueue) and v93's
(18 lifo, 19 parentQueue, 20 schedulerName, 21 skipEvents). Argument 18 is read as v93's lifo
when it is "", "0" or "1" and as v41's parentQueue otherwise. Missing trailing arguments count
as empty / 0; a non-numeric number counts as 0 (as Lua's tonumber); a missing timestamp is
kept as the text "nil" (golden H06/H07); a non-numeric timestamp with a delay is refused.

Times: the producer's `timestamp` (wall ms) is the created time glide-mq shows and the base of
the due time (timestamp + delay); the canonical delay is that due time minus the server's now.
"""
from __future__ import annotations

import json

from .encode import Error
from .glide import DEFAULT_LOCK_MS, DIALECT, parse_key, rank, uid_of
from .shared import next_id as shared_next_id
from .state import LIBRARY_VERSION

IMPLEMENTED: dict = {}


def _fn(name: str):
    def reg(f):
        IMPLEMENTED[b"glidemq_" + name.encode()] = f
        return f
    return reg


def _s(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def _num(b) -> int:
    """Lua's `tonumber(x) or 0`, as an int (decimal, optionally signed; floats truncate);
    `b` is bytes or str."""
    try:
        return int(b)
    except ValueError:
        try:
            f = float(b)
        except ValueError:
            return 0
        return int(f) if f == f and abs(f) != float("inf") else 0


class Refused(Exception):
    """An argument error answered with `msg` before anything changed."""


_KEYS: dict = {}


def _queue_key(raw: bytes, suffix: str):
    """The Key of `<prefix>:{Q}:<suffix>`; Refused otherwise (the last 1024 parsed keys are
    cached: producers repeat the same few)."""
    k = _KEYS.get(raw)
    if k is not None and k.kind == suffix:
        return k
    k = parse_key(raw)
    if k is not None and k.kind == suffix and k.arg is None:
        if len(_KEYS) >= 1024:
            _KEYS.clear()
        _KEYS[raw] = k
        return k
    if k is None or k.kind != suffix or k.arg is not None:
        raise Refused(f"ERR unexpected key format: {_s(raw)}")
    return k


def _opts(text: str) -> dict:
    if text == "{}" or not text:
        return {}
    try:
        o = json.loads(text)
    except ValueError:
        return {}
    return o if isinstance(o, dict) else {}


_EMPTY = b""


class JobArgs:
    """addJob's 17–21 arguments (bytes), parsed (see the module docstring). `data` stays
    bytes (the payload, byte for byte); texts are str; numbers int; `ts_int` is the
    timestamp as an int, or None when it is not one (or missing)."""

    __slots__ = ("name", "data", "opts", "ts", "delay", "priority", "parent_id",
                 "max_attempts", "ordering_key", "group_conc", "tb_capacity", "cost", "ttl",
                 "custom_id", "lifo", "parent_queue", "scheduler", "skip_events", "raw_delay",
                 "ts_int")

    def __init__(self, a: list) -> None:
        # the hot path of every addJob: fields decoded inline, the common "0" and "" numbers
        # and texts without a parse (each the same value as `_num` / `_s` give)
        n = len(a)
        if n < 21:
            a = list(a) + [_EMPTY] * (21 - n)
        self.name = a[0].decode("utf-8", "surrogateescape")
        self.data = a[1]
        self.opts = a[2].decode("utf-8", "surrogateescape")
        if n > 3:
            ts = self.ts = a[3].decode("utf-8", "surrogateescape")
            try:
                self.ts_int = int(ts)
            except ValueError:
                self.ts_int = None
        else:
            self.ts = "nil"
            self.ts_int = None
        x = self.raw_delay = a[4]
        self.delay = 0 if x == b"0" or not x else max(0, _num(x))
        x = a[5]
        self.priority = 0 if x == b"0" or not x else max(0, _num(x))
        x = a[6]
        self.parent_id = x.decode("utf-8", "surrogateescape") if x else ""
        x = a[7]
        self.max_attempts = 0 if x == b"0" or not x else max(0, _num(x))
        x = a[8]
        self.ordering_key = x.decode("utf-8", "surrogateescape") if x else ""
        x = a[9]
        self.group_conc = 0 if x == b"0" or not x else _num(x)
        x = a[12]
        self.tb_capacity = 0 if x == b"0" or not x else _num(x)
        x = a[14]
        self.cost = 0 if x == b"0" or not x else _num(x)
        x = a[15]
        self.ttl = 0 if x == b"0" or not x else max(0, _num(x))
        x = a[16]
        self.custom_id = x.decode("utf-8", "surrogateescape") if x else ""
        x = a[17]
        if x == b"" or x == b"0" or x == b"1":
            self.lifo = x == b"1"
            x = a[18]
            self.parent_queue = x.decode("utf-8", "surrogateescape") if x else ""
        else:                          # v41: argument 18 is parentQueue
            self.lifo = False
            self.parent_queue = _s(x)
        x = a[19]
        self.scheduler = x.decode("utf-8", "surrogateescape") if x else ""
        self.skip_events = a[20] == b"1"


def _ts_int(args: JobArgs, now: int) -> int:
    t = args.ts_int
    if t is not None:
        return t
    if args.delay > 0:
        raise Refused("ERR glidemq_addJob: timestamp must be an integer (ms) with a delay")
    return now


def _create(sess, prefix: str, queue: str, args: JobArgs, gid: str, flow_deps=None,
            parent_member: str | None = None, event: bool = True, base: str | None = None) -> int:
    """Create glide job `gid` of `queue` from `args` (already validated). `flow_deps`: the
    deps members a flow parent waits for (its canonical dependencies); `base`: the queue's
    `<prefix>:{<queue>}` when the caller has it; returns the canonical id."""
    st = sess.state
    port = sess.port
    now = port.clock.wall_ms()
    ts = _ts_int(args, now)
    if base is None:
        base = f"{prefix}:{{{queue}}}"
    g = {"id": gid, "ts": args.ts}   # defaults left out (glide.py): smaller rows
    if prefix != "glide":
        g["pfx"] = prefix
    o = args.opts
    if o != "{}":
        g["opts"] = o
        opts = _opts(o)
    else:
        opts = None
    if args.delay:
        g["delay"] = str(args.delay)
    if args.priority:
        g["priority"] = str(args.priority)
    if args.max_attempts:
        g["maxAttempts"] = str(args.max_attempts)
    if args.ordering_key or args.cost > 0 or args.ttl > 0 or args.parent_id \
            or args.scheduler or args.lifo:
        g["x"] = _optional_fields(st, base, args, ts)
    due = None
    delay_ms = 0
    if args.delay > 0:
        due = ts + args.delay
        g["due"] = due
        delay_ms = max(1, due - now)
    ext = {"name": args.name, "glide": g}
    lifo = args.lifo
    ttr = DEFAULT_LOCK_MS
    attempts = args.max_attempts
    if opts:   # options that live only in the JSON (absent from the common "{}")
        lifo = lifo or opts.get("lifo") is True
        ttr, attempts = _json_options(opts, g, ext, attempts)
    if lifo and args.priority == 0:
        ext["lifo"] = True
    if flow_deps:
        g["deps"] = list(flow_deps)
        unmet = [d for d in flow_deps if not port.dependency_met(d)]
        if unmet:
            ext["deps"] = unmet
    uid = base + ":" + gid   # glide.uid_of
    ttl = args.ttl
    id = port.put(queue, args.data, rank(args.priority, lifo), delay_ms, ttr, DIALECT, uid,
                  ttl, max(1, ts + ttl - now) if ttl else 0, 0,
                  attempts if attempts > 1 else 0, 0, "add", ext)
    if parent_member is not None:
        _register_child(sess, parent_member, uid)
    if event and not args.skip_events:
        st.add_event(base, ("event", "added", "jobId", gid, "name", args.name))
    return id


def _optional_fields(st, base: str, args: JobArgs, ts: int) -> list:
    """The optional job hash fields addJob writes, in its order: groupKey and orderingSeq (an
    ordering key; its group hash is created), cost, expireAt, parentId, parentQueue,
    schedulerName, lifo."""
    x = []
    if args.ordering_key:
        seq = int(st.ordering(base).get(args.ordering_key, "0")) + 1
        st.set_ordering(base, args.ordering_key, str(seq))
        if st.group(base, args.ordering_key) is None:
            st.set_group(base, args.ordering_key,
                         {"maxConcurrency": str(max(1, args.group_conc)), "nextSeq": "1"})
        x += [["groupKey", args.ordering_key], ["orderingSeq", str(seq)]]
    if args.cost > 0:
        x.append(["cost", str(args.cost)])
    if args.ttl > 0:
        x.append(["expireAt", str(ts + args.ttl)])
    if args.parent_id:
        x.append(["parentId", args.parent_id])
        if args.parent_queue:
            x.append(["parentQueue", args.parent_queue])
    if args.scheduler:
        x.append(["schedulerName", args.scheduler])
    if args.lifo:
        x.append(["lifo", "1"])
    return x


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _json_options(opts: dict, g: dict, ext: dict, attempts: int) -> tuple:
    """Read the options that live only in `opts` into the job's glide extras `g` (backoff,
    removeOnComplete / removeOnFail) and extras `ext` (timeout); returns (TTR ms from
    lockDuration or the default, attempts: the larger of `attempts` and opts.attempts)."""
    b = opts.get("backoff")
    if _is_int(b) or isinstance(b, float):
        b = {"type": "fixed", "delay": int(b)}
    if isinstance(b, dict):
        g["backoff"] = {"type": str(b.get("type", "fixed")), "delay": b.get("delay", 0)}
    if "removeOnComplete" in opts:
        g["roc"] = opts["removeOnComplete"]
    if "removeOnFail" in opts:
        g["rof"] = opts["removeOnFail"]
    timeout = opts.get("timeout")
    if _is_int(timeout) and timeout > 0:
        ext["timeout"] = timeout
    lock = opts.get("lockDuration")
    ttr = lock if _is_int(lock) and lock > 0 else DEFAULT_LOCK_MS
    a = opts.get("attempts")
    if _is_int(a) and a > attempts:
        attempts = a
    return ttr, attempts


def _register_child(sess, parent_deps_key: str, child_uid: str) -> None:
    """SADD the child's member to its parent's deps set (the optional fifth key of addJob):
    the parent's deps list grows; the parent is not made to wait (as the reference)."""
    k = parse_key(parent_deps_key.encode())
    if k is None or k.kind != "deps" or not k.arg:
        return
    port = sess.port
    pid = port.find(uid_of(k.prefix, k.queue, k.arg))
    if pid is None:
        return
    v = port.job(pid)
    g = dict((v.ext or {}).get("glide") or {})
    if not g:
        return
    deps = list(g.get("deps") or ())
    if child_uid not in deps:
        deps.append(child_uid)
    g["deps"] = deps
    port.update_extras(pid, {"glide": g})


def _next_id(sess, base: str, custom: str) -> str | None:
    """The id a new job takes (custom, or the counter's next), moving the counter as glide-mq
    does (a numeric custom id above it moves it up); None when the custom id is taken."""
    if sess.prepared is not None:
        return shared_next_id(sess, base, custom)
    st = sess.state
    n = st.counter(base)
    if custom:
        if sess.port.find(f"{base}:{custom}") is not None:
            return None
        if custom.isdigit() and int(custom) > n:
            st.set_counter(base, int(custom))
        return custom
    n += 1   # free: a numeric custom id above the counter moved it up (str(int) ids)
    st.set_counter(base, n)
    return str(n)


def custom_taken(sess, uid: str) -> bool:
    """True when custom id `uid` (canonical) is taken: by a job here or, in shared mode, by a
    row of the database (protocols/resp/shared.py)."""
    if sess.port.find(uid) is not None:
        return True
    p = sess.prepared
    return p is not None and uid in p.taken


def _add(sess, keys: list, argv: list, fname: str):
    if len(keys) < 4:
        raise Refused(f"ERR {fname} needs the keys id, stream, scheduled and events "
                      f"(got {len(keys)})")
    k = _queue_key(keys[0], "id")
    args = JobArgs(argv)
    _ts_int(args, 0)   # refuses a bad timestamp before anything changes
    base = k.base
    if args.tb_capacity > 0 and args.cost > args.tb_capacity:
        if not args.custom_id:   # the counter moves, as the reference's
            if sess.prepared is not None:
                shared_next_id(sess, base, "")   # shared mode: taken in the database
            else:
                sess.state.set_counter(base, sess.state.counter(base) + 1)
                sess.need_commit = True
        return None, "ERR:COST_EXCEEDS_CAPACITY"
    gid = _next_id(sess, base, args.custom_id)
    if gid is None:
        return None, "duplicate"
    parent = _s(keys[4]) if len(keys) > 4 else None
    _create(sess, k.prefix, k.queue, args, gid, parent_member=parent, base=base)
    sess.need_commit = True
    return gid, gid


@_fn("version")
def version(sess, keys, argv):
    """glidemq_version: bulk "93" (golden B09, B10)."""
    return LIBRARY_VERSION


@_fn("addJob")
def add_job(sess, keys, argv):
    """glidemq_addJob: the new id, "duplicate" (custom id taken) or
    "ERR:COST_EXCEEDS_CAPACITY" (bulk strings; golden C01–C22)."""
    try:
        return _add(sess, keys, argv, "glidemq_addJob")[1]
    except Refused as e:
        return Error(str(e))


from . import functions_dedup, functions_flow, functions_queue  # noqa: E402,F401  (register)
