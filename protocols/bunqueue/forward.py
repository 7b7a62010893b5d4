"""Locks presented on another node (shared mode, issue 19; docs/scaling.md "Locks presented
on another node"): a bunqueue Worker sends its commands over a pool of connections (up to 8,
the client's `poolSize`), which a load balancer may spread over several nodes, so the `ACK`,
`FAIL`, heartbeat, lock extension or progress of a job pulled through node A can reach node B.
Node B does not hold the job: a job no node holds is brought from the database into B's
engine (Port.reach_jobs) and B runs the command itself; else B forwards the command to the
node that holds it (Port.forward_to, core/shared_calls.py), which runs it in a session of
its own with the client's principal and answers, once its changes are committed, with the
reply B sends on. When no node holds the job (or it does not answer in time) B answers as on
a single server for a job it does not have (`Job not found or not in processing state: <id>`).

The same holds for the commands that change a job which is not active (Cancel, Update,
ChangePriority, Promote, MoveToDelayed, Discard, RetryCompleted, MoveToWait, ChangeDelay), for
a job's log (AddLog, ClearLogs: a Worker's `job.log()` goes over any pooled connection) and
for MoveToWaitingChildren: a job in the database is brought here and changed here; one held
by another node is changed there. The flow link commands, which name several jobs, are in
relink.py.

Batch forms (ACKB, JobHeartbeatB, ExtendLocks) are split by where their jobs are: the jobs
here (or brought here) run here, each other node gets its own entries, the replies are
combined (counts added up; ACKB ok when every part is, else the first error).
"""
from __future__ import annotations

import msgpack

from .codec import _keep_ext, decode_command, pack
from .handlers_query import id_of
from .registry import HANDLERS, MUTATING, STORAGE_UNAVAILABLE, err

#: commands that change a job -> the field naming it: run where the job is (reach_jobs)
FORWARDED = {"ACK": "id", "FAIL": "id", "JobHeartbeat": "id", "ExtendLock": "id",
             "Progress": "id", "ACKB": "ids", "JobHeartbeatB": "ids", "ExtendLocks": "ids",
             "Cancel": "id", "Update": "id", "ChangePriority": "id", "Promote": "id",
             "MoveToDelayed": "id", "Discard": "id", "RetryCompleted": "id",
             "MoveToWait": "id", "ChangeDelay": "id", "AddLog": "id", "ClearLogs": "id",
             "MoveToWaitingChildren": "id"}
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
        id = id_of(cmd.get("id"))
        return [id] if id is not None and port.find(id) is None else []
    ids = cmd.get("ids")
    if ids.__class__ is not list:
        return []
    return [id for id in map(id_of, ids) if id is not None and port.find(id) is None]



def _here(sess, handler, name: str, cmd: dict, rid) -> None:
    """Answer `cmd` from this node: as a single server does for jobs it does not have."""
    was, sess.may_forward = sess.may_forward, False
    try:
        sess.answer_later(handler, name, cmd, rid)
    finally:
        sess.may_forward = was


def _reply_here(sess, handler, name: str, cmd: dict) -> dict:
    """`handler`'s reply dict to `cmd` (a part of a batch) run on this node only."""
    was, sess.may_forward = sess.may_forward, False
    try:
        r = sess.reply_of(handler, name, cmd)
    finally:
        sess.may_forward = was
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
            forward_one(sess, where[uids[0]], name, cmd, handler, rid)
            return
        _split(sess, name, cmd, handler, rid, where)
    port.reach_jobs(uids, _from_db(sess, rid, located))


def forward_one(sess, node: int, name: str, cmd: dict, handler, rid) -> None:
    """Run `cmd` on node `node` (it holds the job the command is about); its reply answers
    `rid` here later. No reply in time (or none from that node): answered here
    (`handler`), as a single server answers for a job it does not have."""
    body = pack({k: v for k, v in cmd.items() if k != "reqId"})

    def done(reply) -> None:
        r = _unpacked(reply)
        if sess.closed:
            return
        if r is None:
            _here(sess, handler, name, cmd, rid)
        else:
            sess.later(rid, r)
    sess.port.forward_to(node, "bunqueue", body, done)


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
        id = id_of(id)
        n = where.get(id) if id is not None else None
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


def server(info):
    """The handler of bunqueue commands other nodes forward here (Port.serve_forwarded):
    each runs in a session of its own (`info`: the dialect's BunqueueInfo) with the client's
    principal, never forwarded again, counted once (on the node the client sent it to); its
    reply goes back with `need_commit` as a client's would. While storage is unavailable a
    mutating command is answered `Storage unavailable` without running, as a client's.
    A flow link command (relink.py) first brings the jobs it links to here; its session
    closes once it has answered."""
    from .relink import RELINKING, relink
    from .session import Session

    def run(body: bytes, principal, reply) -> None:
        cmd = decode_command(body)
        name = cmd.get("cmd") if cmd.__class__ is dict else None
        if name not in FORWARDED and name not in RELINKING:
            reply(None, False)
            return
        if name in MUTATING and info.port.storage_down is not None:
            reply(pack(err(STORAGE_UNAVAILABLE)), False)
            return

        def answer(data: bytes, need_commit: bool) -> None:
            reply(data[4:], need_commit)
            s.close()
        s = Session(info, answer, principal=principal)
        s.authed = True          # the client was admitted where it is connected
        s.may_forward = False
        if name in RELINKING:
            relink(s, name, cmd, HANDLERS[name], _FORWARDED_RID)
            return
        try:
            s.answer_later(HANDLERS[name], name, cmd, _FORWARDED_RID)
        finally:
            s.close()
    return run
