"""Flow links across nodes (shared mode, issue 19; docs/scaling.md "Flow links across
nodes"): the bunqueue commands that link or unlink a flow's jobs (handlers_links.py), sent to
a node that may not hold the jobs they name.

- `UpdateParent {childId, parentId}`, `RemoveChildDependency {id}` (a child) and
  `RemoveUnprocessedChildren {id}` (a parent) read and change two or more jobs: the job the
  command names (its *own* job, the field in RELINKING) and the jobs it links to (the parent
  in the command, the child's ``parentId``, the parent's ``childrenIds``). The node brings
  all of them that no node holds from the database into its engine in one statement
  (Port.reach_jobs; given back at its next commit) and runs the command at once, as a
  single server does, before a commit could give them back. The own job is located first,
  alone: when another node holds it (a worker has it: active there), the command runs on
  that node instead (Port.forward_to), which brings the others in the same way (so the
  first node has not taken them). A linked job another node
  holds is active there (or taken in for a moment): UpdateParent answers `Parent job X is
  not linkable`, as for an active parent on one server, and the unlinking commands leave it
  alone, as they leave an active job.
- `MoveToWaitingChildren` acts on an active job only: it is forwarded to its holder as a
  Worker's ACK is (forward.py FORWARDED).

What keeps a link across nodes (core/shared_flows.py): a linked child carries its parent in
its ``waiters`` (UpdateParent adds it, RemoveChildDependency takes it out), so that its
completion on any node reaches the parent as a flow child's does.

A job read before the statement may be given back by a commit that ran before it (another
command took it in a moment before): the statement is then tried again, TRIES times at
most, before the command runs with what is here (a job found nowhere is answered as
missing, as on one server). So is the whole command when its own job went to another node
between the two statements (it is located again once this node gave back what it took).
An UpdateParent whose child is gone still takes its parent in: a parent that lists the
child answers ok, as on one server. A job of a queue the client may not use is never named
as held elsewhere (ScopedPort.reach_jobs): it reads as missing.
"""
from __future__ import annotations

from .forward import _from_db, _here, forward_one
from .handlers_query import id_of

#: the link commands -> the field naming the job each is about (where it runs)
RELINKING = {"UpdateParent": "childId", "RemoveChildDependency": "id",
             "RemoveUnprocessedChildren": "id"}
#: statements tried for one command when a job it names was given back meanwhile
TRIES = 3


def linked(name: str, cmd: dict, job) -> list:
    """The uids of the jobs command `name` reads or changes besides its own job; `job`: a
    JobView of that job (here or as its row is), or None."""
    if name == "UpdateParent":
        p = id_of(cmd.get("parentId"))
        return [] if p is None else [p]
    ext = job.ext if job is not None else None
    if not ext:
        return []
    if name == "RemoveChildDependency":
        p = id_of(ext.get("parentId"))
        return [] if p is None else [p]
    return [u for u in map(id_of, ext.get("childrenIds") or ()) if u is not None]


def relink(sess, name: str, cmd: dict, handler, rid, tries: int = 0) -> None:
    """Run link command `name` (in RELINKING) with the jobs it names brought here, or on
    the node holding its own job (see the module docstring); the reply answers `rid` later.
    A session that may not forward (a command another node forwarded here) runs it here in
    any case. A database error answers `Storage unavailable`."""
    port = sess.port
    own = id_of(cmd.get(RELINKING[name]))
    if own is None:   # not an id: the handler's answer
        _here(sess, handler, name, cmd, rid)
        return
    if port.find(own) is not None:
        _reach(sess, name, cmd, handler, rid, [own] + linked(name, cmd, port.lookup(own)),
               tries)
        return

    def located(where) -> None:   # first the own job alone: a holder must find the others
        if own in where and sess.may_forward:   # free to take
            forward_one(sess, where[own], name, cmd, handler, rid)
        elif port.find(own) is None:   # no such job (or of a queue the client may not use)
            if name == "UpdateParent":   # a parent may list a child that is gone: ok
                _reach(sess, name, cmd, handler, rid, [own] + linked(name, cmd, None),
                       TRIES - 1)
            else:
                _here(sess, handler, name, cmd, rid)
        else:
            _reach(sess, name, cmd, handler, rid,
                   [own] + linked(name, cmd, port.lookup(own)), tries)
    port.reach_jobs([own], _from_db(sess, rid, located))


def _reach(sess, name: str, cmd: dict, handler, rid, uids: list, tries: int) -> None:
    """Bring `uids` (the own job first) here, then run the command here or on the own
    job's holder (relink)."""
    def reached(where) -> None:   # {uid: holding node}
        own = uids[0]
        if own in where and sess.may_forward:
            # it went to another node since it was located (given back, then claimed): not
            # forwarded yet, as this node now holds the jobs it links to; located again
            # (after the commit that gives them back), then forwarded
            if tries + 1 < TRIES:
                relink(sess, name, cmd, handler, rid, tries + 1)
            else:
                forward_one(sess, where[own], name, cmd, handler, rid)
            return
        port = sess.port
        if (name == "UpdateParent" and sess.may_forward and port.find(own) is None
                and own not in where and uids[-1] in where):
            # a gone child, its parent active on another node: there it answers as one
            # server does (ok when the parent lists the child)
            forward_one(sess, where[uids[-1]], name, cmd, handler, rid)
            return
        if tries + 1 < TRIES and any(u not in where and port.find(u) is None for u in uids):
            # missing: gone, or given back by a commit just before the statement
            relink(sess, name, cmd, handler, rid, tries + 1)
            return
        sess.linked_elsewhere = {u: (n, None) for u, n in where.items()}
        try:
            _here(sess, handler, name, cmd, rid)
        finally:
            sess.linked_elsewhere = {}
    sess.port.reach_jobs(list(dict.fromkeys(uids)), _from_db(sess, rid, reached))


__all__ = ["RELINKING", "linked", "relink"]
