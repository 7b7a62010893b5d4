"""Locks presented on another node (shared mode, issue 19; docs/scaling.md "Locks presented
on another node"): a bunqueue Worker sends its commands over a pool of connections (up to 8,
the client's `poolSize`), which a load balancer may spread over several nodes, so the `ACK`,
`FAIL`, heartbeat, lock extension or progress of a job pulled through node A can reach node B.
Node B does not hold the job: it forwards the command to the node that does
(Port.forward, core/shared_calls.py), which runs it in a session of its own with the client's
principal and answers, once its changes are committed, with the reply B sends on. When no node
holds the job (or it does not answer in time) B answers as on a single server for a job it
does not have (`Job not found or not in processing state: <id>`, ...).

Batch forms (ACKB, JobHeartbeatB, ExtendLocks) are forwarded whole when none of their jobs is
held here, to the node holding the first: a batch pulled together (PULLB) is held together.

Custom ids across nodes: a PUSH or PUSHB naming a `jobId` (or `customId`) this node does not
have first asks the database (Port.uids_taken_global) which of them a row already has; those
are answered with the existing id, as a single server answers a custom id it has
(`taken_elsewhere`), the others are created.
"""
from __future__ import annotations

import msgpack

from types import GeneratorType

from .codec import _keep_ext, decode_command, pack
from .registry import STORAGE_UNAVAILABLE, err

#: commands about a job held by the node that reserved it -> the field naming the job(s)
FORWARDED = {"ACK": "id", "FAIL": "id", "JobHeartbeat": "id", "ExtendLock": "id",
             "Progress": "id", "ACKB": "ids", "JobHeartbeatB": "ids", "ExtendLocks": "ids"}

#: the reqId a forwarded command runs with on the holding node (replaced by the client's)
_FORWARDED_RID = "forwarded"


def held_elsewhere(sess, name: str, cmd: dict) -> str | None:
    """The uid to look up when command `name` (in FORWARDED) names jobs this node does not
    hold, in shared mode; None when it runs here."""
    port = sess.port
    if FORWARDED[name] == "id":
        id = cmd.get("id")
        return id if id.__class__ is str and port.find(id) is None else None
    ids = cmd.get("ids")
    if ids.__class__ is not list or not ids:
        return None
    for id in ids:
        if id.__class__ is not str or port.find(id) is not None:
            return None
    return ids[0]


#: commands that create jobs with the client's ids (jobId / customId)
CUSTOM_IDS = frozenset(("PUSH", "PUSHB"))


def _custom(o) -> str | None:
    if o.__class__ is not dict:
        return None
    c = o.get("jobId")
    if c is None:
        c = o.get("customId")
    return None if c is None else str(c)


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
    for o in items:
        c = _custom(o)
        if c is not None and port.find(c) is None:
            out.append(c)
    return out


def check_ids(sess, uids: list, cmd: dict, handler, name: str, rid) -> None:
    """Ask the database which of `uids` rows have (shared mode), then run the command with
    those answered as existing; its reply answers `rid` later (after the commit, as a
    client's push waits for it)."""
    def done(taken) -> None:
        if sess.closed:
            return
        if isinstance(taken, Exception):
            sess.later(rid, err(STORAGE_UNAVAILABLE))
            return
        sess.taken_elsewhere = frozenset(taken)
        sess.rid = rid
        try:
            r = sess.call(handler, name, cmd, rid)
            if r.__class__ is GeneratorType:   # a batch in slices: run them all now
                try:
                    while True:
                        next(r)
                except StopIteration as stop:
                    r = stop.value
        finally:
            sess.taken_elsewhere = frozenset()
        if r is not None:
            sess.deliver(r, sess.need_commit)
            sess.need_commit = False
    sess.port.uids_taken_global(uids, done)


def forward(sess, uid: str, cmd: dict, handler, rid) -> None:
    """Run `cmd` on the node holding job `uid`; its reply answers `rid` here later. When no
    node holds the job, `handler` runs here (its answer for a job that does not exist)."""
    body = pack({k: v for k, v in cmd.items() if k != "reqId"})

    def done(reply) -> None:
        if sess.closed:
            return
        if reply is not None:
            try:
                r = msgpack.unpackb(reply, ext_hook=_keep_ext, raw=False,
                                    strict_map_key=False)
            except (ValueError, msgpack.UnpackException):
                r = None
            if r.__class__ is dict:
                r.pop("reqId", None)
                sess.later(rid, r)
                return
        sess.may_forward = False   # the local answer: no node has the job
        sess.rid = rid
        try:
            r = handler(sess, cmd)
        finally:
            sess.may_forward = True
        sess.later(rid, r)
    sess.port.forward(uid, "bunqueue", body, done)


def server(info):
    """The handler of bunqueue commands other nodes forward here (Port.serve_forwarded):
    each runs in a session of its own (`info`: the dialect's BunqueueInfo) with the client's
    principal, never forwarded again; its reply goes back with `need_commit` as a client's
    would."""
    from .session import Session

    def run(body: bytes, principal, reply) -> None:
        cmd = decode_command(body)
        if cmd.__class__ is not dict or cmd.get("cmd") not in FORWARDED:
            reply(None, False)
            return
        cmd["reqId"] = _FORWARDED_RID
        answered = []

        def deliver(data: bytes, need_commit: bool) -> None:
            answered.append(True)
            reply(data[4:], need_commit)
        s = Session(info, deliver, principal=principal)
        s.authed = True          # the client was admitted where it is connected
        s.may_forward = False
        try:
            r = s.run(cmd)
            if r is not None and r.__class__ is bytes:
                answered.append(True)
                reply(r[4:], s.need_commit)
        finally:
            s.close()
        if not answered:
            reply(None, False)
    return run
