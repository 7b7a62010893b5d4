"""glide-mq's data model over the canonical one (docs/glide-mq.md, docs/mapping.md "glide-mq").

Keys. glide-mq names everything `<prefix>:{<queue>}:<kind>[:<arg>]` (default prefix `glide`;
glide-mq-NOTES.md "Keys per queue"). `parse_key` splits a key; the queue inside the braces is
the canonical queue (tube = name = queue), whatever the prefix.

Identity. A glide-mq job is named by its id within its queue (a per-queue counter, or the
producer's custom id). Its canonical uid is `<prefix>:{<queue>}:<id>` (`uid_of`): unique per
queue by construction, and the very string glide-mq writes in a parent's `deps` set, so a flow
parent waits for its children's canonical uids. bunqueue shows that uid as the job's id.

Extras. A job created over RESP carries, in its canonical extras (core.model.JobView.ext):

- ``name``: the job name (bunqueue's name too);
- ``lifo`` (True): glide-mq's LIFO list (canonical: LIFO among its rank);
- ``timeout`` (ms): `opts.timeout`, the job's processing limit in every dialect;
- ``glide``: a dict of what only glide-mq reads: ``id`` (str), ``pfx`` (prefix; absent:
  "glide"), ``opts`` (the option JSON text, verbatim; absent: "{}"), ``ts`` (the producer's
  timestamp argument, text), ``delay`` / ``priority`` / ``maxAttempts`` (texts as stored in
  the job hash; absent: "0"),
  ``due`` (int: the producer-clock due time of a delayed job, or None), ``x`` (the optional
  hash fields addJob writes, as [field, value] pairs: groupKey, orderingSeq, cost, expireAt,
  parentId, parentQueue, schedulerName, lifo), ``deps`` (a flow parent's deps members, all of
  them, for SMEMBERS), ``backoff`` ({type, delay} from opts, or None), ``roc`` / ``rof``
  (removeOnComplete / removeOnFail from opts).

Rank (consumption order, glide-mq-NOTES.md "Consumption order"): prioritized jobs (priority p
in 1..2048) first, lower p first; then LIFO jobs, newest first; then plain jobs, FIFO. As
canonical ranks (lower first): p -> p - PRIORITY_BASE, LIFO -> -1 (with extras lifo), plain 0.

State (the job hash's `state`), from the canonical state: delayed and waiting for children ->
`waiting-children`; delayed -> `delayed`; ready -> `prioritized` (p > 0) or `waiting`;
reserved -> `active`; completed -> `completed`; buried (failed for good, or a beanstalk bury)
-> `failed`.
"""
from __future__ import annotations

from core.model import BURIED, COMPLETED, DELAYED, READY, RESERVED

#: Canonical rank of glide-mq priority p (1..2048) is p - PRIORITY_BASE: ahead of LIFO (-1)
#: and plain (0) jobs, lower p first.
PRIORITY_BASE = 4096
#: The rank of a LIFO job.
LIFO_RANK = -1
#: score = priority * 2^42 + due time (glide-mq's scheduled zset; wire-protocol "Priority
#: Encoding").
SCORE_SHIFT = 1 << 42
#: A job's TTR when the producer gives no lockDuration (glide-mq's default lock, ms).
DEFAULT_LOCK_MS = 30_000

DIALECT = "glidemq"

#: Key kinds a queue has (glide-mq-NOTES.md "Keys per queue") and their Redis types.
TYPES = {
    "id": "string", "stream": "stream", "scheduled": "zset", "events": "stream",
    "meta": "hash", "dedup": "hash", "completed": "zset", "failed": "zset", "priority": "list",
    "lifo": "list", "ordering": "hash", "list-active": "string", "suspended": "zset",
    "ratelimited": "zset", "schedulers": "hash",
    # with an argument
    "job": "hash", "log": "list", "deps": "set", "group": "hash", "groupq": "list",
}


class Key:
    """A parsed glide-mq key: `prefix` (str), `queue` (str), `kind` (e.g. "job"), `arg` (the
    part after `kind:`, e.g. a job id, or None), `raw` (the key as bytes), `base`
    (`<prefix>:{<queue>}`)."""

    __slots__ = ("prefix", "queue", "kind", "arg", "raw", "base")

    def __init__(self, prefix, queue, kind, arg, raw, base: str | None = None) -> None:
        self.prefix = prefix
        self.queue = queue
        self.kind = kind
        self.arg = arg
        self.raw = raw
        #: `<prefix>:{<queue>}` (glide-mq's queue key prefix without the trailing colon)
        self.base = f"{prefix}:{{{queue}}}" if base is None else base

    def sibling(self, kind: str, arg: str | None = None) -> str:
        """Another key of the same queue."""
        return f"{self.base}:{kind}" if arg is None else f"{self.base}:{kind}:{arg}"


def parse_key(raw: bytes) -> Key | None:
    """`<prefix>:{<queue>}:<kind>[:<arg>]` -> Key; None when `raw` is not one (no hash tag, an
    empty queue name, or not UTF-8). The kind is whatever follows the tag up to the next
    colon; TYPES says which kinds exist."""
    try:
        s = raw.decode()
    except UnicodeDecodeError:
        return None
    i = s.find(":{")
    if i < 0:
        return None
    j = s.find("}:", i + 2)
    if j < 0 or j == i + 2:
        return None
    rest = s[j + 2:]
    kind, sep, arg = rest.partition(":")
    return Key(s[:i], s[i + 2:j], kind, arg if sep else None, raw, s[:j + 1])


def uid_of(prefix: str, queue: str, gid: str) -> str:
    """The canonical uid of glide-mq job `gid` of `queue` under `prefix`."""
    return f"{prefix}:{{{queue}}}:{gid}"


def split_member(member: str) -> tuple | None:
    """A deps member `<prefix>:{<queue>}:<id>` -> (prefix, queue, id), or None."""
    k = parse_key(member.encode())
    if k is None or not k.kind or k.arg is not None:
        return None
    return k.prefix, k.queue, k.kind


def rank(priority: int, lifo: bool) -> int:
    """The canonical rank of a glide-mq job (see the module docstring)."""
    if priority > 0:
        return priority - PRIORITY_BASE
    return LIFO_RANK if lifo else 0


def glide_of(view) -> dict | None:
    """The ``glide`` extras of a JobView, or None for a job not created over RESP."""
    ext = view.ext
    return None if ext is None else ext.get("glide")


def gprio(g: dict) -> int:
    """The glide-mq priority of a job's ``glide`` extras (0 when none or not a number)."""
    try:
        return int(g.get("priority") or 0)
    except ValueError:
        return 0


def state_of(view) -> str:
    """The job hash's `state` of a JobView (see the module docstring)."""
    st = view.state
    if st is READY:
        g = glide_of(view)
        return "prioritized" if g is not None and gprio(g) > 0 else "waiting"
    if st is DELAYED:
        return "waiting-children" if view.blocked else "delayed"
    if st is RESERVED:
        return "active"
    if st is COMPLETED:
        return "completed"
    if st is BURIED:
        return "failed"
    return st


def attempts_made(view) -> int:
    """attemptsMade: finished attempts (failures, plus the completing one)."""
    return view.fails + (1 if view.state is COMPLETED else 0)


def finished_on(view) -> int | None:
    """finishedOn (wall ms) of a completed or failed job, else None."""
    if view.state is not COMPLETED and view.state is not BURIED:
        return None
    ext = view.ext or {}
    t = ext.get("finishedOn")
    return int(t) if t is not None else view.created_ms


def _text(b) -> str:
    if b is None:
        return ""
    if isinstance(b, (bytes, bytearray)):
        return bytes(b).decode("utf-8", "replace")
    return str(b)


def return_value(view) -> str:
    """`returnvalue`: the result as JSON text. A bunqueue ACK's result (a MessagePack value,
    extras resultFmt 1) is decoded and written as JSON; another result is its text as given
    (a workq result), "null" when empty (a beanstalk delete, an XACK)."""
    r = view.result
    if not r:
        return "null"
    if (view.ext or {}).get("resultFmt") == 1:
        import json
        import msgpack
        try:
            v = msgpack.unpackb(r, raw=False, strict_map_key=False)
        except ValueError:
            return _text(r)
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False, default=_jsonable)
    return _text(r)


def _jsonable(x):
    if isinstance(x, (bytes, bytearray)):
        return bytes(x).decode("utf-8", "replace")
    return str(x)


def job_hash(view) -> list:
    """The job hash `glide:{Q}:job:{id}` of a JobView as [(field, value str)] pairs in
    addJob's order (id name data opts timestamp attemptsMade delay priority maxAttempts, the
    optional fields, state), then what the worker side sets: processedOn, finishedOn,
    returnvalue (a completed job's result text), failedReason (a failed job's)."""
    g = glide_of(view)
    ext = view.ext or {}
    out = [("id", g["id"]), ("name", _text(ext.get("name"))),
           ("data", view.payload.decode("utf-8", "surrogateescape")),
           ("opts", g.get("opts", "{}")), ("timestamp", g.get("ts", "")),
           ("attemptsMade", str(attempts_made(view))), ("delay", g.get("delay", "0")),
           ("priority", g.get("priority", "0")), ("maxAttempts", g.get("maxAttempts", "0"))]
    for f, v in g.get("x") or ():
        out.append((f, v))
    out.append(("state", state_of(view)))
    if view.reserves and view.state is not READY and view.state is not DELAYED:
        po = ext.get("processedOn")
        if po is not None:
            out.append(("processedOn", str(po)))
    fin = finished_on(view)
    if fin is not None:
        out.append(("finishedOn", str(fin)))
        if view.state is COMPLETED:
            out.append(("returnvalue", return_value(view)))
        else:
            reason = ext.get("failedReason")
            out.append(("failedReason", _text(reason if reason is not None else view.result)))
    return out
