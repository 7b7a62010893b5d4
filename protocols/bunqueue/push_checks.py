"""Before a push on a node in shared mode (issue 19; docs/scaling.md "Clients' ids across
nodes" and "Dependencies outside a flow"): what the database knows that the push's checks
need, read first, then the push runs as on a single server.

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

from core.api import AccessDenied

from .forward import _from_db
from .handlers_flow import link_queue
from .options import queue_name


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
