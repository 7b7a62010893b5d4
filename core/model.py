"""The value types of the engine port (DESIGN.md, "The canonical model"; core/api.py).

Everything here is a constant or an immutable value: dialects and the gateway import this module
and core.api, never the engine's live records (core/records.py). Snapshots are NamedTuples:
immutable, cheap to build, read by attribute.

Priorities are canonical ranks: a signed int64, lower is served first, ties FIFO by id.
Units: every `*_ms` duration is milliseconds; `created_ms`, `due_ms` and `at_ms` are wall-clock
ms since the Unix epoch; `left_ms` is ms from the snapshot's moment.
"""
from __future__ import annotations

from typing import NamedTuple

# Job states. Plain strings so they read well in storage and logs.
DELAYED = "delayed"
READY = "ready"
RESERVED = "reserved"
BURIED = "buried"      # also "failed": a buried job with a result (workq fail, DLQ)
COMPLETED = "completed"  # finished with a result; kept until its TTL / result retention ends
DELETED = "deleted"  # in memory only, between removal and the next journal flush
LIVE_STATES = (DELAYED, READY, RESERVED, BURIED, COMPLETED)

#: Derived uids: a job created without a client uid (a beanstalk put) is addressed by other
#: dialects as this UUIDv4-shaped string; "6a6f6267-6174" is "jobgat" in ASCII hex.
UID_PREFIX = "6a6f6267-6174-4"

#: Ready jobs whose rank is below this count as "urgent" (beanstalk: pri < 1024).
URGENT_RANK = -(2**31) + 1024

# Lease token modes (core/leases.py): how a presented lock token is treated.
#: The default: a token is optional, but one that is presented must match.
TOKEN_CHECKED = 0
#: A token is required and must match (a bunqueue PULL with `owner`: a lock).
TOKEN_REQUIRED = 1
#: Any presented token is ignored (a bunqueue PULL without `owner`: bunqueue 2.9.5 has no lock).
TOKEN_IGNORED = 2


class _Outcome:
    """A named non-job result of a waiting call (TIMED_OUT, DEADLINE_SOON, WAITING)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: Nothing became available within the timeout (reserve, lease, PULL, result, WaitJob).
TIMED_OUT = _Outcome("TIMED_OUT")
#: beanstalk: a reservation of this owner is within its last second (reserve's safety margin).
DEADLINE_SOON = _Outcome("DEADLINE_SOON")
#: The call registered a waiter; its callback will be called once with the answer.
WAITING = _Outcome("WAITING")


class Reserved(NamedTuple):
    """A job a reservation just handed out (reserve, lease, PULL).

    `uid` is None for a job created without a client uid (derived_uid(id) names it for other
    dialects); `fmt`: payload encoding (0 raw bytes, 1 MessagePack); `ttr_ms`: the lease's TTR;
    `lease`: the lease (its number; `token()` is the lease token, core/leases.py);
    `committed`: the job's row is already stored, so a reply that hands it out need not wait
    for a commit.
    """

    id: int
    uid: str | None
    queue: str
    payload: bytes
    fmt: int
    ttr_ms: int
    lease: object
    committed: bool

    def token(self) -> str:
        """The lease token of this reservation (core/leases.py)."""
        from .leases import token_str
        return token_str(self.lease)

    def any_uid(self) -> str:
        """The uid other dialects use for this job: the client's, or derived_uid(id)."""
        return self.uid if self.uid is not None else derived_uid(self.id)


class LeaseView(NamedTuple):
    """The lease of a reserved job: `token`, `mode` (TOKEN_CHECKED / _REQUIRED / _IGNORED),
    `owner` (the worker name: `beanstalk#3`, a bunqueue owner, ...), `left_ms` (ms to its
    deadline), `due_ms` (the deadline, wall ms)."""

    token: str
    mode: int
    owner: str
    left_ms: int
    due_ms: int


class JobView(NamedTuple):
    """An immutable snapshot of one job (peek, stats-job, inspect, GetJob ...).

    `uid`: the job's uid as other dialects see it (the client's, or derived_uid(id));
    `client_uid`: True when a client gave it. `state`: one of LIVE_STATES. `blocked`: waiting
    for dependencies (core/extras.py). `left_ms` / `due_ms`: time to / wall time of the state's
    timer (delayed: when it becomes ready; reserved: the TTR deadline), 0 otherwise.
    `ext`: the dialect extras (a read-only mapping, or None); `lease`: a LeaseView while
    reserved, else None. Counters: reserves, timeouts, releases, buries, kicks, fails.
    `result` / `result_ok`: the outcome of a finished job (None while unfinished).
    """

    id: int
    uid: str
    client_uid: bool
    queue: str
    payload: bytes
    fmt: int
    priority: int
    state: str
    dialect: str
    created_ms: int
    delay_ms: int
    ttr_ms: int
    ttl_ms: int
    sched_ms: int
    max_attempts: int
    max_fails: int
    reserves: int
    timeouts: int
    releases: int
    buries: int
    kicks: int
    fails: int
    result: bytes | None
    result_ok: bool
    ext: object
    blocked: bool
    left_ms: int
    due_ms: int
    lease: LeaseView | None


class QueueView(NamedTuple):
    """An immutable snapshot of one queue's counts (stats-tube, inspect queue, GetJobCounts).

    Jobs: ready (urgent: ready with rank < URGENT_RANK), delayed (blocked: delayed while
    waiting for dependencies, included in `delayed`), reserved, buried, completed (kept for
    their result). Connections: using, watching, waiting (reservers). Counters: total_jobs,
    deletes, pauses. Pause: `paused` now, `pause_ms` (the last pause's duration), `pause_left_ms`.
    `kept`: the queue stays when empty (workq names, bunqueue pauses); `pinned`: never removed.
    """

    name: str
    ready: int
    urgent: int
    delayed: int
    blocked: int
    reserved: int
    buried: int
    completed: int
    using: int
    watching: int
    waiting: int
    total_jobs: int
    deletes: int
    pauses: int
    paused: bool
    pause_ms: int
    pause_left_ms: int
    kept: bool
    pinned: bool

    def is_empty(self) -> bool:
        """True when the queue holds no job in any state."""
        return not (self.ready or self.delayed or self.reserved or self.buried
                    or self.completed)


class ServerStats(NamedTuple):
    """Server-wide counts (beanstalk `stats`, bunqueue Stats / Prometheus, workq inspect server).

    Jobs by state: urgent, ready, reserved, delayed, buried, completed. `queues`: live queues;
    `waiting`: waiting reservers; `job_timeouts`: TTR expiries ever; `total_jobs`: jobs created
    since start (restored ones included); `evicted_jobs`: unfinished jobs removed by their TTL;
    `stall_failures`: jobs a stall policy sent to the dead letters; `draining`: puts refused.
    """

    urgent: int
    ready: int
    reserved: int
    delayed: int
    buried: int
    completed: int
    queues: int
    waiting: int
    job_timeouts: int
    total_jobs: int
    evicted_jobs: int
    stall_failures: int
    draining: bool


class Failure(NamedTuple):
    """What a worker reported with a failure (bunqueue FAIL; core/failures.py records it):
    `error` text or None, `stack` lines (a list of str) or None, and `stack_limit`: how many
    non-empty lines are kept (the job's bunqueue stackTraceLimit, default 10; 0 or less keeps
    none; None keeps every line, as the reference does for a limit that is not a number)."""

    error: str | None
    stack: list | None = None
    stack_limit: int | float | None = 10


def derived_uid(id: int) -> str:
    """The uid other dialects use for job `id` when it has no client uid (a UUIDv4 shape:
    UID_PREFIX + 3 hex digits, "-8" + 3 hex digits, "-" + 12 hex digits of the 72-bit id)."""
    h = "%018x" % id
    return f"{UID_PREFIX}{h[:3]}-8{h[3:6]}-{h[6:]}"


def uuid_shaped(uid: str) -> bool:
    """True when `uid` has a UUID's shape (36 characters, dashes at 8, 13, 18 and 23): what
    workq clients can parse. A job whose uid is not (a bunqueue custom id, a glide-mq
    `<prefix>:{Q}:<id>`) is shown to workq by its derived uid, which names it too
    (docs/mapping.md)."""
    return (len(uid) == 36 and uid[8] == "-" and uid[13] == "-" and uid[18] == "-"
            and uid[23] == "-")


def parse_derived_uid(uid: str) -> int | None:
    """The job id encoded in a derived uid (see derived_uid), or None when `uid` is not one.
    `uid` must be in canonical lower-case form."""
    if len(uid) != 36 or not uid.startswith(UID_PREFIX) or uid[19] != "8":
        return None
    try:
        return int(uid[15:18] + uid[20:23] + uid[24:], 16)
    except ValueError:
        return None
