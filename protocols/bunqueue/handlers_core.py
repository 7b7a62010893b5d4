"""PUSH, PUSHB (big ones in slices: bulk.py), PULL and PULLB (ACK, FAIL and lock upkeep: handlers_outcome.py) (bunqueue-tcp-protocol.txt "Core
Commands", "JobHeartbeat"; reference behaviour: bunqueue-golden.json and docs/bunqueue.md).

Every acknowledged PUSH is committed before its reply (durability: commit; the
reference acknowledges PUSH before its write buffer reaches disk, we do not).
"""
from __future__ import annotations

from core.api import TIMED_OUT, TOKEN_IGNORED, TOKEN_REQUIRED, WAITING

from .codec import pack
from .info import DEFAULT_LOCK_TTL_MS
from .jobview import DEFAULT_MAX_ATTEMPTS, job_body, new_id
from .bulk import encode_steps, push_batch_steps, release_steps, too_large
from .options import (build_ext, data_error, encode_data, number_error, options_error,
                      queue_error, queue_name, take_name)
from .handlers_flow import link_new_child, link_queue, parent_link_error, with_parent
from .registry import PENDING, Spliced, bulk_command, command, err


def _now(sess) -> int:
    return sess.port.clock.wall_ms()


def _pushed(sess, queue: str, n: int) -> None:
    info = sess.info
    info.total_pushed += n
    info.telemetry.event(queue, n)


# ------------------------------------------------------------------- push
#: Option keys that need no check and no lookup (the real client's plain `add`).
_PLAIN = frozenset(("data", "name", "removeOnComplete", "removeOnFail", "cmd", "queue",
                    "reqId", "durable"))


def _push_one(sess, queue: str, opts: dict, prefix: str = "", encoded=None):
    """Validate and create one job; returns its id str, or an error reply dict. `encoded`:
    (payload, fmt, has_bigint) of its data when already encoded (bulk.encode_steps)."""
    e = sess.port
    data = opts.get("data")
    if opts.keys() <= _PLAIN:   # fast path: nothing to validate but the data, no lookups
        if encoded is not None:
            payload, fmt, big = encoded
            if big:
                return err(prefix + "Job data must be JSON serializable")
        elif data.__class__ is str:
            payload, fmt = data.encode("utf-8"), 0
        else:
            if data_error(data):
                return err(prefix + "Job data must be JSON serializable")
            payload, fmt = pack(data), 1
        if too_large(payload):
            return err(prefix + "Job data too large (max 10MB)")
        uid = new_id(e.clock.wall_ms())
        name = opts.get("name")
        ext = None
        if (name is not None and name != "default") or len(opts) > 2:
            ext = build_ext(opts, None, ())
        e.put(queue, payload, 0, 0, DEFAULT_LOCK_TTL_MS, "bunqueue", uid,
              max_fails=DEFAULT_MAX_ATTEMPTS, event="push", ext=ext, fmt=fmt)
        _pushed(sess, queue, 1)
        return uid
    if encoded is None:
        msg = data_error(data) or options_error(opts)
    else:
        msg = "Job data must be JSON serializable" if encoded[2] else options_error(opts)
    if msg:
        return err(prefix + msg)
    custom = opts.get("jobId")
    if custom is None:
        custom = opts.get("customId")
    if opts.get("parentId") is not None:   # Queue.add with a parent (handlers_flow.py)
        msg = parent_link_error(sess, opts, custom)
        if msg:
            return err(prefix + msg)
    if custom is not None:
        custom = str(custom)
        if e.find(custom) is not None or custom in sess.taken_elsewhere:
            return custom   # idempotent: the existing job's id (here or, shared, anywhere)
    key = opts.get("uniqueKey")
    if key is not None:
        held = e.dedup(queue, key)
        if held is None and sess.keys_elsewhere:   # held on another node (push_checks.py)
            held = sess.keys_elsewhere.get((queue, key))
        if held is not None:
            return held
    unmet = []
    for d in opts.get("dependsOn") or ():
        d = str(d)
        if e.find(d) is None:
            if d in sess.linked_elsewhere:   # shared mode: another node holds it, unfinished
                unmet.append(d)
                continue
            return err(prefix + f"Dependency job not found: {d}")
        if not e.dependency_met(d):
            unmet.append(d)
    payload, fmt = encode_data(data) if encoded is None else encoded[:2]
    if too_large(payload):
        return err(prefix + "Job data too large (max 10MB)")
    uid = custom if custom is not None else new_id(e.clock.wall_ms())
    pri = opts.get("priority")
    delay = opts.get("delay")
    ttl = opts.get("ttl")
    ma = opts.get("maxAttempts")
    timeout = opts.get("timeout")
    ext = build_ext(opts, custom, unmet)
    if opts.get("parentId") is not None:
        ext = with_parent(ext, opts)
        if e.shared and link_queue(opts) is not None:
            ext["waiters"] = [str(opts["parentId"])]   # its completion anywhere tells the parent
    e.put(queue, payload, -int(pri) if pri else 0, int(delay) if delay else 0,
          int(timeout) if timeout else DEFAULT_LOCK_TTL_MS, "bunqueue", uid,
          ttl_ms=int(ttl) if ttl else 0, expire_ms=int(ttl) if ttl else 0,
          max_fails=int(ma) if ma else DEFAULT_MAX_ATTEMPTS, event="push",
          ext=ext, fmt=fmt)
    if opts.get("parentId") is not None:
        link_new_child(sess, uid, opts)
    if unmet and e.shared:   # each dependency learns the new job waits for it (any node)
        e.wait_for(uid, unmet, sess.linked_elsewhere)
    _pushed(sess, queue, 1)
    return uid


def _name_error(cmd: dict) -> str | None:
    """take_name for a PUSH; its error is answered after the data and option checks, as the
    reference normalises the name last (handlers/core.js handlePush)."""
    msg = take_name(cmd)
    if msg:
        return data_error(cmd.get("data")) or options_error(cmd) or msg
    return None


@command("PUSH", mutating=True)
def push(sess, cmd: dict):
    q = cmd.get("queue")
    msg = queue_error(q) or _name_error(cmd)
    if msg:
        return err(msg)
    r = _push_one(sess, queue_name(q), cmd)
    if r.__class__ is dict:
        return r
    return {"ok": True, "id": r}


@bulk_command("PUSH")
def push_steps(sess, cmd: dict):
    """PUSH of a frame over bulk.BIG_FRAME: its data is checked and encoded in slices."""
    q = cmd.get("queue")
    msg = queue_error(q) or _name_error(cmd)
    if msg:
        return err(msg)
    enc = yield from encode_steps(cmd.get("data"), True)
    r = _push_one(sess, queue_name(q), cmd, encoded=enc)
    yield from release_steps(cmd.pop("data", None))
    if r.__class__ is dict:
        return r
    return {"ok": True, "id": r}


@command("PUSHB", mutating=True)
def push_batch(sess, cmd: dict):
    """PUSHB, as steps (bulk.push_batch_steps): a batch of more than bulk.BATCH_SLICE jobs is
    created in slices."""
    if not sess.bulk:
        return push_batch_steps(sess, cmd, _push_one, _create_plain, _PLAIN, False)
    return _push_batch_big(sess, cmd)


def _push_batch_big(sess, cmd: dict):
    r = yield from push_batch_steps(sess, cmd, _push_one, _create_plain, _PLAIN, True)
    jobs = cmd.get("jobs")
    if jobs.__class__ is list:   # free the jobs' data in slices too
        for o in jobs:
            if o.__class__ is dict:
                yield from release_steps(o.pop("data", None))
    return r


def _create_plain(sess, queue: str, items: list) -> list:
    """Create jobs with no options but name / removeOn* / durable (the client's add and
    addBulk) from (payload, fmt, opts) items in one engine pass; their ids."""
    now = _now(sess)
    ids = []
    rows = []
    for payload, fmt, o in items:
        name = o.get("name")
        ext = build_ext(o, None, ()) if (name is not None and name != "default") \
            or len(o) > 2 else None
        uid = new_id(now)
        ids.append(uid)
        rows.append((payload, fmt, uid, ext))
    sess.port.put_many(queue, rows, DEFAULT_LOCK_TTL_MS, "bunqueue", DEFAULT_MAX_ATTEMPTS,
                       "push")
    _pushed(sess, queue, len(rows))
    return ids


# ------------------------------------------------------------------- pull
def _pull_args(cmd: dict, batch: bool):
    q = cmd.get("queue")
    msg = queue_error(q)
    if msg:
        return msg, None
    if batch:
        msg = number_error(cmd.get("count"), "count", 1, 1000)
        if msg:
            return msg, None
    msg = number_error(cmd.get("timeout"), "timeout", 0, 60000)
    if msg:
        return msg, None
    ttl = cmd.get("lockTtl")
    ttl = int(ttl) if ttl.__class__ in (int, float) and ttl > 0 else DEFAULT_LOCK_TTL_MS
    return None, (queue_name(q), ttl)


def _started(sess, r, now: int) -> bytes:
    """Mark a just-reserved job (a core.api.Reserved) active; returns its packed Job object."""
    e = sess.port
    e.update_extras(r.id, {"startedAt": now, "lastHeartbeat": now}, persist=False)
    info = sess.info
    info.total_pulled += 1
    info.telemetry.event(r.queue)
    return job_body(e.job(r.id))


def _pull_reply(sess, jobs: list, locked: bool, batch: bool):
    now = _now(sess)
    bodies = [_started(sess, r, now) for r in jobs]
    if batch:
        raw = [("jobs", _array(bodies))]
        if locked:
            raw.append(("tokens", pack([r.token() for r in jobs])))
        return Spliced({"ok": True}, raw)
    if not jobs:
        return {"ok": True, "job": None, "token": None} if locked else {"ok": True, "job": None}
    raw = [("job", bodies[0])]
    if locked:
        raw.append(("token", pack(jobs[0].token())))
    return Spliced({"ok": True}, raw)


def _array(bodies: list) -> bytes:
    n = len(bodies)
    head = bytes((0x90 | n,)) if n < 16 else b"\xdc" + n.to_bytes(2, "big")
    return head + b"".join(bodies)


def _pull(sess, cmd: dict, batch: bool):
    msg, args = _pull_args(cmd, batch)
    if msg:
        return err(msg)
    queue, ttl = args
    locked = bool(cmd.get("owner"))
    mode = TOKEN_REQUIRED if locked else TOKEN_IGNORED   # no owner: no lock (reference)
    count = int(cmd.get("count") or 1) if batch else 1
    timeout = cmd.get("timeout")
    e = sess.port
    name = cmd.get("owner")
    worker = str(name) if name else sess.name
    jobs = e.reserve_many(sess.owner, queue, count, mode, ttl, worker)
    if jobs or not (timeout or e.shared):   # shared mode: ready jobs are in the database,
        return _pull_reply(sess, jobs, locked, batch)   # a claim round answers (core/shared.py)
    rid = sess.rid
    w_owner = sess.wait_owner(ttl, worker)

    def cancel():
        e.cancel_wait(w_owner)

    def done(result):
        sess.waits.discard(cancel)
        if sess.closed:
            return
        got = [] if result is TIMED_OUT else [result]
        if got and batch and count > 1:
            got += e.reserve_many(w_owner, queue, count - 1, mode)
        sess.later(rid, _pull_reply(sess, got, locked, batch))

    w = e.reserve(w_owner, [queue], int(timeout or 0), done, mode, batch=count)
    if w is not WAITING:
        return _pull_reply(sess, [] if w is TIMED_OUT else [w], locked, batch)
    sess.waits.add(cancel)
    return PENDING


@command("PULL")
def pull(sess, cmd: dict):
    return _pull(sess, cmd, False)


@command("PULLB")
def pull_batch(sess, cmd: dict):
    return _pull(sess, cmd, True)
