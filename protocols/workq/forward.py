"""workq `complete`, `fail` and `delete` of a job held by another node (shared mode, issue
19; docs/scaling.md "Locks presented on another node"). workq leases are not owned by the
connection: any connection may complete or fail a leased job (workq-protocol.txt "lease"),
so a client whose connections reach several nodes may finish on node B a job leased through
node A, or a job that is waiting in the database. B does not hold it: it asks the database
(Port.reach_jobs), which brings a job no node holds into B's engine (B then runs the command
itself, as a single server would), or names the node holding it; B forwards the command
there (Port.forward_to, core/shared_calls.py); A runs it in a session of its own with the
client's principal and answers once its change is committed; B sends A's reply on. When
there is no such job, or A does not answer in time, B answers what a single server answers
for a job it does not have (-NOT-FOUND, or -CLIENT-ERROR Invalid ID for an id that is not a
UUIDv4). A `delete` goes to the holder too (a lease there, or a claim not yet
handed to a worker: the holder drops it, so it is not handed out after the delete); when
the holder does not answer (it gave the job back meanwhile, or it is dead and its
reservation not yet rescued), B deletes the row wherever it is (Port.remove_remote).
"""
from __future__ import annotations

import msgpack

from .parser import Command
from .replies import WAIT

#: the commands forwarded to the node holding their job (its lease, or its claim)
FORWARDED = frozenset((b"complete", b"fail", b"delete"))


def forward(sess, c, uid: str, answer: bytes, fallback=None):
    """Run command `c` (complete / fail / delete of job `uid`, which this node does not
    hold) on the node holding it; WAIT meanwhile. `answer`: this node's own reply, used when
    no node holds the job. `fallback()`: run instead of answering `answer` when the holder
    did not answer (a delete then deletes the row wherever it is; it answers itself)."""
    port = sess.port
    body = msgpack.packb((c.name, c.args, c.flags, c.payload), use_bin_type=True)

    def done(reply) -> None:
        if reply.__class__ is bytes and reply:
            sess.answer(reply)
        elif fallback is not None:
            fallback()
        else:
            sess.answer(answer)

    def located(where) -> None:
        if isinstance(where, Exception):
            done(None)
            return
        node = where.get(uid)
        if node is not None:
            port.forward_to(node, "workq", body, done)
            return
        # no node holds it: its row (if any) was brought here, so it runs here
        sess.may_forward = False
        try:
            r = sess.run_forwarded(c)
        finally:
            sess.may_forward = True
        sess.answer(r if r.__class__ is bytes else answer)
    sess.hold()
    port.reach_jobs([uid], located)
    return WAIT


def server(info):
    """The handler of workq commands other nodes forward here (Port.serve_forwarded): each
    runs in a session of its own (`info`: WorkqInfo) with the client's principal, counted on
    the node the client sent it to; its reply goes back after the commit."""
    from .session import Session

    def run(body: bytes, principal, reply) -> None:
        try:
            name, args, flags, payload = msgpack.unpackb(body, raw=True, use_list=True,
                                                         strict_map_key=False)
        except (ValueError, TypeError, msgpack.UnpackException):
            reply(None, False)
            return
        if name not in FORWARDED or args.__class__ is not list or flags.__class__ is not dict:
            reply(None, False)
            return
        s = Session(info, principal)
        s.may_forward = False
        try:
            r = s.run_forwarded(Command(name, args, flags, payload))
            reply(r if r.__class__ is bytes else None, s.need_commit)
        finally:
            s.close()
    return run
