"""One beanstalk connection's state and command handling (sans-IO).

`Session.handle(cmd)` takes a command tuple from parser.Parser and returns the reply bytes, or
WAIT when a reserve must wait (the engine will call back; then `take_reply()`), or QUIT.
`connect(info, transport)` wraps a Parser and a Session into the push-style session of the
connection contract (protocols/contract.py, protocols/sequential.py). Replies and their
conditions follow the beanstalk spec (../shared/specs/beanstalk-protocol.txt) and beanstalkd
1.12 (../shared/reference). Per-connection state: the used tube, the watch list (swap-remove
order, like beanstalkd's ms_*), the owner that holds this connection's reservations,
producer/worker flags. The engine is reached through its port only (core/api.py).

The global commands (stats, stats-tube, list-tubes, peek*, stats-job, kick, kick-job, delete,
pause-tube) use the port's callback forms (core/port_global.py): on a single server the
callback runs at once and the reply is returned as before; on a node in shared mode it may
come when the database answers, and the command then returns WAIT as a waiting reserve does
(`_later`; docs/mapping.md, "Shared mode").
"""
from __future__ import annotations

from core.api import DEADLINE_SOON, TIMED_OUT, WAITING, AccessDenied

from ..sequential import Sequential

from .parser import COUNTED, ERROR, Parser
from .stats import ServerInfo, to_rank, yaml_list

WAIT = object()
QUIT = object()

DRAINING = b"DRAINING\r\n"
NOT_FOUND = b"NOT_FOUND\r\n"
R_TIMED_OUT = b"TIMED_OUT\r\n"
R_DEADLINE_SOON = b"DEADLINE_SOON\r\n"
OUT_OF_MEMORY = b"OUT_OF_MEMORY\r\n"
INTERNAL_ERROR = b"INTERNAL_ERROR\r\n"

#: While storage is unavailable (Port.storage_down), what beanstalkd 1.12 answers when its
#: binlog cannot be written (prot.c: walresvput / walresvupdate fail -> OUT_OF_MEMORY, walwrite
#: fails -> INTERNAL_ERROR, kick_jobs counts 0, kick_job answers NOT_FOUND). The command is
#: not run: nothing changes (docs/beanstalk.md, "Storage unavailable").
STORAGE_REFUSED = {b"put": OUT_OF_MEMORY, b"release": OUT_OF_MEMORY, b"delete": INTERNAL_ERROR,
                   b"bury": INTERNAL_ERROR, b"kick": b"KICKED 0\r\n", b"kick-job": NOT_FOUND}


def _found(word: bytes, job) -> bytes:
    p = job.payload
    return b"%s %d %d\r\n%s\r\n" % (word, job.id, len(p), p)


class Session:
    """A beanstalk client connection bound to an engine and the server-wide ServerInfo.

    `on_wake` (callable, set by the I/O layer) is called when a waiting reserve has its answer.
    `need_commit` is set when a reply must not be sent before the journal commits (a put,
    delete, release, bury or kick succeeded, or a reserve handed out a job whose row is not yet
    committed); the I/O layer waits for the commit and clears it.
    Call `close()` exactly once when the connection ends: it releases the reservations.

    `principal` (core.api.Principal, None: no access control): the connection's; its commands
    go through `port.scoped(principal)`, and a command naming a tube it may not use, or a job
    of such a tube, answers NOT_FOUND (docs/operations.md, "TLS and access"). The connection
    starts on tube `default` whatever the principal (beanstalkd's start state); using it
    answers NOT_FOUND when it is not allowed.
    """

    def __init__(self, info: ServerInfo, principal=None) -> None:
        self.info = info
        self.port = e = info.port.scoped(principal)
        self.owner = e.new_owner("beanstalk")
        self.used = "default"
        self.watch = ["default"]
        info.port.attach("default", "using")   # a reference count, not a use of the tube
        info.port.attach("default", "watching")
        self.producer = False
        self.worker = False
        self.on_wake = None
        self.need_commit = False
        self._result = None
        self._later_reply = None   # the answer of a command that waited for the database
        self._querying = False     # such a command waits (shared mode: core/port_global.py)
        self._shared = info.port.shared   # a node in shared mode (docs/scaling.md)
        info.connections += 1
        info.total_connections += 1
        self._ops = {
            b"put": self._put, b"reserve": self._reserve,
            b"reserve-with-timeout": self._reserve_timeout, b"reserve-job": self._reserve_job,
            b"delete": self._delete, b"release": self._release, b"bury": self._bury,
            b"touch": self._touch, b"use": self._use, b"watch": self._watch,
            b"ignore": self._ignore, b"peek": self._peek,
            b"peek-ready": lambda c: self._peek_q(e.peek_ready_global),
            b"peek-delayed": lambda c: self._peek_q(e.peek_delayed_global),
            b"peek-buried": lambda c: self._peek_q(e.peek_buried_global),
            b"kick": self._kick, b"kick-job": self._kick_job,
            b"stats": lambda c: self._later(e.stats_global, self.info.stats),
            b"stats-job": self._stats_job, b"stats-tube": self._stats_tube,
            b"list-tubes": lambda c: self._later(e.queue_names_global, yaml_list),
            b"list-tube-used": lambda c: b"USING %s\r\n" % self.used.encode(),
            b"list-tubes-watched": lambda c: yaml_list(self.watch),
            b"pause-tube": self._pause, b"quit": lambda c: QUIT,
        }

    # ------------------------------------------------------------------ entry
    def handle(self, cmd: tuple):
        """Run one parsed command; returns reply bytes, WAIT or QUIT.

        The bytes may be empty: a put over max_job_size is counted when its line is read and
        answers JOB_TOO_BIG only after its body has been skipped (a later command tuple).
        """
        op = cmd[0]
        if op is ERROR:
            return cmd[1]
        if op is COUNTED:
            self.info.cmds[cmd[1]] += 1
            if cmd[3]:
                self._set_producer()
            if cmd[4]:
                self.port.burn_id()   # beanstalkd made the job before reading its body
            return cmd[2]
        cmds = self.info.cmds
        if op in cmds:
            cmds[op] += 1
        else:   # kick-job, reserve-job, quit: not in stats, counted for /metrics
            more = self.info.more_cmds
            more[op] = more.get(op, 0) + 1
        if self.port.storage_down is not None and op in STORAGE_REFUSED:
            return self._refused(op, cmd)
        try:
            return self._ops[op](cmd)
        except AccessDenied:   # a tube this connection may not use is invisible
            return NOT_FOUND

    def _refused(self, op: bytes, cmd: tuple) -> bytes:
        """The reply to `cmd` while storage is unavailable (STORAGE_REFUSED). As beanstalkd,
        an unknown job is still NOT_FOUND and a put still uses an id; DRAINING comes first."""
        p = self.port
        if op == b"put":
            self._set_producer()
            p.burn_id()        # beanstalkd made the job before its binlog refused it
            return DRAINING if p.draining else OUT_OF_MEMORY
        if op in (b"delete", b"release", b"bury") and p.job(cmd[1]) is None:
            return NOT_FOUND
        return STORAGE_REFUSED[op]

    def has_reply(self) -> bool:
        """True when a reserve that returned WAIT already has its answer (take_reply())."""
        return self._result is not None or self._later_reply is not None

    def take_reply(self) -> bytes:
        """The reply of a reserve (or of a command answered by the database, see _later)
        that returned WAIT, once `on_wake` has been called."""
        if self._later_reply is not None:
            r, self._later_reply = self._later_reply, None
            return r
        r, self._result = self._result, None
        return self._reserve_reply(r)

    def cancel_wait(self) -> bytes | None:
        """Abandon a waiting reserve (client half-closed): returns TIMED_OUT, or None if the
        reserve already has its answer (then take_reply() gives it), or when the command waits
        for the database (it cannot be withdrawn: its answer comes)."""
        if self._querying:
            return None
        if self.port.cancel_wait(self.owner):
            return R_TIMED_OUT
        return None

    def unfinished_put(self) -> None:
        """The connection ended inside a put's body: beanstalkd had already counted the put
        and made its job (using an id) when the line arrived, so do the same."""
        self.info.cmds[b"put"] += 1
        self.port.burn_id()

    def close(self) -> None:
        """Connection ended: release reservations and drop tube references."""
        e = self.port
        e.release_owner(self.owner)
        e.detach(self.used, "using")
        for t in self.watch:
            e.detach(t, "watching")
        self.watch = []
        info = self.info
        info.connections -= 1
        if self.producer:
            info.producers -= 1
        if self.worker:
            info.workers -= 1

    # --------------------------------------------------------------- commands
    def _set_producer(self):
        if not self.producer:
            self.producer = True
            self.info.producers += 1

    def _put(self, c):
        self._set_producer()
        p = self.port
        if p.draining:
            p.burn_id()   # beanstalkd made the job before refusing it
            return DRAINING
        _, pri, delay, ttr, body = c
        id = p.put(self.used, body, pri - 2147483648, delay * 1000, (ttr or 1) * 1000,
                   "beanstalk")
        self.need_commit = True
        return b"INSERTED %d\r\n" % id

    def _set_worker(self):
        if not self.worker:
            self.worker = True
            self.info.workers += 1

    def _wake(self, result) -> None:
        self._result = result
        if self.on_wake is not None:
            self.on_wake()

    def _reserve_reply(self, r) -> bytes:
        if r is TIMED_OUT:
            return R_TIMED_OUT
        if r is DEADLINE_SOON:
            return R_DEADLINE_SOON
        if not r.committed:   # its row is not stored yet: answer after the commit
            self.need_commit = True
        return _found(b"RESERVED", r)

    def _do_reserve(self, timeout_ms):
        self._set_worker()
        r = self.port.reserve(self.owner, self.watch, timeout_ms, self._wake)
        if r is WAITING:
            return WAIT
        return self._reserve_reply(r)

    def _reserve(self, c):
        return self._do_reserve(None)

    def _reserve_timeout(self, c):
        return self._do_reserve(c[1] * 1000)

    def _reserve_job(self, c):
        self._set_worker()
        job = self.port.reserve_job(self.owner, c[1])
        if job is not None:
            return self._reserve_reply(job)
        if not self._shared:
            return NOT_FOUND

        def again(_):   # shared mode: a job waiting in the database was brought here
            r = self.port.reserve_job(self.owner, c[1])
            return NOT_FOUND if r is None else self._reserve_reply(r)
        return self._later(lambda cb: self.port.reach_ids([c[1]], cb), again)

    def _mutated(self, ok: bool, reply: bytes) -> bytes:
        if ok:
            self.need_commit = True
            return reply
        return NOT_FOUND

    def _delete(self, c):
        if not self._shared:   # the hot path of a single server: no callback
            return self._mutated(self.port.delete(self.owner, c[1]), b"DELETED\r\n")
        return self._later(lambda cb: self.port.delete_global(self.owner, c[1], cb),
                           lambda ok: self._mutated(ok, b"DELETED\r\n"))

    def _release(self, c):
        ok = self.port.release(self.owner, c[1], to_rank(c[2]), c[3] * 1000)
        return self._mutated(ok, b"RELEASED\r\n")

    def _bury(self, c):
        return self._mutated(self.port.bury(self.owner, c[1], to_rank(c[2])), b"BURIED\r\n")

    def _touch(self, c):
        return b"TOUCHED\r\n" if self.port.touch(self.owner, c[1]) else NOT_FOUND

    def _use(self, c):
        name = c[1]
        if name != self.used:
            self.port.attach(name, "using")
            self.port.detach(self.used, "using")
            self.used = name
        return b"USING %s\r\n" % name.encode()

    def _watch(self, c):
        name = c[1]
        if name not in self.watch:
            self.port.attach(name, "watching")   # first: AccessDenied leaves the list as it was
            self.watch.append(name)
        return b"WATCHING %d\r\n" % len(self.watch)

    def _ignore(self, c):
        name = c[1]
        w = self.watch
        if name in w:
            if len(w) < 2:
                return b"NOT_IGNORED\r\n"
            i = w.index(name)
            last = w.pop()
            if i < len(w):
                w[i] = last
            self.port.detach(name, "watching")
        return b"WATCHING %d\r\n" % len(w)

    @staticmethod
    def _found_job(job) -> bytes:
        return NOT_FOUND if job is None else _found(b"FOUND", job)

    def _peek(self, c):
        return self._later(lambda cb: self.port.peek_global(c[1], cb), self._found_job)

    def _peek_q(self, fn):
        used = self.used
        return self._later(lambda cb: fn(used, cb), self._found_job)

    def _kicked(self, n: int) -> bytes:
        if n:
            self.need_commit = True
        return b"KICKED %d\r\n" % n

    def _kick(self, c):
        used = self.used
        return self._later(lambda cb: self.port.kick_global(used, c[1], "beanstalk", cb),
                           self._kicked)

    def _kick_job(self, c):
        return self._later(lambda cb: self.port.kick_job_global(c[1], "beanstalk", cb),
                           lambda ok: self._mutated(ok, b"KICKED\r\n"))

    def _stats_job(self, c):
        return self._later(lambda cb: self.port.peek_global(c[1], cb),
                           lambda job: NOT_FOUND if job is None else self.info.stats_job(job))

    def _stats_tube(self, c):
        return self._later(lambda cb: self.port.queue_global(c[1], cb),
                           lambda q: NOT_FOUND if q is None else self.info.stats_tube(q))

    def _pause(self, c):
        return self._later(lambda cb: self.port.pause_global(c[1], c[2] * 1000, cb),
                           lambda ok: b"PAUSED\r\n" if ok else NOT_FOUND)

    def _later(self, start, reply):
        """Run `start(callback)`, a port operation with a callback form (core/port_global.py),
        and answer `reply(result)`: at once when the callback runs at once (single node: the
        reply is returned as before), else WAIT and the reply later through `on_wake` /
        take_reply, as for a waiting reserve (the replies behind it are held in order).
        INTERNAL_ERROR when the database failed (the callback got an Exception)."""
        sync = [True, None]

        def answer(x) -> bytes:
            if isinstance(x, Exception):
                return INTERNAL_ERROR
            try:
                return reply(x)
            except AccessDenied:
                return NOT_FOUND

        def cb(x) -> None:
            if sync[0]:
                sync[1] = (x,)
                return
            self._later_reply = answer(x)
            self._querying = False
            if self.on_wake is not None:
                self.on_wake()
        start(cb)
        sync[0] = False
        if sync[1] is not None:
            return answer(sync[1][0])
        self._querying = True
        return WAIT


def connect(info: ServerInfo, transport) -> Sequential:
    """The push-style session of one beanstalk connection (protocols/contract.py): a Parser
    feeding a Session. A connection that ends inside a put's body counts that put, as
    beanstalkd does; a waiting reserve whose client half-closes answers TIMED_OUT."""
    parser = Parser(info.max_job_size, info.line_max)
    sess = Session(info, getattr(transport, "principal", None))

    def on_end():
        if parser.in_body():
            sess.unfinished_put()
    return Sequential(parser, sess, transport, WAIT, QUIT, on_end)
