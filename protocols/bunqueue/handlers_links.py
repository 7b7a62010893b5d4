"""Flow links between existing jobs: UpdateParent, RemoveChildDependency,
RemoveUnprocessedChildren and MoveToWaitingChildren (bunqueue 2.9.5: server/handlers/flow.js,
advanced/jobs.js, advanced/dependencies.js and the queue-manager code they call; replies as
the real server gives them, docs/bunqueue.md "Flows (issue 16)"). In shared mode the jobs
they name are brought here first, or the command runs where its job is (relink.py).
"""
from __future__ import annotations

from core.api import BURIED, COMPLETED, DELAYED, READY, RESERVED

from .flow_check import _js
from .handlers_flow import _children, _data_with, _link_fields, _waiting
from .handlers_outcome import _active
from .handlers_query import find
from .codec import unpack_value
from .registry import command, err, ok_empty


def _owner_of(job):
    ext = job.ext or {}
    owner = ext.get("parentId")
    if owner is None and job.fmt == 1:
        data = unpack_value(job.payload, 1)
        if data.__class__ is dict and data.get("__parentId") is not None:
            owner = str(data["__parentId"])
    return owner


@command("UpdateParent", mutating=True)
def update_parent(sess, cmd: dict):
    """Link child `childId` to parent `parentId` (queries.js updateJobParent): the parent
    then waits for the child too, unless it has completed."""
    cid, pid = cmd.get("childId"), cmd.get("parentId")
    if cid == pid:
        return err("A flow job cannot be its own parent")
    e = sess.port
    child = find(sess, cid)
    parent = find(sess, pid)
    if child is None:
        if parent is not None and str(cid) in _children(parent):
            return ok_empty()   # a declared child already gone
        return err(f"Child job not found: {_js(cid)}")
    owner = _owner_of(child)
    if parent is None:
        if str(pid) in sess.linked_elsewhere:   # shared: another node holds it (relink.py)
            if owner is not None and owner != "pending" and owner != str(pid):
                return err(f"Child job {child.uid} already belongs to parent {owner}")
            return err(f"Parent job {pid} is not linkable")
        return err(f"Parent job not found: {_js(pid)}")
    if owner is not None and owner != "pending" and owner != parent.uid:
        return err(f"Child job {child.uid} already belongs to parent {owner}")
    kids = _children(parent)
    link = {"__parentId": parent.uid, "__parentQueue": parent.queue}
    if child.uid not in kids:
        if not _waiting(parent):
            return err(f"Parent job {parent.uid} is not linkable")
        fields = _link_fields(sess, parent, kids + [child.uid], child.uid)
        kids.append(child.uid)
        if child.state is COMPLETED:
            fields.pop("timeline", None)   # nothing to wait for (parentLink.js childFinished)
        e.add_dependencies(parent.id, [child.uid], "bunqueue", fields)
        _data_with(sess, parent, {"__childrenIds": kids})
    e.update_extras(child.id, {"parentId": parent.uid})
    if e.shared and child.state is not COMPLETED:   # its completion anywhere tells the parent
        e.wait_for(parent.uid, [child.uid])
    _data_with(sess, child, link)
    child = e.job(child.id)
    if child.state is BURIED and child.result is not None and child.ext.get("parentPolicy"):
        e.apply_child_failure(child.id)
    return ok_empty()


def _unlinked(child, pid: str) -> tuple:
    """The extras to set and to drop on `child` unlinked from parent `pid`: its parent and
    policy go, and, in shared mode, `pid` leaves its ``waiters`` (core/shared_flows.py)."""
    drop = ("parentId", "parentPolicy")
    ws = (child.ext or {}).get("waiters")
    if not ws or pid not in ws:
        return {}, drop
    left = [w for w in ws if w != pid]
    return ({"waiters": left}, drop) if left else ({}, drop + ("waiters",))


@command("RemoveChildDependency", mutating=True)
def remove_child_dependency(sess, cmd: dict):
    """{ok, removed}: the parent of child `id` stops waiting for it and the link is undone
    (dependencies.js removeChildDependency); removed false when either is not waiting."""
    cid = cmd.get("id")
    child = find(sess, cid)
    if child is None:
        return err(f"Job not found: {_js(cid)}")
    pid = (child.ext or {}).get("parentId")
    if pid is None:
        return err(f"Job {_js(cid)} has no parent")
    e = sess.port
    parent = e.lookup(pid)
    if parent is None or not _waiting(parent) or child.state not in (READY, DELAYED, RESERVED):
        return {"ok": True, "removed": False}
    pext = parent.ext or {}
    if not parent.blocked or child.uid not in (pext.get("dependsOn") or ()):
        return {"ok": True, "removed": False}
    kids = [k for k in _children(parent) if k != child.uid]
    unresolved = [d for d in pext.get("deps") or () if d != child.uid]
    e.update_extras(child.id, *_unlinked(child, parent.uid))
    _data_with(sess, child, {}, ("__parentId", "__parentQueue"))
    if kids:
        _data_with(sess, parent, {"__childrenIds": kids})
        extras, drop = {"childrenIds": kids, "dependsOn": unresolved}, ()
    else:
        _data_with(sess, parent, {}, ("__childrenIds",))
        extras, drop = {"dependsOn": unresolved}, ("childrenIds",)
    e.drop_dependencies(parent.id, [child.uid], "bunqueue", extras, drop)
    return {"ok": True, "removed": True}


@command("RemoveUnprocessedChildren", mutating=True)
def remove_unprocessed_children(sess, cmd: dict):
    """Cancel the parent's children that are still waiting (not active, not finished)."""
    parent = find(sess, cmd.get("id"))
    e = sess.port
    for uid in _children(parent):
        child = e.lookup(uid)
        if child is not None and _waiting(child):
            e.remove(child.id, "bunqueue", "cancel")
    return ok_empty()


@command("MoveToWaitingChildren", mutating=True)
def move_to_waiting_children(sess, cmd: dict):
    """An active job (its lock token when it has one) waits for its unmet dependencies:
    {ok, data: {moved: true}}; else `Job is not active`. A job with none left is waiting
    again at once (the reference parks it for good; docs/bunqueue.md)."""
    job = find(sess, cmd.get("id"))
    e = sess.port
    if job is None or job.state is not RESERVED:
        return err("Job is not active")
    r = _active(sess, job.uid, cmd.get("token"))   # the token errors of ACK
    if r.__class__ is dict:
        return r
    ext = job.ext or {}
    deps = list(ext.get("deps") or ())
    now = float(e.clock.wall_ms())
    tl = list(ext.get("timeline", ()))
    if ext.get("startedAt") is not None:   # the run it ends, then the wait (reference)
        tl.append({"state": "active", "timestamp": float(ext["startedAt"])})
    tl.append({"state": "waiting-children", "timestamp": now})
    e.update_extras(job.id, {"timeline": tl}, ("startedAt",))
    if deps:
        e.add_dependencies(job.id, deps, "bunqueue")
        if e.job(job.id).state is RESERVED:   # every dependency completed meanwhile
            e.requeue(job.id, 0, "release", "bunqueue")
    else:
        e.requeue(job.id, 0, "release", "bunqueue")
    return {"ok": True, "data": {"moved": True}}
