"""workq replies, and how a canonical job looks through workq (docs/mapping.md).

Reply formats: workq-protocol.txt; every success line starts with `+` (the spec's bare `OK`
lines are wrong, ../shared/reference/README.md). Inspect key order: name, ttr, ttl,
payload-size, payload, max-attempts, attempts, max-fails, fails, priority, state, created
[, time].

Deviations from the reference, on purpose (docs/workq.md): `inspect server` announces the 3 keys
it sends (the reference says 2); a payload containing CR or LF is left out of inspect replies
(key count one lower) instead of breaking the line framing.
"""
from __future__ import annotations

from core.api import BURIED, COMPLETED, DELAYED, RESERVED
from core.model import derived_uid, uuid_shaped

from .parser import client_error
from .values import format_time

OK = b"+OK\r\n"
NOT_FOUND = b"-NOT-FOUND\r\n"
TIMEOUT = b"-TIMEOUT\r\n"
#: While storage is unavailable (Port.storage_down): the spec's server error ("An error has
#: occurred while processing a command"); the command is not run (docs/workq.md).
STORAGE_UNAVAILABLE = b"-SERVER-ERROR Storage unavailable\r\n"

#: what Session.handle returns when the reply comes later (`take_reply` after `on_wake`)
WAIT = object()
#: what Session.handle returns for `quit` / the end of input: close the connection
QUIT = object()

INVALID_ID = client_error(b"Invalid ID")
INVALID_NAME = client_error(b"Invalid Name")
INVALID_TTR = client_error(b"Invalid TTR")
#: a queue name the connection's principal may not use (docs/operations.md, "TLS and access")
ACCESS_DENIED = client_error(b"Access denied")
INVALID_TTL = client_error(b"Invalid TTL")
INVALID_TIME = client_error(b"Invalid Time")
INVALID_TIMEOUT = client_error(b"Invalid wait timeout")
DUPLICATE_JOB = client_error(b"Duplicate job")
DUPLICATE_RESULT = client_error(b"Duplicate result")
FLAG_ERRORS = {b"max-attempts": client_error(b"Invalid Max Attempts"),
                b"max-fails": client_error(b"Invalid Max Fails")}
INVALID_PRIORITY = client_error(b"Invalid Priority")

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

# workq job states (workq-protocol.txt, "inspect job")
NEW, COMPLETED_STATE, FAILED, PENDING, LEASED = 0, 1, 2, 3, 4


def to_rank(priority: int) -> int:
    """workq priority (int32, higher first) -> canonical rank (lower first): r = -priority."""
    return -priority


def to_priority(rank: int) -> int:
    """canonical rank -> workq priority, clamped to int32 (a beanstalk pri 0 shows 2^31 - 1)."""
    p = -rank
    return INT32_MIN if p < INT32_MIN else INT32_MAX if p > INT32_MAX else p


def state_code(job) -> int:
    """The workq state of a canonical job: ready or delayed -> 0 new (never leased) or
    3 pending (leased before); reserved -> 4 leased; completed -> 1; buried (failed, or buried
    through beanstalk) -> 2 failed."""
    s = job.state
    if s is RESERVED:
        return LEASED
    if s is COMPLETED:
        return COMPLETED_STATE
    if s is BURIED:
        return FAILED
    return PENDING if job.reserves else NEW


def job_entry(job) -> bytes:
    """One job of an inspect reply (a core.api.JobView): `<id> <key-count>` and its key
    lines."""
    p = job.payload
    keys = [
        b"name " + job.queue.encode(),
        b"ttr %d" % job.ttr_ms,
        b"ttl %d" % job.ttl_ms,
        b"payload-size %d" % len(p),
    ]
    if b"\r" not in p and b"\n" not in p:
        keys.append(b"payload " + p)
    keys += [
        b"max-attempts %d" % job.max_attempts,
        b"attempts %d" % job.reserves,
        b"max-fails %d" % job.max_fails,
        b"fails %d" % job.fails,
        b"priority %d" % to_priority(job.priority),
        b"state %d" % state_code(job),
        b"created " + format_time(job.created_ms).encode(),
    ]
    if job.sched_ms:
        keys.append(b"time " + format_time(job.sched_ms).encode())
    elif job.state is DELAYED:   # delayed through another dialect: when it becomes ready
        keys.append(b"time " + format_time(job.due_ms).encode())
    head = b"%s %d\r\n" % (wire_uid(job.uid, job.id).encode(), len(keys))
    return head + b"\r\n".join(keys) + b"\r\n"


def jobs_reply(entries: list) -> bytes:
    """`+OK <n>` followed by n job entries (bytes from job_entry)."""
    return b"+OK %d\r\n" % len(entries) + b"".join(entries)


def queue_entry(name: str, ready: int, scheduled: int) -> bytes:
    """One queue of an inspect queue / queues reply."""
    return b"%s 2\r\nready-len %d\r\nscheduled-len %d\r\n" % (name.encode(), ready, scheduled)


def wire_uid(uid: str, id: int) -> str:
    """The id workq shows for a job: its uid when UUID-shaped, else its derived uid (a
    bunqueue custom id, a glide-mq job; docs/mapping.md), which workq commands accept too."""
    return uid if uuid_shaped(uid) else derived_uid(id)


def lease_reply(uid: str, job) -> bytes:
    """`+OK 1`, `<id> <name> <ttr> <payload-size>`, payload."""
    p = job.payload
    return b"+OK 1\r\n%s %s %d %d\r\n%s\r\n" % (wire_uid(uid, job.id).encode(),
                                                job.queue.encode(), job.ttr_ms,
                                                len(p), p)


def result_reply(uid: str, job) -> bytes:
    """`+OK 1`, `<id> <success> <result-size>`, result (result and run)."""
    r = job.result
    return b"+OK 1\r\n%s %d %d\r\n%s\r\n" % (wire_uid(uid, job.id).encode(),
                                              1 if job.result_ok else 0, len(r), r)


def server_reply(active_clients: int, evicted: int, started_ms: int) -> bytes:
    """inspect server: active-clients, evicted-jobs, started (3 keys, announced as 3)."""
    return (b"+OK 1\r\nserver 3\r\nactive-clients %d\r\nevicted-jobs %d\r\nstarted %s\r\n"
            % (active_clients, evicted, format_time(started_ms).encode()))
