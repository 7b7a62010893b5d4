"""Locks presented on another node (shared mode, issue 19; docs/scaling.md "Locks presented
on another node"): a bunqueue Worker sends its commands over a pool of connections (up to 8,
the client's `poolSize`), which a load balancer may spread over several nodes, so the `ACK`,
`FAIL`, heartbeat, lock extension or progress of a job pulled through node A can reach node B.
Node B does not hold the job: a job no node holds is brought from the database into B's
engine (Port.reach_jobs) and B runs the command itself; else B forwards the command to the
node that holds it (Port.forward_to, core/shared_calls.py), which runs it in a session of its own with the client's
principal and answers, once its changes are committed, with the reply B sends on. When no node
holds the job (or it does not answer in time) B answers as on a single server for a job it
does not have (`Job not found or not in processing state: <id>`, ...).

The same holds for the commands that change a job which is not active (Cancel, Update,
ChangePriority, Promote, MoveToDelayed, Discard, RetryCompleted, MoveToWait, ChangeDelay) and
for a job's log (AddLog, ClearLogs: a Worker's `job.log()` goes over any pooled connection):
a waiting, delayed, failed or completed job in the database is brought here and changed here;
one held by another node is changed there.

Batch forms (ACKB, JobHeartbeatB, ExtendLocks) are split by where their jobs are: the jobs
here (or brought here) run here, each other node gets its own entries, the replies are
combined (counts added up; ACKB ok when every part is, else the first error).

Custom ids across nodes: a PUSH or PUSHB naming a `jobId` (or `customId`) this node does not
have first asks the database (Port.uids_taken_global) which of them a row already has; those
are answered with the existing id, as a single server answers a custom id it has
(`taken_elsewhere`), the others are created. Dedup keys alike: a `uniqueKey` no unfinished job
of this node holds is looked up in the database (Port.dedup_global, `jobs.dedup_key`); a key an
unfinished job holds on any node answers that job's id (`keys_elsewhere`). Dependencies
outside a flow (a PUSH or PUSHB with `dependsOn` or `parentId`): the jobs named are brought
here first when no node holds them; one another node holds (of a queue the client may use)
counts as existing and unfinished (`linked_elsewhere`); the new job then tells each dependency
it waits for it (Port.wait_for).
"""
from __future__ import annotations

import msgpack

from core.api import AccessDenied

from .codec import _keep_ext, decode_command, pack
from .handlers_flow import link_queue
from .options import queue_name
from .registry import HANDLERS, MUTATING, STORAGE_UNAVAILABLE, err

#: commands that change a job -> the field naming it: run where the job is (reach_jobs)
FORWARDED = {"ACK": "id", "FAIL": "id", "JobHeartbeat": "id", "ExtendLock": "id",
             "Progress": "id", "ACKB": "ids", "JobHeartbeatB": "ids", "ExtendLocks": "ids",
             "Cancel": "id", "Update": "id", "ChangePriority": "id", "Promote": "id",
             "MoveToDelayed": "id", "Discard": "id", "RetryCompleted": "id",
             "MoveToWait": "id", "ChangeDelay": "id", "AddLog": "id", "ClearLogs": "id"}
#: the batch commands' fields that go with `ids`, entry for entry
_PARALLEL = {"ACKB": ("tokens", "results"), "JobHeartbeatB": ("tokens",),
             "ExtendLocks": ("tokens", "durations")}

#: the reqId a forwarded command runs with on the holding node (replaced by the client's)
_FORWARDED_RID = "forwarded"


def held_elsewhere(sess, name: str, cmd: dict) -> list:
    """The uids command `name` (in FORWARDED) names that this node does not hold (shared
    mode): [] when it runs here only."""
    port = sess.port
    if FORWARDED[name] == "id":
        id = cmd.get("id")
        return [id] if id.__class__ is str and port.find(id) is None else []
    ids = cmd.get("ids")
    if ids.__class__ is not list:
        return []
    return [id for id in ids if id.__class__ is str and port.find(id) is None]


def _here(sess, handler, name: str, cmd: dict, rid) -> None:
    """Answer `cmd` from this node: as a single server does for jobs it does not have."""
    sess.may_forward = False
    try:
        sess.answer_later(handler, name, cmd, rid)
    finally:
        sess.may_forward = True


def _reply_here(sess, handler, name: str, cmd: dict) -> dict:
    """`handler`'s reply dict to `cmd` (a part of a batch) run on this node only."""
    sess.may_forward = False
    try:
        r = sess.reply_of(handler, name, cmd)
    finally:
        sess.may_forward = True
    return r if r.__class__ is dict else {"ok": True}


def _unpacked(reply):
    """A forwarded reply (bytes) as a reply dict without reqId, or None."""
    if reply is None:
        return None
    try:
        r = msgpack.unpackb(reply, ext_hook=_keep_ext, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException):
        return None
    if r.__class__ is not dict:
        return None
    r.pop("reqId", None)
    return r


def _slice(cmd: dict, name: str, idx: list) -> dict | None:
    """`cmd` (a batch command) for the entries `idx` of its ids only (missing entries of the
    fields that go with `ids` stay missing); None when such a field is not a list, or ACKB's
    is not as long as `ids` (the whole command then runs here, for its error)."""
    ids = cmd["ids"]
    out = {k: v for k, v in cmd.items() if k != "reqId"}
    out["ids"] = [ids[i] for i in idx]
    for f in _PARALLEL[name]:
        v = cmd.get(f)
        if v is None:
            continue
        if v.__class__ is not list or (name == "ACKB" and len(v) != len(ids)):
            return None
        out[f] = [v[i] if i < len(v) else None for i in idx]
    return out


def _combined(name: str, replies: list) -> dict:
    """One reply from the parts' replies of a batch command split over nodes: counts added
    up (JobHeartbeatB, ExtendLocks); ACKB ok when every part is, else the first error (the
    parts that were ACKed stay ACKed: docs/scaling.md)."""
    for r in replies:
        if r.get("ok") is not True:
            return r
    if name == "ACKB":
        return replies[0]
    n = 0
    for r in replies:
        c = r.get("data", r).get("count") if name == "JobHeartbeatB" else r.get("count")
        n += c if c.__class__ is int else 0
    if name == "JobHeartbeatB":
        return {"ok": True, "data": {"ok": True, "count": n}}
    return {"ok": True, "count": n}


def forward(sess, name: str, cmd: dict, handler, rid, uids: list) -> None:
    """Run `cmd` on the nodes holding the jobs `uids` names (a batch: each node its own
    entries, this node the rest); the reply answers `rid` here later. What no node holds is
    answered here (`handler`), as a single server answers for jobs it does not have."""
    port = sess.port

    def located(where) -> None:
        if not where:
            _here(sess, handler, name, cmd, rid)
            return
        if FORWARDED[name] == "id":
            body = pack({k: v for k, v in cmd.items() if k != "reqId"})

            def done(reply) -> None:
                r = _unpacked(reply)
                if sess.closed:
                    return
                if r is None:
                    _here(sess, handler, name, cmd, rid)
                else:
                    sess.later(rid, r)
            port.forward_to(where[uids[0]], "bunqueue", body, done)
            return
        _split(sess, name, cmd, handler, rid, where)
    port.reach_jobs(uids, _from_db(sess, rid, located))


def _from_db(sess, rid, then):
    """A callback for a database answer about command `rid`: nothing when the session has
    closed meanwhile, `Storage unavailable` for an Exception, else `then(answer)`."""
    def got(answer) -> None:
        if sess.closed:
            return
        if isinstance(answer, Exception):
            sess.later(rid, err(STORAGE_UNAVAILABLE))
            return
        then(answer)
    return got


def _split(sess, name: str, cmd: dict, handler, rid, where: dict) -> None:
    """A batch command whose jobs are on several nodes: one part per node (see forward)."""
    groups: dict = {}
    here = []
    for i, id in enumerate(cmd["ids"]):
        n = where.get(id) if id.__class__ is str else None
        if n is None:
            here.append(i)
        else:
            groups.setdefault(n, []).append(i)
    parts = {n: _slice(cmd, name, idx) for n, idx in groups.items()}
    local = _slice(cmd, name, here) if here else None
    if any(p is None for p in parts.values()) or (here and local is None):
        _here(sess, handler, name, cmd, rid)   # a malformed batch: its field error
        return
    replies: list = []
    waiting = [len(parts)]

    def finish() -> None:
        if local is not None:
            replies.insert(0, _reply_here(sess, handler, name, local))
        if not sess.closed:
            sess.later(rid, _combined(name, replies), name == "ACKB")

    def part_done(sub: dict):
        def done(reply) -> None:
            r = _unpacked(reply)
            if r is None:   # no answer from its node: answered here (not found there)
                r = _reply_here(sess, handler, name, sub)
            replies.append(r)
            waiting[0] -= 1
            if waiting[0] == 0:
                finish()
        return done
    for n, sub in parts.items():
        sess.port.forward_to(n, "bunqueue", pack(sub), part_done(sub))


#: commands that create jobs with the client's ids (jobId / customId; a flow job's id)
CUSTOM_IDS = frozenset(("PUSH", "PUSHB", "PUSHF"))


def _custom(o) -> str | None:
    if o.__class__ is not dict:
        return None
    c = o.get("jobId")
    if c is None:
        c = o.get("customId")
    return None if c is None else str(c)


def _flow_id(o) -> str | None:
    c = o.get("id") if o.__class__ is dict else None
    return c if c.__class__ is str else None


def custom_ids(sess, name: str, cmd: dict) -> list:
    """The custom ids command `name` (in CUSTOM_IDS) asks for that this node does not have."""
    port = sess.port
    if name == "PUSH":
        items = (cmd,)
    else:
        items = cmd.get("jobs")
        if items.__class__ is not list:
            return []
    out = []
    ident = _flow_id if name == "PUSHF" else _custom
    for o in items:
        c = ident(o)
        if c is not None and port.find(c) is None:
            out.append(c)
    return out


def unique_keys(sess, name: str, cmd: dict) -> list:
    """The (queue, uniqueKey) pairs command `name` (in CUSTOM_IDS) asks for whose key no
    unfinished job of this node holds (a key that is not hashable is left to the handler's
    error)."""
    q = cmd.get("queue")
    if q is None or q.__class__ not in (str, int):
        return []
    queue = queue_name(q)
    items = (cmd,) if name == "PUSH" else cmd.get("jobs")
    if items.__class__ is not list and items.__class__ is not tuple:
        return []
    out = []
    port = sess.port
    for o in items:
        if o.__class__ is not dict:
            continue
        k = o.get("uniqueKey")
        if k is None or k.__class__ in (list, dict):
            continue
        try:
            held = port.dedup(queue, k)
        except AccessDenied:   # a queue the client may not use: the handler refuses it
            return []
        if held is None and (queue, k) not in out:
            out.append((queue, k))
    return out


def linked_ids(sess, name: str, cmd: dict) -> list:
    """The uids (str() of each named id) of the jobs a PUSH or PUSHB links its new jobs to
    (`dependsOn`, `parentId`) that this node does not have (shared mode: brought here or
    located first, check_new), in order, each once. `dependsOn` is iterated as the handler
    does (a string names its characters, as on a single server; a value that cannot be
    iterated names nothing). A batch's own custom ids are among them: the batch may name a
    job that exists already (answered as existing, it is not made here)."""
    if name == "PUSHF":
        return []
    items = (cmd,) if name == "PUSH" else cmd.get("jobs")
    if items.__class__ is not list and items.__class__ is not tuple:
        return []
    port = sess.port
    out: list = []
    seen: set = set()
    for o in items:
        if o.__class__ is not dict:
            continue
        try:
            named = list(o.get("dependsOn") or ())
        except TypeError:   # not iterable: the handler answers for it
            named = []
        if o.get("parentId") is not None and link_queue(o) is not None:
            named.append(o["parentId"])   # Queue.add's parent: it waits for the new job
        for u in named:
            u = str(u)
            if u not in seen:
                seen.add(u)
                if port.find(u) is None:
                    out.append(u)
    return out


def check_new(sess, uids: list, keys: list, cmd: dict, handler, name: str, rid,
              links: list = ()) -> None:
    """Shared mode, before a push: ask the database which of `uids` rows have and which of
    `keys` ((queue, uniqueKey)) unfinished jobs hold, and, last, bring the jobs `links`
    names (its new jobs' dependencies and parent, linked_ids) into this node when no node
    holds them (Port.reach_jobs; those another node holds, of queues the client may use,
    are `linked_elsewhere`); then run the command at once (before a commit gives those
    jobs back) with the answers (`taken_elsewhere`, `keys_elsewhere`); its reply answers
    `rid` later (after the commit, as a client's push waits for it). A database error
    answers `Storage unavailable`."""
    found: dict = {}

    def run() -> None:
        sess.taken_elsewhere = frozenset(found.get("ids", ()))
        sess.keys_elsewhere = found.get("keys", {})
        sess.linked_elsewhere = found.get("links", {})
        try:
            sess.answer_later(handler, name, cmd, rid)
        finally:
            sess.taken_elsewhere = frozenset()
            sess.keys_elsewhere = {}
            sess.linked_elsewhere = {}

    def got(what: str, more):
        def done(answer) -> None:
            found[what] = answer
            more()
        return _from_db(sess, rid, done)

    def reach() -> None:   # last: nothing may commit between it and the command
        allowed = found["allowed"]   # rows of queues the client may use: only those move
        if not allowed:
            found["links"] = {}
            run()
            return

        def reached(where) -> None:   # {uid: (holding node, job id)}
            found["links"] = {u: (n, allowed[u].id) for u, n in where.items() if u in allowed}
            run()
        sess.port.reach_jobs([u for u in links if u in allowed], _from_db(sess, rid, reached))
    last = reach if links else run
    then_keys = (lambda: sess.port.dedup_global(keys, got("keys", last))) if keys else last
    then_ids = ((lambda: sess.port.uids_taken_global(uids, got("ids", then_keys))) if uids
                else then_keys)
    if links:   # the named jobs with rows, of queues the client may use (ScopedPort)
        sess.port.lookup_remote_many(list(links), got("allowed", then_ids))
    else:
        then_ids()


def server(info):
    """The handler of bunqueue commands other nodes forward here (Port.serve_forwarded):
    each runs in a session of its own (`info`: the dialect's BunqueueInfo) with the client's
    principal, never forwarded again, counted once (on the node the client sent it to); its
    reply goes back with `need_commit` as a client's would. While storage is unavailable a
    mutating command is answered `Storage unavailable` without running, as a client's."""
    from .session import Session

    def run(body: bytes, principal, reply) -> None:
        cmd = decode_command(body)
        name = cmd.get("cmd") if cmd.__class__ is dict else None
        if name not in FORWARDED:
            reply(None, False)
            return
        if name in MUTATING and info.port.storage_down is not None:
            reply(pack(err(STORAGE_UNAVAILABLE)), False)
            return
        s = Session(info, lambda data, need_commit: reply(data[4:], need_commit),
                    principal=principal)
        s.authed = True          # the client was admitted where it is connected
        s.may_forward = False
        try:
            s.answer_later(HANDLERS[name], name, cmd, _FORWARDED_RID)
        finally:
            s.close()
    return run
