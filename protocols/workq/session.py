"""One workq connection's command handling (sans-IO).

`Session.handle(item)` takes an item from parser.Parser and returns the reply bytes, WAIT (a
lease, result or run must wait: the engine calls back, `on_wake` fires, the I/O layer calls
`take_reply()`) or QUIT (close the connection). Checks run in the reference's order, so a
command with several bad arguments gets the same error line as from workq: first the handler's
parsing (id syntax, numbers, flags), then the controller's validation (UUIDv4, name, ranges,
time), then duplicates (../shared/reference/workq-golden.txt).

workq leases are not owned by the connection: complete, fail and delete work from any
connection, and a connection that closes leaves its leases to their TTR (workq-protocol.txt,
"lease"). Reservations are committed before the lease is answered, so attempts survive a crash.
`connect(info, transport)` is the push-style session of the connection contract
(protocols/contract.py). The engine is reached through its port only (core/api.py).
"""
from __future__ import annotations

from core.api import TIMED_OUT, WAITING, AccessDenied, JobView, Port

from ..sequential import Sequential
from . import replies as R
from .forward import forward
from .inspect import Inspect
from .parser import ARGS, CLOSE, Parser, Reply
from .replies import (ACCESS_DENIED, DUPLICATE_JOB, DUPLICATE_RESULT, FLAG_ERRORS, INVALID_ID,
                      INVALID_NAME, INVALID_PRIORITY, INVALID_TIME, INVALID_TIMEOUT,
                      INVALID_TTL, INVALID_TTR, QUIT, WAIT)
from .values import (MAX_TIMEOUT, MAX_TTL, MAX_TTR, parse_id, parse_int, parse_time,
                     parse_uint, queue_name)

#: Commands whose reply waits for a commit: refused while storage is unavailable (a workq
#: lease is stored, so it is one of them).
NEEDS_COMMIT = frozenset((b"add", b"schedule", b"run", b"lease", b"complete", b"fail",
                          b"delete"))


class WorkqInfo:
    """Server-wide workq state: the port (core.api.Port; an engine is wrapped with Port.of),
    start time (wall ms), connected clients."""

    def __init__(self, engine, started_ms: int | None = None) -> None:
        self.port = Port.of(engine)
        if self.port.shared:   # complete / fail other nodes forward to the leases held here
            from .forward import server
            self.port.serve_forwarded("workq", server(self))
        self.started_ms = self.port.clock.wall_ms() if started_ms is None else started_ms
        self.connections = 0
        self.ops: dict = {}   # command name (bytes) -> times run

    def operations(self) -> dict:
        """{command: times run} since start (protocols/contract.py; /metrics)."""
        return {k.decode(): v for k, v in self.ops.items()}


def _timeout(b: bytes) -> int | None:
    t = parse_uint(b, 32)
    return t if t is not None and t <= MAX_TIMEOUT else None


class Session(Inspect):
    """A workq client connection. `need_commit` is set when a reply must wait for the journal
    commit (the I/O layer waits and clears it). Call `close()` once when the connection ends.

    `principal` (core.api.Principal, None: no access control): the connection's; its commands
    go through `port.scoped(principal)`: a queue name it may not use answers
    `-CLIENT-ERROR Access denied`, a job of such a queue is -NOT-FOUND (docs/operations.md,
    "TLS and access")."""

    def __init__(self, info: WorkqInfo, principal=None) -> None:
        self.info = info
        self.port = info.port.scoped(principal)
        self.owner = self.port.new_owner("workq", margin=False, durable=True)
        self.on_wake = None
        self.need_commit = False
        self._waiter = None     # a ResultWaiter while result / run waits
        self._reply = None
        self._reading = False   # shared mode: an id is being looked up in the database
        self._closed = False
        self.may_forward = self.port.shared   # complete / fail of another node's lease
        info.connections += 1
        self._ops = {
            b"add": self._add, b"schedule": self._schedule, b"run": self._run,
            b"lease": self._lease, b"complete": self._complete, b"fail": self._fail,
            b"delete": self._delete, b"result": self._result, b"inspect": self._inspect,
        }

    # ------------------------------------------------------------------ entry
    def handle(self, item):
        """Run one parser item; returns reply bytes, WAIT or QUIT."""
        if item is CLOSE:
            return QUIT
        if item.__class__ is Reply:
            return item.data
        ops = self.info.ops
        ops[item.name] = ops.get(item.name, 0) + 1
        if self.port.storage_down is not None and item.name in NEEDS_COMMIT:
            return R.STORAGE_UNAVAILABLE
        try:
            return self._ops[item.name](item)
        except AccessDenied:
            return ACCESS_DENIED

    def hold(self) -> None:
        """The current command is answered later by `answer()` (a database read, or another
        node running it: forward.py); WAIT is returned meanwhile."""
        self._reading = True

    def answer(self, reply: bytes) -> None:
        """The answer of a command that `hold()` held (nothing once the connection closed)."""
        self._reading = False
        if not self._closed:
            self._wake(reply)

    def run_forwarded(self, c) -> bytes:
        """Run `c`, a complete, fail or delete another node forwarded here (forward.py), as
        `handle` does but without counting it (the node it was sent to did)."""
        try:
            return self._ops[c.name](c)
        except AccessDenied:
            return ACCESS_DENIED

    def has_reply(self) -> bool:
        """True when a command that returned WAIT already has its answer."""
        return self._reply is not None

    def take_reply(self) -> bytes:
        """The answer of the command that returned WAIT (after `on_wake`)."""
        r, self._reply = self._reply, None
        return r

    def cancel_wait(self) -> bytes | None:
        """The client went away during a wait: withdraw it (a run's job is deleted); returns
        -TIMEOUT, or None when the answer is already there (take_reply())."""
        if self._reply is not None or self._reading:
            return None   # the answer is there, or comes after the database read
        w, self._waiter = self._waiter, None
        if w is not None:
            self.port.cancel_result_wait(w)
        else:
            self.port.cancel_wait(self.owner)
        return R.TIMEOUT

    def close(self) -> None:
        """Connection ended: withdraw a pending wait (leases stay until their TTR)."""
        self._closed = True
        self.cancel_wait()
        self.info.connections -= 1

    def _wake(self, reply: bytes) -> None:
        self._reply = reply
        self._waiter = None
        if self.on_wake is not None:
            self.on_wake()

    # ------------------------------------------------------------ job building
    def _new_job(self, c, ttl_at: int | None, flags: tuple):
        """Parse add / schedule / run arguments in the reference's order. Returns
        ((uid, is v4), name, ttr, ttl, time ms, {flag: value}) or an error reply."""
        a = c.args
        u = parse_id(a[0])
        if u is None:
            return INVALID_ID
        ttr = parse_uint(a[2], 32)
        if ttr is None:
            return INVALID_TTR
        ttl = sched = 0
        if ttl_at is not None:
            ttl = parse_uint(a[ttl_at], 64)
            if ttl is None:
                return INVALID_TTL
            if ttl_at == 3 and len(a) == 6:   # schedule: the time follows the TTL
                sched = parse_time(a[4])
                if sched is None:
                    return INVALID_TIME
        vals = {}
        for f in flags if c.flags else ():
            v = c.flags.get(f)
            if v is not None:
                x = parse_int(v, 32) if f == b"priority" else parse_uint(v, 8)
                if x is None:
                    return INVALID_PRIORITY if f == b"priority" else FLAG_ERRORS[f]
                vals[f] = x
        return u, a[1], ttr, ttl, sched, vals

    def _validate(self, u: tuple, name: bytes, ttr: int):
        """The controller's checks: the queue name (str), or an error reply (bytes)."""
        if not u[1]:
            return INVALID_ID
        q = queue_name(name)
        if q is None:
            return INVALID_NAME
        if ttr == 0 or ttr > MAX_TTR:
            return INVALID_TTR
        return q

    def _enqueue(self, c, scheduled: bool):
        if len(c.flags) > 3:
            return ARGS
        r = self._new_job(c, 3, (b"max-attempts", b"max-fails", b"priority"))
        if r.__class__ is bytes:
            return r
        u, name, ttr, ttl, sched, vals = r
        q = self._validate(u, name, ttr)
        if q.__class__ is bytes:
            return q
        if ttl == 0 or ttl > MAX_TTL:
            return INVALID_TTL
        e = self.port
        now = e.clock.wall_ms()
        start = sched if scheduled else now
        if start + ttl < now:
            return INVALID_TIME
        uid = u[0]
        if e.uid_taken(uid):
            return DUPLICATE_JOB

        def put():
            e.keep(q)
            e.put(q, c.payload, R.to_rank(vals.get(b"priority", 0)), max(0, start - now), ttr,
                  "workq", uid, ttl_ms=ttl, expire_ms=max(1, start + ttl - now),
                  max_attempts=vals.get(b"max-attempts", 0),
                  max_fails=vals.get(b"max-fails", 0), sched_ms=sched,
                  event="schedule" if scheduled else "add")
            self.need_commit = True
            return R.OK
        return self._unless_taken(uid, put) if e.shared else put()

    def _unless_taken(self, uid: str, then):
        """Shared mode: WAIT while the database is asked whether a row has `uid` (workq ids
        are unique across nodes: docs/scaling.md); then -CLIENT-ERROR Duplicate job, or the
        reply of `then()` (WAIT: `then` waits on)."""
        def got(taken) -> None:
            self._reading = False
            if self._closed:
                return
            if isinstance(taken, Exception):
                self._wake(R.STORAGE_UNAVAILABLE)
            elif taken or self.port.uid_taken(uid):   # or put here meanwhile
                self._wake(DUPLICATE_JOB)
            else:
                r = then()
                if r is not WAIT:
                    self._wake(r)
        self._reading = True
        self.port.uids_taken_global([uid], got)
        return WAIT

    # --------------------------------------------------------------- commands
    def _add(self, c):
        return self._enqueue(c, False)

    def _schedule(self, c):
        return self._enqueue(c, True)

    def _run(self, c):
        if len(c.flags) > 1:
            return ARGS
        r = self._new_job(c, None, (b"priority",))
        if r.__class__ is bytes:
            return r
        u, name, ttr, _, _, vals = r
        wait = _timeout(c.args[3])
        if wait is None:
            return INVALID_TIMEOUT
        q = self._validate(u, name, ttr)
        if q.__class__ is bytes:
            return q
        uid = u[0]
        e = self.port
        if e.uid_taken(uid):
            return DUPLICATE_JOB

        def run():
            e.keep(q)
            self._waiter = e.run(q, c.payload, R.to_rank(vals.get(b"priority", 0)), ttr, wait,
                                 uid, "workq", self._run_done)
            self.need_commit = True
            return WAIT
        return self._unless_taken(uid, run) if e.shared else run()

    def _run_done(self, outcome) -> None:
        if outcome is TIMED_OUT:
            self._wake(R.TIMEOUT)
        else:
            self._wake(R.result_reply(outcome.uid, outcome))

    def _lease(self, c):
        if c.flags:
            return ARGS
        wait = _timeout(c.args[-1])
        if wait is None:
            return INVALID_TIMEOUT
        qs = []
        for n in c.args[:-1]:
            q = queue_name(n)
            if q is None:
                return INVALID_NAME
            if q not in qs:
                qs.append(q)
        e = self.port
        for q in qs:
            e.keep(q)
        r = e.reserve(self.owner, qs, wait, self._lease_done)
        if r is TIMED_OUT:
            return R.TIMEOUT
        if r is WAITING:
            return WAIT
        self.need_commit = True
        return R.lease_reply(r.any_uid(), r)

    def _lease_done(self, outcome) -> None:
        if outcome is TIMED_OUT:
            self._wake(R.TIMEOUT)
        else:
            self.need_commit = True
            self._wake(R.lease_reply(outcome.any_uid(), outcome))

    def _lookup(self, arg: bytes, check_v4: bool = True):
        """The id (int) of the job `arg` names, or an error reply (Invalid ID / -NOT-FOUND)."""
        u = parse_id(arg)
        if u is None:
            return INVALID_ID
        id = self.port.find(u[0])
        if check_v4 and not u[1]:
            # workq ids are UUIDv4; another dialect's job (a bunqueue UUIDv7) is still found
            return id if id is not None else INVALID_ID
        return R.NOT_FOUND if id is None else id

    def _finish(self, c, op):
        if c.flags:
            return ARGS
        id = self._lookup(c.args[0])
        if id.__class__ is bytes:
            u = parse_id(c.args[0]) if self.may_forward else None
            if u is not None and id is not ARGS:   # its lease may be on another node
                return forward(self, c, u[0], id)
            return id
        if not op(id, c.payload, "workq"):
            return DUPLICATE_RESULT
        self.need_commit = True
        return R.OK

    def _complete(self, c):
        return self._finish(c, self.port.complete)

    def _fail(self, c):
        return self._finish(c, self.port.fail)

    def _delete(self, c):
        if c.flags:
            return ARGS
        u = parse_id(c.args[0])
        if u is None:
            return INVALID_ID
        e = self.port
        id = e.find(u[0])
        # an id that is not a UUIDv4 (another dialect's job) and names nothing: the reference
        # ignores the error, +OK and nothing deleted
        missing = R.NOT_FOUND if u[1] else R.OK
        if id is None:
            if not e.shared:
                return missing
            if self.may_forward:   # run where it is (forward.py), else its row is deleted
                uid = u[0]
                return forward(self, c, uid, missing, lambda: e.remove_remote(
                    uid, lambda ok: self.answer(R.OK if ok is True else missing)))
            return None   # forwarded here and not here (any more): the sender deletes its row
        e.remove(id, "workq")
        self.need_commit = True
        return R.OK

    def _result(self, c):
        if c.flags:
            return ARGS
        u = parse_id(c.args[0])
        e = self.port
        if u is None or not (u[1] or e.find(u[0]) is not None):
            return INVALID_ID
        wait = _timeout(c.args[1])
        if wait is None:
            return INVALID_TIMEOUT
        id = e.find(u[0])
        if id is None:
            if e.shared:   # not on this node: its row answers (docs/scaling.md)
                self._waiter = e.wait_result_uid(u[0], wait, self._result_done)
                return WAIT
            return R.NOT_FOUND
        r = e.wait_result(id, wait, self._result_done)
        if r is TIMED_OUT:
            return R.TIMEOUT
        if r.__class__ is JobView:
            return R.result_reply(r.uid, r)
        self._waiter = r
        return WAIT

    def _result_done(self, outcome) -> None:
        if outcome is TIMED_OUT:
            self._wake(R.TIMEOUT)
        elif outcome is None or isinstance(outcome, Exception):   # shared mode: gone
            self._wake(R.NOT_FOUND)
        else:
            self._wake(R.result_reply(outcome.uid, outcome))


def connect(info: WorkqInfo, transport) -> Sequential:
    """The push-style session of one workq connection (protocols/contract.py): a Parser
    feeding a Session. A lease, result or run whose client goes away is withdrawn (a run's
    job deleted); leases the connection took stay until their TTR, as in workq."""
    return Sequential(Parser(), Session(info, getattr(transport, "principal", None)), transport,
                      WAIT, QUIT)
