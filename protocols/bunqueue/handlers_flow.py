"""Flows: PUSHF, GetChildrenValues, GetFailedChildrenValues, GetIgnoredChildrenFailures
and a PUSH's link to a parent (bunqueue 2.9.5: server/handlers/flow.js, query.js,
introspection.js and the queue-manager code they call; replies as the real server gives
them, docs/bunqueue.md "Flows (issue 16)"). The commands that link or unlink existing jobs
are in handlers_links.py.

A flow is canonical (core/flows.py, docs/mapping.md "Flows (issue 16)"): a parent's extras
name the children it waits for (``deps``), so no dialect gets the parent before its children
complete. The bunqueue Job fields map onto extras: parentId, childrenIds, dependsOn, and the
four failure flags onto one ``parentPolicy``.
"""
from __future__ import annotations

from core.api import COMPLETED, DELAYED, READY

from . import flow_check
from .codec import map_header, pack, pack_value, unpack_value
from .info import DEFAULT_LOCK_TTL_MS
from .jobview import DEFAULT_MAX_ATTEMPTS, POLICY_FLAGS, job_body, result_body
from .options import build_ext, encode_data
from .handlers_query import _or_remote, find
from .registry import PENDING, Spliced, command, err

_FLAG_POLICY = {v: k for k, v in POLICY_FLAGS.items()}


def _array(items: list) -> bytes:
    n = len(items)
    head = bytes((0x90 | n,)) if n < 16 else (b"\xdc" + n.to_bytes(2, "big") if n < 0x10000
                                              else b"\xdd" + n.to_bytes(4, "big"))
    return head + b"".join(items)


# ------------------------------------------------------------------ PUSHF
def with_parent(ext: dict | None, opts: dict) -> dict:
    """`ext` plus the child's flow fields from PUSH / flow options: ``parentId`` and the
    ``parentPolicy`` its failure flag names (core/flows.py)."""
    ext = dict(ext) if ext else {}
    if opts.get("parentId"):
        ext["parentId"] = str(opts["parentId"])
        for flag, policy in _FLAG_POLICY.items():
            if opts.get(flag) is True:
                ext["parentPolicy"] = policy
    return ext


def _flow_ext(inp: dict, id: str, unmet: list) -> dict:
    ext = with_parent(build_ext(inp, inp.get("customId"), unmet), inp)
    if inp.get("childrenIds"):
        ext["childrenIds"] = list(inp["childrenIds"])
    return ext


# ------------------------------------------------------- PUSH with a parent
def link_queue(opts: dict):
    """The parent's queue a PUSH names in its data (`__parentQueue`, with `__parentId` equal
    to `parentId`: Queue.add's parent option), or None (a bare parentId: no link is made;
    parentLinkInput.js)."""
    data = opts.get("data")
    if data.__class__ is not dict or str(data.get("__parentId")) != str(opts["parentId"]):
        return None
    q = data.get("__parentQueue")
    return q if q.__class__ is str and q else None


def parent_link_error(sess, opts: dict, custom) -> str | None:
    """The reference's error for a PUSH that links a new child to a parent, or None
    (parentLink.js validateParentLinkInputs: the parent is waiting in the named queue)."""
    q = link_queue(opts)
    if q is None:
        return None
    pid = str(opts["parentId"])
    if custom is not None and str(custom) == pid:
        return "A job cannot be its own parent"
    parent = sess.port.lookup(pid)
    if parent is None:
        if pid in sess.linked_elsewhere:   # shared mode: another node holds it (active there)
            return f"Parent job {pid} is not linkable"
        return f"Parent job not found: {pid}"
    if not _waiting(parent):
        return f"Parent job {pid} is not linkable"
    if parent.queue != q:
        return f"Parent job {pid} belongs to queue {parent.queue}, not {q}"
    return None


def _link_fields(sess, parent, kids: list, uid: str) -> dict:
    """The parent's extras after declaring child `uid`: childrenIds, dependsOn and, when it
    did not wait for children yet, a ``waiting-children`` timeline entry (parentLink.js)."""
    pext = parent.ext or {}
    deps = list(pext.get("dependsOn") or ())
    if uid not in deps:
        deps.append(uid)
    fields = {"childrenIds": kids, "dependsOn": deps}
    if not pext.get("childrenIds") and not pext.get("deps"):
        fields["timeline"] = list(pext.get("timeline", ())) + [
            {"state": "waiting-children", "timestamp": float(sess.port.clock.wall_ms())}]
    return fields


def link_new_child(sess, uid: str, opts: dict) -> None:
    """After a PUSH with a parent link: the parent (checked by parent_link_error) declares the
    new child and waits for it (parentLink.js prepareParentLink / commitParentLink)."""
    if link_queue(opts) is None:
        return
    e = sess.port
    parent = e.lookup(str(opts["parentId"]))
    kids = _children(parent)
    if uid not in kids:
        kids.append(uid)
    e.add_dependencies(parent.id, [uid], "bunqueue", _link_fields(sess, parent, kids, uid))
    _data_with(sess, parent, {"__childrenIds": kids})


@command("PUSHF", mutating=True)
def push_flow(sess, cmd: dict):
    """PUSHF {jobs: [{id, queue, input}]}: every job is created or none (the whole graph is
    checked first); the reply carries each created Job object, in request order:
    {ok, data: {jobs: [Job]}}."""
    jobs = cmd.get("jobs")
    if jobs is None:
        return err("undefined is not an object (evaluating 'cmd.jobs.map')")
    if jobs.__class__ is not list:
        return err("flow jobs must be an array")
    msg = flow_check.normalise(jobs) or flow_check.check(jobs)
    if msg:
        return err(msg)
    e = sess.port
    for j in jobs:   # assertIdsAvailable: live jobs (completed or failed included; shared
        # mode: any node's, push_checks.py)
        if e.find(j["id"]) is not None or j["id"] in sess.taken_elsewhere:
            return err(f"Flow job {j['id']} already exists")
    waits = _waiters(jobs) if e.shared else {}
    ids = []
    for j in jobs:
        inp = j["input"]
        deps = list(inp.get("dependsOn") or ())
        ext = _flow_ext(inp, j["id"], deps)
        if j["id"] in waits:
            ext["waiters"] = waits[j["id"]]
        payload, fmt = encode_data(inp["data"])
        pri = inp.get("priority")
        delay = inp.get("delay")
        ttl = inp.get("ttl")
        ma = inp.get("maxAttempts")
        timeout = inp.get("timeout")
        ids.append(e.put(
            j["queue"], payload, -int(pri) if pri else 0, int(delay) if delay else 0,
            int(timeout) if timeout else DEFAULT_LOCK_TTL_MS, "bunqueue", j["id"],
            ttl_ms=int(ttl) if ttl else 0, expire_ms=int(ttl) if ttl else 0,
            max_fails=int(ma) if ma else DEFAULT_MAX_ATTEMPTS, event="push",
            ext=ext, fmt=fmt))
    sess.info.total_pushed += len(ids)
    body = map_header(1) + pack("jobs") + _array([job_body(e.job(i)) for i in ids])
    return Spliced({"ok": True}, [("data", body)])


def _waiters(jobs: list) -> dict:
    """{flow job id: [ids of the flow jobs whose dependsOn name it]}: in shared mode a job
    keeps them (extras ``waiters``) so that its completion on any node reaches them
    (core/shared_flows.py)."""
    out: dict = {}
    for j in jobs:
        for d in j["input"].get("dependsOn") or ():
            out.setdefault(d, []).append(j["id"])
    return out


# ------------------------------------------------------------------ reads
def _children(job) -> list:
    ext = job.ext if job is not None else None
    return list(ext.get("childrenIds") or ()) if ext is not None else []


@command("GetChildrenValues")
def get_children_values(sess, cmd: dict):
    """{ok, data: {values: {"<queue>:<child id>": result}}}: the results of the parent's
    children that completed (queries.js getChildrenValues); a child deleted since
    (removeOnComplete, retention) is named by its id alone while the parent is unfinished."""
    e = sess.port
    id = cmd.get("id")
    parent = find(sess, id)
    if not e.shared:
        return _children_values(parent, e.lookup)
    # shared mode: the parent and its children may be on other nodes or in the database
    rid = sess.rid

    def answer(reply) -> None:
        if not sess.closed:
            sess.later(rid, reply)

    def with_parent(parent) -> None:
        kids = _children(parent)
        here = {u: e.lookup(u) for u in kids}
        missing = [u for u, v in here.items() if v is None]
        if not missing:
            answer(_children_values(parent, here.get))
            return

        def got(views) -> None:
            if not isinstance(views, Exception):
                here.update(views)
            answer(_children_values(parent, here.get))
        e.lookup_remote_many(missing, got)
    if parent is not None or id.__class__ is not str:
        with_parent(parent)
    else:
        e.lookup_remote(id, lambda v: with_parent(None if isinstance(v, Exception) else v))
    return PENDING


def _children_values(parent, lookup) -> Spliced:
    """GetChildrenValues' reply for `parent` (a JobView or None), its children read with
    `lookup(uid)` (a JobView or None)."""
    parts = []
    kept = {}
    if parent is not None and parent.result is None and parent.ext is not None:
        kept = parent.ext.get("keptValues") or {}   # deleted children, while it waits
    for uid in _children(parent):
        child = lookup(uid)
        if child is None:
            if uid in kept:   # the reference names a child that is gone by its id alone
                res, fmt = kept[uid]
                parts.append(pack(uid) + (b"\xc0" if fmt == 1 and not res
                                          else pack_value(res, fmt)))
            continue
        if child.state is not COMPLETED or not child.result_ok:
            continue
        parts.append(pack(f"{child.queue}:{uid}") + result_body(child))
    values = map_header(len(parts)) + b"".join(parts)
    return Spliced({"ok": True}, [("data", map_header(1) + pack("values") + values)])


def _failures(sess, cmd: dict, key: str):
    def answer(parent):
        if parent is None or parent.result is not None or parent.ext is None:
            return {"ok": True, "values": {}}
        return {"ok": True, "values": dict(parent.ext.get(key) or {})}
    return _or_remote(sess, cmd.get("id"), answer)   # shared mode: any node's parent


@command("GetFailedChildrenValues")
def get_failed_children_values(sess, cmd: dict):
    """{ok, values: {"<queue>:<child id>": error}} of children that failed under
    continueParentOnFailure, while the parent is unfinished."""
    return _failures(sess, cmd, "failedChildren")


@command("GetIgnoredChildrenFailures")
def get_ignored_children_failures(sess, cmd: dict):
    """{ok, values: {"<queue>:<child id>": error}} of children that failed under
    ignoreDependencyOnFailure, while the parent is unfinished."""
    return _failures(sess, cmd, "ignoredFailures")


# ------------------------------------------------------------------ links
def _waiting(job) -> bool:
    """In the reference's queue (waiting, prioritized, delayed or waiting-children)."""
    return job.state is READY or job.state is DELAYED


def _data_with(sess, job, set_: dict, drop=()) -> None:
    """Rewrite a child's MessagePack object data with `set_` keys added and `drop` keys gone
    (the reference keeps `__parentId` / `__parentQueue` in the data); other payloads stay."""
    if job.fmt != 1:
        return
    data = unpack_value(job.payload, 1)
    if data.__class__ is not dict:
        return
    data = dict(data)
    data.update(set_)
    for k in drop:
        data.pop(k, None)
    sess.port.replace_payload(job.id, pack(data), 1)
