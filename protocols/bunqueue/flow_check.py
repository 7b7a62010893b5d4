"""PUSHF validation: a flow graph is checked whole before any job is created, with the
reference's error texts and in its order (bunqueue 2.9.5 application/operations/
flowValidation.js, flowTopologyValidation.js; handlers/flow.js normalises each job's name
first). Returns the first error text, or None.

A flow job is {id, queue, input: {name, data, parentId?, dependsOn?, childrenIds?, options}}
as the real client's FlowProducer plans it (client/flowPlan.js): a child's data carries
`__parentId` / `__parentQueue`, a parent's data `__childrenIds`, and every dependency is a job
of the same batch. Units: ms.
"""
from __future__ import annotations

from .options import DATA_MAX, DAY_MS, YEAR_MS, _QUEUE_RE, group_id_error
from .codec import pack

MAX_FLOW_JOBS = 10_000
MAX_FLOW_DATA = 64 * 1024 * 1024
_BOOLEANS = ("lifo", "removeOnComplete", "removeOnFail", "durable", "failParentOnFailure",
             "removeDependencyOnFailure", "continueParentOnFailure",
             "ignoreDependencyOnFailure")
_POLICIES = ("failParentOnFailure", "removeDependencyOnFailure", "continueParentOnFailure",
             "ignoreDependencyOnFailure")
#: (input key, name in the error, min, max, integer) in the reference's order.
_NUMERIC = (("delay", "delay", 0, YEAR_MS, False), ("timeout", "timeout", 0, DAY_MS, False),
            ("ttl", "ttl", 0, YEAR_MS, False), ("maxAttempts", "attempts", 1, 1000, True),
            ("stallTimeout", "stallTimeout", 0, DAY_MS, False),
            ("stackTraceLimit", "stackTraceLimit", 0, 10_000, True),
            ("keepLogs", "keepLogs", 0, 1_000_000, True),
            ("sizeLimit", "sizeLimit", 0, DATA_MAX, True),
            ("timestamp", "timestamp", 0, 2 ** 53 - 1, False),
            ("groupMaxSize", "group.maxSize", 1, 2 ** 53 - 1, True))
_I_MIN, _U_MAX = -0x80000000, 0xFFFFFFFF


def _js(v) -> str:
    """A value as JavaScript's String() writes it in an error text."""
    if v is None:
        return "undefined"
    if v is True or v is False:
        return "true" if v else "false"
    if v.__class__ is float and v.is_integer():
        return str(int(v))
    if v.__class__ is dict:
        return "[object Object]"
    if v.__class__ is list:
        return ",".join("" if x is None else _js(x) for x in v)
    return str(v)


def _numeric(v, name: str, lo, hi, integer: bool) -> str | None:
    if v is None:
        return None
    c = v.__class__
    if c is not int and c is not float or c is int and not _I_MIN <= v <= _U_MAX \
            or c is float and (v != v or v in (float("inf"), float("-inf"))):
        return f"{name} must be a finite number"   # a BigInt is not a number either
    if integer and c is float and not v.is_integer():
        return f"{name} must be an integer"
    if v < lo or v > hi:
        return f"{name} must be between {lo} and {hi}"
    return None


def _options(inp: dict) -> str | None:
    """validateOptions of flowValidation.js (the group checks are the PUSH ones)."""
    if inp.get("groupId") is None:
        msg = _numeric(inp.get("priority"), "priority", -1_000_000, 1_000_000, True)
        if msg:
            return msg
    for key, name, lo, hi, integer in _NUMERIC:
        msg = _numeric(inp.get(key), name, lo, hi, integer)
        if msg:
            return msg
    b = inp.get("backoff")
    if b.__class__ is dict:
        if b.get("type") not in ("fixed", "exponential"):
            return "backoff.type must be 'fixed' or 'exponential'"
        msg = _numeric(b.get("delay"), "backoff.delay", 0, DAY_MS, False)
    else:
        msg = _numeric(b, "backoff", 0, DAY_MS, False)
    if msg:
        return msg
    for name in _BOOLEANS:
        v = inp.get(name)
        if v is not None and v is not True and v is not False:
            return f"{name} must be a boolean"
    msg = group_id_error(inp.get("groupId"))
    if msg:
        return msg
    tags = inp.get("tags")
    if tags is not None and (tags.__class__ is not list or any(
            t.__class__ is not str or len(t) > 256 for t in tags)):
        return "tags must be an array of strings of at most 256 characters"
    if inp.get("repeat") is not None:
        return "repeat is not supported inside an atomic flow"
    if inp.get("uniqueKey") is not None or inp.get("dedup") is not None:
        return "deduplication is not supported inside an atomic flow"
    if inp.get("debounceId") is not None or inp.get("debounceTtl") is not None:
        return "debounce is not supported inside an atomic flow"
    n = sum(1 for p in _POLICIES if inp.get(p) is True)
    if n > 1:
        return "flow failure policies are mutually exclusive"
    if n == 1 and not inp.get("parentId"):
        return "a flow failure policy requires a parent"
    return None


def _id_list(v, name: str) -> str | None:
    if v is not None and (v.__class__ is not list or any(
            x.__class__ is not str or not x or len(x) > 1024 for x in v)):
        return f"{name} must be an array of valid string job ids"
    return None


def normalise(jobs: list) -> str | None:
    """handlers/flow.js before validation: each job's input gets its name (an explicit
    `name`, else a legacy `data.name` moved out of data, else "default"). Changes `jobs` in
    place; returns an error text or None."""
    for job in jobs:
        inp = job.get("input") if job.__class__ is dict else None
        if inp.__class__ is not dict:
            return "undefined is not an object (evaluating 'source.name')"
        name = inp.get("name")
        data = inp.get("data")
        if name is None and data.__class__ is dict and data.get("name").__class__ is str:
            data = dict(data)
            name = data.pop("name")
            inp["data"] = data
        if name is None:
            name = "default"
        if name.__class__ is not str or not name or len(name) > 256:
            return "Job name must be a non-empty string of at most 256 characters"
        inp["name"] = name
    return None


def check(jobs: list) -> str | None:
    """validateAtomicFlowBatch: shapes and options of every job, then the topology."""
    if len(jobs) > MAX_FLOW_JOBS:
        return f"flow exceeds the {MAX_FLOW_JOBS} job limit"
    ids: set = set()
    total = 0
    for i, job in enumerate(jobs):
        id = job.get("id")
        if id.__class__ is not str:
            return "flow job id must be a string"
        if not id or len(id) > 1024:
            return "flow job id is invalid or is not well-formed Unicode"
        if ":" in id:
            return "flow job id cannot contain a colon"
        if id in ids:
            return f"duplicate flow job id: {id}"
        ids.add(id)
        q = job.get("queue")
        if q.__class__ is not str or not q or len(q) > 256 or _QUEUE_RE.match(q) is None:
            return f"invalid flow queue: {_js(q)}"
        inp = job["input"]
        c = inp.get("customId")
        if c is not None and c != id:
            return f"custom id does not match planned id: {id}"
        p = inp.get("parentId")
        if p is not None and (p.__class__ is not str or not p):
            return f"flow parent id is invalid: {id}"
        msg = _id_list(inp.get("dependsOn"), "dependsOn") or _id_list(
            inp.get("childrenIds"), "childrenIds")
        if msg:
            return msg
        data = inp.get("data")
        if data.__class__ is not dict:
            return "flow job data must be an object"
        try:
            size = len(pack(data))
        except (TypeError, ValueError, OverflowError):
            return "job data must be JSON serializable"
        if size > DATA_MAX:
            return "Job data too large (max 10MB)"
        total += size
        if total > MAX_FLOW_DATA:
            return "flow data is too large (max 64MB per atomic batch)"
        msg = _options(inp)
        if msg:
            return msg
    return _topology(jobs)


def _topology(jobs: list) -> str | None:
    by_id = {j["id"]: j for j in jobs}
    links = {}
    for j in jobs:
        deps = list(j["input"].get("dependsOn") or ())
        kids = list(j["input"].get("childrenIds") or ())
        if len(set(deps)) != len(deps):
            return f"duplicate dependency in flow job: {j['id']}"
        if len(set(kids)) != len(kids):
            return f"duplicate child in flow job: {j['id']}"
        links[j["id"]] = (deps, kids)
    sets = {id: (set(deps), set(kids)) for id, (deps, kids) in links.items()}
    for j in jobs:
        id = j["id"]
        deps, kids = links[id]
        dep_set = sets[id][0]
        for d in deps:
            if d not in by_id:
                return f"flow dependency not found: {d}"
            if d == id:
                return f"flow job cannot depend on itself: {id}"
        for k in kids:
            if k not in dep_set:
                return f"flow child is missing from dependencies: {k}"
            if k not in by_id:
                return f"flow child not found: {k}"
            if by_id[k]["input"].get("parentId") != id:
                return f"flow child {k} does not point back to parent {id}"
        data = j["input"]["data"]
        p = j["input"].get("parentId")
        if p:
            parent = by_id.get(p)
            if parent is None:
                return f"flow parent not found: {p}"
            if id not in sets[p][1]:
                return f"flow parent {p} does not own child {id}"
            if data.get("__parentId") != p or data.get("__parentQueue") != parent["queue"]:
                return f"flow child {id} metadata does not match parent {p}"
        if kids and data.get("__childrenIds") != kids:
            return f"flow parent {id} children does not match the canonical flow topology"
    # acyclic (Kahn)
    remaining = {id: len(links[id][0]) for id in links}
    dependents: dict = {}
    for id, (deps, _) in links.items():
        for d in deps:
            dependents.setdefault(d, []).append(id)
    ready = [id for id, n in remaining.items() if n == 0]
    seen = 0
    while ready:
        id = ready.pop()
        seen += 1
        for x in dependents.get(id, ()):
            remaining[x] -= 1
            if remaining[x] == 0:
                ready.append(x)
    if seen != len(links):
        return "flow contains a dependency cycle"
    return None
