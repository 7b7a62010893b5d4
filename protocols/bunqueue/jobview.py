"""The bunqueue view of canonical jobs: ids, states and the Job object (bunqueue-golden.json,
"GetJob" and "PULL" steps: field names, order and MessagePack types as bunqueue 2.9.5 sends them).

Mapping (docs/mapping.md): id = the job's uid (a UUIDv7 we generate, the client's jobId, a workq
UUID, or the derived uid of a beanstalk job); priority = -rank, clamped to +-1,000,000 for jobs
of other dialects; attempts = explicit failures (`fails`), maxAttempts = `max_fails`;
stallCount = TTR expiries (`timeouts`); state: ready -> waiting (priority <= 0) or prioritized,
delayed -> delayed (or waiting-children while dependencies are unmet), reserved -> active,
completed -> completed, buried -> failed (the DLQ). Times are wall-clock ms, sent as float64.
"""
from __future__ import annotations

import os

from core.api import BURIED, COMPLETED, DELAYED, READY, RESERVED

from .codec import UNDEFINED, map_header, map_body, num, pack, pack_value

PRIORITY_MAX = 1_000_000
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_BACKOFF_MS = 1000
#: bunqueue keeps at most this many timeline entries per job (domain constant).
MAX_TIMELINE = 20

_last_ms = 0
_seq = 0
_head = ""
_rand = int.from_bytes(os.urandom(8), "big")


def new_id(now_ms: int) -> str:
    """A UUIDv7 string (RFC 9562) for wall time `now_ms` (the port's clock, ms): 48-bit ms
    timestamp, version 7, a 12-bit counter that keeps ids of one ms ordered (random start each
    ms), variant 10 and 62 bits that step through a random sequence per process. Unique within
    the process; ordered by creation."""
    global _last_ms, _seq, _rand, _head
    ms = now_ms
    if ms > _last_ms:
        _last_ms = ms
        _seq = os.urandom(1)[0]
        _head = "%08x-%04x-7" % (ms >> 16, ms & 0xFFFF)
    else:
        _seq += 1
        if _seq > 0xFFF:
            _last_ms += 1
            _seq = 0
            _head = "%08x-%04x-7" % (_last_ms >> 16, _last_ms & 0xFFFF)
    _rand = (_rand + 0x9E3779B97F4A7C15) & 0x3FFFFFFFFFFFFFFF
    r = _rand
    return "%s%03x-%04x-%012x" % (_head, _seq, 0x8000 | (r >> 48), r & 0xFFFFFFFFFFFF)


def rank_priority(rank: int) -> int:
    """The bunqueue priority of canonical rank `rank` (higher first): -rank, clamped to
    +-PRIORITY_MAX for jobs of other dialects."""
    p = -rank
    if p > PRIORITY_MAX:
        return PRIORITY_MAX
    if p < -PRIORITY_MAX:
        return -PRIORITY_MAX
    return p


def bq_priority(job) -> int:
    """The bunqueue priority of a job (a core.api.JobView)."""
    return rank_priority(job.priority)


def state_name(job) -> str:
    """GetState's name for `job` (a core.api.JobView; see the module docstring)."""
    s = job.state
    if s is READY:
        return "prioritized" if job.priority < 0 else "waiting"
    if s is RESERVED:
        return "active"
    if s is DELAYED:
        return "waiting-children" if job.blocked else "delayed"
    if s is COMPLETED:
        return "completed"
    if s is BURIED:
        return "failed"
    return "unknown"


def run_at(job) -> int:
    """Wall ms at which the job (a JobView) is (or was) due: the time a retry or MoveToDelayed
    set, else created + delay (exact: no wall/monotonic clock drift), else from its delayed
    deadline."""
    ext = job.ext
    if ext is not None and "runAt" in ext:
        return ext["runAt"]
    if job.state is DELAYED and not job.blocked and (job.releases or job.timeouts
                                                     or job.kicks or job.fails):
        # delayed again since it was created (a beanstalk release, ...): from its deadline
        return job.due_ms
    return job.created_ms + job.delay_ms


def first_state(job, ext) -> str:
    """The state of a job's first timeline entry (a JobView; `ext` its extras or {}): the state
    it entered when pushed, which later moves do not rewrite (reference:
    application/operations/pushInsert.js initialJobState). Commands that would change what it
    derives from (ChangePriority) store it first as extras key `firstState`; so does a push
    with unmet dependencies (``waiting-children``). A flow parent is ``waiting-children``,
    unless it became a parent later (then its own timeline entry says so)."""
    first = ext.get("firstState")
    if first is not None:
        return first
    if (ext.get("childrenIds") or ext.get("deps")) and not any(
            t.get("state") == "waiting-children" for t in ext.get("timeline", ())):
        return "waiting-children"
    return "delayed" if job.delay_ms else ("prioritized" if job.priority < 0 else "waiting")


def _timeline(job, ext, created: float) -> list:
    tl = [{"state": first_state(job, ext), "timestamp": created}]
    tl.extend(ext.get("timeline", ()))
    started = ext.get("startedAt")
    if job.state is RESERVED and started is not None:
        tl.append({"state": "active", "timestamp": float(started)})
    elif job.state is COMPLETED and ext.get("completedAt") is not None:
        if started is not None:
            tl.append({"state": "active", "timestamp": float(started)})
        tl.append({"state": "completed", "timestamp": float(ext["completedAt"])})
    return tl[-MAX_TIMELINE:]


_EMPTY: dict = {}

#: Job fields that never vary (bunqueue features jobgate does not have: BullMQ v5 options).
_CONSTANT = {
    "childrenCompleted": 0, "stallTimeout": None,
    "stackTraceLimit": 10, "keepLogs": None, "sizeLimit": None, "deduplicationTtl": None,
    "deduplicationExtend": False, "deduplicationReplace": False, "debounceId": None,
    "debounceTtl": None,
}
#: A flow child's ``parentPolicy`` extra (core/flows.py) as the Job object's option flag.
POLICY_FLAGS = {"fail": "failParentOnFailure", "remove": "removeDependencyOnFailure",
                "continue": "continueParentOnFailure", "ignore": "ignoreDependencyOnFailure"}
#: Extras keys that come from PUSH options; a job with none of them has _DEFAULTS.
_OPTION_KEYS = frozenset(("backoff", "backoffConfig", "dependsOn", "tags", "progressMessage",
                          "stacktrace", "repeat", "durable", "lifo", "removeOnComplete",
                          "removeOnFail", "timeout", "uniqueKey", "customId", "groupId",
                          "parentId", "childrenIds", "parentPolicy"))


def _options(ext: dict) -> dict:
    timeout = ext.get("timeout")
    return {
        "backoff": ext.get("backoff", DEFAULT_BACKOFF_MS),
        "backoffConfig": ext.get("backoffConfig"),
        "dependsOn": ext.get("dependsOn", []),
        "tags": ext.get("tags", []),
        "progressMessage": ext.get("progressMessage"),
        "stacktrace": ext.get("stacktrace"),
        "repeat": ext.get("repeat"),
        "durable": ext.get("durable", False),
        "lifo": ext.get("lifo", False),
        "removeOnComplete": ext.get("removeOnComplete", False),
        "removeOnFail": ext.get("removeOnFail", False),
        "timeout": None if timeout is None else num(timeout),
        "uniqueKey": ext.get("uniqueKey"),
        "customId": ext.get("customId"),
        "groupId": ext.get("groupId"),
        "parentId": ext.get("parentId"),
        "childrenIds": ext.get("childrenIds", []),
        "failParentOnFailure": ext.get("parentPolicy") == "fail",
        "removeDependencyOnFailure": ext.get("parentPolicy") == "remove",
        "continueParentOnFailure": ext.get("parentPolicy") == "continue",
        "ignoreDependencyOnFailure": ext.get("parentPolicy") == "ignore",
    }


_N_FIXED = len(_CONSTANT) + len(_options({}))
_FIXED_DEFAULT = map_body(_options({})) + map_body(_CONSTANT)
_FIXED_CONSTANT = map_body(_CONSTANT)


def job_body(job, full: bool = False, outcome: bool = False) -> bytes:
    """The packed Job object of `job`, a core.api.JobView (47 fields; `outcome`: plus
    returnvalue and failedReason,
    as GetJobByCustomId sends; `full`: plus state too, as GetJob sends). The payload is spliced
    in as stored, not re-encoded; fields that do not vary are spliced in pre-packed (key order
    within a Job is not significant to clients; docs/bunqueue.md)."""
    ext = job.ext if job.ext is not None else _EMPTY
    created = float(job.created_ms)
    started = ext.get("startedAt")
    done = ext.get("completedAt")
    ttl = job.ttl_ms
    tail = {
        "createdAt": created,
        "runAt": float(run_at(job)),
        "startedAt": None if started is None else float(started),
        "completedAt": None if done is None else float(done),
        "attempts": job.fails,
        "progress": ext.get("progress", 0),
        "lastHeartbeat": float(ext.get("lastHeartbeat", started or job.created_ms)),
        "stallCount": job.timeouts,
        "priority": bq_priority(job),
        "maxAttempts": job.max_fails if job.dialect == "bunqueue" else max(job.max_fails, 1),
        "ttl": num(ttl) if ttl else None,
        "timeline": _timeline(job, ext, created),
    }
    if full or outcome:
        if full:
            tail["state"] = state_name(job)
        tail["returnvalue"] = UNDEFINED
        tail["failedReason"] = UNDEFINED
        if job.result is not None and job.result_ok:
            tail["returnvalue"] = result_value_marker
        if ext.get("failedReason") is not None:   # the last FAIL's error, also while retrying
            tail["failedReason"] = ext["failedReason"]
        elif job.result and not job.result_ok and "dlqError" not in ext:
            # a failure text from another dialect (a flow parent failed by its child has none)
            tail["failedReason"] = job.result.decode("utf-8", "replace")
    n = 4 + len(tail) + _N_FIXED
    parts = [map_header(n), b"\xa2id", pack(job.uid), b"\xa5queue", pack(job.queue),
             b"\xa4name", pack(ext.get("name", "default")), b"\xa4data",
             pack_value(job.payload, job.fmt)]
    if tail.get("returnvalue") is result_value_marker:
        del tail["returnvalue"]
        parts.append(map_body(tail))
        parts.append(b"\xabreturnvalue")
        parts.append(result_body(job))
    else:
        parts.append(map_body(tail))
    if ext is _EMPTY or _OPTION_KEYS.isdisjoint(ext):
        parts.append(_FIXED_DEFAULT)
    else:
        parts.append(map_body(_options(ext)))
        parts.append(_FIXED_CONSTANT)
    return b"".join(parts)


_UNDEFINED_BODY = pack(UNDEFINED)


class _Marker:
    __slots__ = ()


result_value_marker = _Marker()


def result_body(job) -> bytes:
    """The packed result of a finished job: its ACK value (stored as MessagePack) or, for a
    result from another dialect, its bytes as str/bin; nil when there is none. A job ACKed
    without a result (stored empty) has `undefined` (ext 0), as the reference's getResult
    answers for a job it keeps no result of (application/operations/ack/completion.js)."""
    if job.result is None:
        return b"\xc0"
    ext = job.ext
    fmt = 1 if ext is not None and ext.get("resultFmt") == 1 else 0
    if fmt == 1 and not job.result:
        return _UNDEFINED_BODY
    return pack_value(job.result, fmt)
