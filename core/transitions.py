"""The job state machine as one table (DESIGN.md, "The canonical model"; docs/mapping.md).

Every legal change of a job is a row: (state before, operation, state after) -> (journal record,
history events). The engine (core/engine.py and its bases) checks each change here before it
touches an index: a change that is not in the table raises IllegalTransition, in one place.

States are core.model's plus two pseudo-states: NEW (before a job exists) and GONE (deleted).
Operations are named after the history event they write (put, reserve, release, ...).

Journal records (what the storage writer persists, core/journal.py):

- INSERT: the job row is inserted.
- RESERVATION: the reservation; its row is written only when the lease is kept across a restart
  (a workq lease, a bunqueue lock), otherwise only the history event is.
- MOVE: the row's state, priority, times and counters are updated.
- RESULT: the row gets its result (completed, or failed for good = buried with a result).
- DELETE: the row is deleted.

Events: the history / event-feed events written for the change, in order (a final failure is
`fail` then `dlq`; a lock expiry at the last attempt `timeout`, `fail`, `dlq`). `touch` renews a
lease and changes no state: no event.
"""
from __future__ import annotations

from typing import NamedTuple

from .model import BURIED, COMPLETED, DELAYED, READY, RESERVED

NEW = "new"
GONE = "gone"

INSERT = "insert"
RESERVATION = "reservation"
MOVE = "move"
RESULT = "result"
DELETE = "delete"

#: Operations that create a job (one per dialect's word for it).
CREATE_OPS = ("put", "add", "schedule", "run", "push")
#: Operations that delete a job: beanstalk/workq delete, bunqueue Cancel, removeOnComplete /
#: removeOnFail, Drain, Obliterate, Clean, PurgeDlq, and TTL eviction.
DELETE_OPS = ("delete", "cancel", "remove", "drain", "obliterate", "clean", "purge",
              "ttl-evict")
LIVE = (DELAYED, READY, RESERVED, BURIED, COMPLETED)
UNFINISHED = (DELAYED, READY, RESERVED, BURIED)   # BURIED only without a result (guarded)


class IllegalTransition(Exception):
    """A change the state machine does not allow: (state, operation, new state). Raised by the
    engine before it changes anything; it means a bug in the caller or the engine."""

    def __init__(self, prev: str, op: str, to: str) -> None:
        super().__init__(f"illegal transition {prev} --{op}--> {to}")
        self.prev, self.op, self.to = prev, op, to


class Row(NamedTuple):
    """One transition's effects: `record` (INSERT, RESERVATION, MOVE, RESULT, DELETE) and
    `events` (the event names written, in order)."""

    record: str
    events: tuple


def _rows() -> dict:
    t: dict = {}

    def add(prev, op, to, record, events=None):
        for p in (prev if isinstance(prev, tuple) else (prev,)):
            for n in (to if isinstance(to, tuple) else (to,)):
                t[(p, op, n)] = Row(record, (op,) if events is None else events)

    for op in CREATE_OPS:
        add(NEW, op, (READY, DELAYED), INSERT)
    # consumers
    add(READY, "reserve", RESERVED, RESERVATION)
    add((DELAYED, BURIED), "reserve", RESERVED, RESERVATION)   # beanstalk reserve-job
    add(RESERVED, "touch", RESERVED, RESERVATION, ())           # renew the lease: no event
    add(RESERVED, "release", (READY, DELAYED), MOVE)
    add((READY, DELAYED), "release", (READY, DELAYED), MOVE)    # bunqueue MoveToDelayed
    add(RESERVED, "bury", BURIED, MOVE)
    add(RESERVED, "abandon", READY, MOVE)                       # the owner's connection closed
    add((BURIED, DELAYED), "kick", READY, MOVE)
    add(DELAYED, "ready", READY, MOVE)                          # delay over, dependencies met
    add(DELAYED, "ready", DELAYED, MOVE)                        # dependencies met, delay left
    add(DELAYED, "promote", READY, MOVE)
    add((READY, DELAYED, RESERVED), "wait-children", DELAYED, MOVE)   # core/flows.py
    add((BURIED, COMPLETED), "retry", (READY, DELAYED), MOVE)   # RetryDlq, RetryCompleted
    for s in LIVE:
        add(s, "priority", s, MOVE)
    # timers
    add(RESERVED, "timeout", READY, MOVE)
    add(RESERVED, "timeout", BURIED, RESULT, ("timeout", "fail", "dlq"))
    # finishing
    add(UNFINISHED, "complete", COMPLETED, RESULT)
    add(RESERVED, "fail", (READY, DELAYED), MOVE)               # retried
    for s in (READY, DELAYED, BURIED):
        add(s, "fail", s, MOVE)                                 # counted, not leased: stays
    add(UNFINISHED, "fail", BURIED, RESULT, ("fail", "dlq"))    # failed for good
    add(UNFINISHED, "dlq", BURIED, RESULT)                      # bunqueue Discard
    for op in DELETE_OPS:
        add(LIVE, op, GONE, DELETE)
    return t


#: (state before, operation, state after) -> Row.
TABLE: dict = _rows()


def check(prev: str, op: str, to: str) -> Row:
    """The Row of a change; raises IllegalTransition when the table does not allow it."""
    row = TABLE.get((prev, op, to))
    if row is None:
        raise IllegalTransition(prev, op, to)
    return row


def allowed(prev: str, op: str) -> frozenset:
    """The states `op` may lead to from `prev` (empty when `op` is not allowed there)."""
    return frozenset(n for (p, o, n) in TABLE if p == prev and o == op)


def markdown() -> str:
    """The table as Markdown, states before that share an operation, a state after and effects
    in one row, in the table's order (docs/mapping.md holds it; a test keeps the two equal)."""
    groups: dict = {}
    for (p, o, n), row in TABLE.items():
        groups.setdefault((o, n, row.record, row.events), []).append(p)
    lines = ["| from | operation | to | journal record | events |",
             "| --- | --- | --- | --- | --- |"]
    for (o, n, record, events), ps in groups.items():
        lines.append(f"| {', '.join(ps)} | {o} | {n} | {record} | {', '.join(events) or '–'} |")
    return "\n".join(lines)
