"""The state machine, driven at random through the port from all three dialects and checked
against a plain model of core/transitions.py (hypothesis stateful testing).

Operations are the ones the dialects issue through core.api.Port: beanstalk put / reserve /
reserve-job / release / bury / touch / delete / kick / kick-job, workq add / lease / complete /
fail / delete, bunqueue push / PULL (with and without a lock) / ACK / FAIL (unrecoverable too) /
Discard / retry and promote and MoveToDelayed (requeue with any event, legal or not) / Cancel and
friends (remove) / ChangePriority, a connection closing, and time passing (TTRs, delays, TTLs,
lock expiry with bunqueue's stall policy).

The model knows nothing of the engine's indexes. It follows the event feed (a subscription:
nothing may be dropped) and holds each job's state. After every step it checks:
- every event is a row of the table (state before, event, state after) and starts from the
  state the model holds for that job: the events of a job arrive in the order of its changes;
- the engine's snapshot of every live job has the model's state, and the counts per state
  (server-wide and per queue) are the model's;
- each job is in exactly one of the engine's indexes (ready heap, delayed heap, a reservation,
  buried, completed), the one of its state; only finished jobs carry a result (this found
  beanstalk reserve-job reviving a dead-lettered job with its failure still attached);
- ids only grow: a new job never takes an id seen before;
- a reserve hands out the most urgent ready job of the queues it watches (rank, then id);
- an operation the table forbids raises IllegalTransition and changes nothing.
"""
from __future__ import annotations

import uuid

from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from core.api import (LEASE_OK, READY, RESERVED, TIMED_OUT, TOKEN_CHECKED, TOKEN_IGNORED,
                      TOKEN_REQUIRED, Failure, IllegalTransition, ManualClock, Port, Reserved)
from core.failures import JobPolicy
from core.records import live_job
from core.transitions import DELETE_OPS, TABLE

QUEUES = ("a", "b", "c")
STATES = ("ready", "delayed", "reserved", "buried", "completed")
#: every (state before, event name, state after) a table row can write
EVENT_TRIPLES = {(p, ev, n) for (p, _, n), row in TABLE.items() for ev in row.events}
#: bunqueue's policy, as its dialect sets it (protocols/bunqueue/info.py)
BQ_POLICY = JobPolicy(stall_counts_attempt=True, max_stalls=3, ttl_spares_reserved=True)


class Machine(RuleBasedStateMachine):
    jobs = Bundle("jobs")
    owners = Bundle("owners")

    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        self.port = Port.create(self.clock, durable=True, history=True)
        self.port.set_policy("bunqueue", BQ_POLICY)
        self.engine = self.port._engine
        self.sub = self.port.subscribe(maxlen=1_000_000)
        self.state: dict[int, str] = {}      # the model: job id -> state
        self.prio: dict[int, int] = {}       # job id -> rank (from the events)
        self.queue_of: dict[int, str] = {}
        self.seen_ids: set = set()
        self.top_id = 0
        self.last_event: dict[int, tuple] = {}   # job id -> (seq, prev, state) of its last event
        self.n_events = 0

    # ------------------------------------------------------------- the model
    def _follow(self) -> None:
        for ev in self.sub.take():
            self.n_events += 1
            key = (ev.prev, ev.kind, ev.state)
            assert key in EVENT_TRIPLES, f"event not in the table: {key}"
            held = self.state.get(ev.job_id, "new")
            last = self.last_event.get(ev.job_id)
            continued = (last is not None and last[0] == ev.seq - 1 and last[1] == ev.prev
                         and last[2] == ev.state)   # a later event of the same row
            assert held == ev.prev or continued, \
                f"job {ev.job_id}: {ev.kind} from {ev.prev}, but it was {held}"
            self.last_event[ev.job_id] = (ev.seq, ev.prev, ev.state)
            if ev.state == "gone":
                self.state.pop(ev.job_id, None)
            else:
                self.state[ev.job_id] = ev.state
                self.prio[ev.job_id] = ev.priority
                self.queue_of[ev.job_id] = ev.queue

    def _new_id(self, id: int) -> int:
        assert id not in self.seen_ids and id > self.top_id, f"id {id} reused"
        self.seen_ids.add(id)
        self.top_id = id
        return id

    def _check_best(self, r, queues) -> None:
        """`r` (just reserved) was the most urgent ready job of `queues` before."""
        ready = [(self.prio[i], i) for i, s in self.state.items()
                 if s == READY and self.queue_of[i] in queues and i != r.id]
        mine = (self.prio[r.id], r.id)
        assert all(mine < x for x in ready), (mine, sorted(ready)[:3])

    # ------------------------------------------------------------ producers
    @rule(target=jobs, q=st.sampled_from(QUEUES), pri=st.integers(0, 3),
          delay=st.sampled_from([0, 0, 500, 3000]), ttr=st.sampled_from([1000, 5000]))
    def beanstalk_put(self, q, pri, delay, ttr):
        return self._new_id(self.port.put(q, b"b", pri - 2**31, delay, ttr, "beanstalk"))

    @rule(target=jobs, q=st.sampled_from(QUEUES), pri=st.integers(-2, 2),
          ttl=st.sampled_from([0, 4000, 60_000]), attempts=st.integers(0, 2),
          fails=st.integers(0, 2))
    def workq_add(self, q, pri, ttl, attempts, fails):
        uid = str(uuid.uuid4())
        return self._new_id(self.port.put(
            q, b"w", -pri, 0, 2000, "workq", uid, ttl_ms=ttl or 60_000,
            expire_ms=ttl or 60_000, max_attempts=attempts, max_fails=fails, event="add"))

    @rule(target=jobs, q=st.sampled_from(QUEUES), pri=st.integers(-2, 2),
          delay=st.sampled_from([0, 0, 1000]), attempts=st.integers(1, 3),
          ttl=st.sampled_from([0, 0, 2500]))
    def bunqueue_push(self, q, pri, delay, attempts, ttl):
        uid = str(uuid.uuid4())
        return self._new_id(self.port.put(q, b"\x01", -pri, delay, 1500, "bunqueue", uid,
                                          ttl_ms=ttl, expire_ms=ttl, max_fails=attempts,
                                          event="push", fmt=1))

    # ------------------------------------------------------------ consumers
    @rule(target=owners, kind=st.sampled_from(["beanstalk", "workq", "bunqueue"]))
    def connect(self, kind):
        if kind == "beanstalk":
            return ("beanstalk", self.port.new_owner("beanstalk"))
        if kind == "workq":
            return ("workq", self.port.new_owner("workq", margin=False, durable=True))
        return ("bunqueue", self.port.new_owner("bunqueue", margin=False))

    @rule(owner=owners, qs=st.lists(st.sampled_from(QUEUES), min_size=1, max_size=3,
                                    unique=True))
    def reserve(self, owner, qs):
        self._follow()
        dialect, o = owner
        mode = TOKEN_CHECKED
        if dialect == "bunqueue":
            mode = TOKEN_REQUIRED if len(qs) % 2 else TOKEN_IGNORED
        r = self.port.reserve(o, qs, 0, None, mode)
        if isinstance(r, Reserved):
            self._follow()
            self._check_best(r, qs)
            assert self.state[r.id] == RESERVED and r.token()
        else:
            assert r is TIMED_OUT or dialect == "beanstalk"

    @rule(owner=owners, q=st.sampled_from(QUEUES), n=st.integers(1, 4))
    def pull_many(self, owner, q, n):
        dialect, o = owner
        got = self.port.reserve_many(o, q, n, TOKEN_REQUIRED, 1200, "w")
        assert len({r.token() for r in got}) == len(got)

    @rule(owner=owners, job=jobs)
    def reserve_job(self, owner, job):
        self.port.reserve_job(owner[1], job)

    @rule(owner=owners, job=jobs, pri=st.integers(0, 3), delay=st.sampled_from([0, 700]))
    def release(self, owner, job, pri, delay):
        self.port.release(owner[1], job, pri - 2**31, delay)

    @rule(owner=owners, job=jobs)
    def bury(self, owner, job):
        self.port.bury(owner[1], job, 5 - 2**31)

    @rule(owner=owners, job=jobs)
    def touch(self, owner, job):
        self.port.touch(owner[1], job)

    @rule(owner=owners, job=jobs)
    def beanstalk_delete(self, owner, job):
        self.port.delete(owner[1], job)

    @rule(q=st.sampled_from(QUEUES), n=st.integers(1, 3))
    def kick(self, q, n):
        self.port.kick(q, n, "beanstalk")

    @rule(job=jobs)
    def kick_job(self, job):
        self.port.kick_job(job, "beanstalk")

    @rule(owner=owners)
    def close(self, owner):
        self.port.release_owner(owner[1])

    # ------------------------------------------------------------- outcomes
    @rule(job=jobs, ok=st.booleans())
    def finish(self, job, ok):
        if ok:
            self.port.complete(job, b"r", "workq")
        else:
            self.port.fail(job, b"e", "workq")

    @rule(job=jobs, token=st.sampled_from([None, "bad", "own"]), unrecoverable=st.booleans(),
          backoff=st.sampled_from([0, 400]))
    def bunqueue_fail(self, job, token, unrecoverable, backoff):
        v = self.port.job(job)
        if token == "own" and v is not None and v.lease is not None:
            token = v.lease.token
        if self.port.check_lease(job, token) == LEASE_OK:
            self.port.fail(job, b"boom", "bunqueue", backoff, Failure("boom", ["at x"]),
                           unrecoverable)

    @rule(job=jobs)
    def bunqueue_ack(self, job):
        v = self.port.job(job)
        token = v.lease.token if v is not None and v.lease is not None else None
        if self.port.check_lease(job, token) == LEASE_OK:
            assert self.port.complete(job, b"\xc0", "bunqueue", {"resultFmt": 1})

    @rule(job=jobs)
    def discard(self, job):
        self.port.dead_letter(job, b"", "bunqueue", {"dlqReason": "unknown"})

    @rule(job=jobs, event=st.sampled_from(["release", "promote", "retry", "ready", "kick",
                                           "complete"]),
          delay=st.sampled_from([0, 600]))
    def requeue(self, job, event, delay):
        """Any event, legal or not: the table decides, in one place."""
        self._follow()
        before = self.state.get(job)
        target = "delayed" if delay > 0 else "ready"
        legal = before is not None and (before, event, target) in TABLE
        try:
            ok = self.port.requeue(job, delay, event, "bunqueue")
        except IllegalTransition:
            assert not legal, (before, event, target)
            self._follow()
            assert self.state.get(job) == before   # nothing changed
            return
        assert legal or (before is None and ok is False), (before, event, target)

    @rule(job=jobs, event=st.sampled_from(DELETE_OPS))
    def remove(self, job, event):
        self.port.remove(job, "bunqueue", event)

    @rule(job=jobs, pri=st.integers(-3, 3))
    def change_priority(self, job, pri):
        self.port.change_priority(job, pri, "bunqueue")

    @rule(job=jobs)
    def renew(self, job):
        self.port.renew(job, None, 0, {"lastHeartbeat": 1})

    # ----------------------------------------------------------------- time
    @rule(ms=st.sampled_from([1, 300, 1000, 2500, 6000]))
    def advance(self, ms):
        self.clock.advance(ms)
        self.port.tick()

    # ----------------------------------------------------------- invariants
    @invariant()
    def model_matches_the_engine(self):
        self._follow()
        assert self.sub.dropped == 0
        e = self.engine
        live = {id: j.state for id, j in e.jobs.items()}
        assert live == self.state
        stats = self.port.stats()
        counts = {s: 0 for s in STATES}
        for s in self.state.values():
            counts[s] += 1
        assert (stats.ready, stats.delayed, stats.reserved, stats.buried, stats.completed) == (
            counts["ready"], counts["delayed"], counts["reserved"], counts["buried"],
            counts["completed"])
        for name in self.port.queue_names():
            q = self.port.queue(name)
            mine = [self.state[i] for i, qn in self.queue_of.items()
                    if qn == name and i in self.state]
            assert (q.ready, q.delayed, q.reserved, q.buried, q.completed) == tuple(
                mine.count(s) for s in STATES), name

    @invariant()
    def each_job_in_exactly_one_index(self):
        e = self.engine
        where: dict[int, list] = {}
        for q in e.queues.values():
            for x in q.ready:
                if live_job(e.jobs, x) is not None:
                    where.setdefault(x[3], []).append("ready")
            for x in q.delayed:
                if live_job(e.jobs, x) is not None:
                    where.setdefault(x[3], []).append("delayed")
            for id in q.buried:
                where.setdefault(id, []).append("buried")
        for j in e.jobs.values():
            if j.state == "reserved":
                assert j.owner is not None and j.owner.reserved.get(j.id) is j
                where.setdefault(j.id, []).append("reserved")
            elif j.state == "completed":
                where.setdefault(j.id, []).append("completed")
        assert {id: [j.state] for id, j in e.jobs.items()} == where

    @invariant()
    def only_finished_jobs_have_a_result(self):
        for j in self.engine.jobs.values():
            finished = j.state == "completed" or (j.state == "buried" and j.result is not None)
            assert (j.result is not None) == finished or j.state == "buried", (j.id, j.state)


Machine.TestCase.settings = settings(max_examples=400, stateful_step_count=60, deadline=None,
                                     suppress_health_check=[HealthCheck.too_slow])
TestTransitions = Machine.TestCase


def test_every_row_of_the_table_is_reachable_from_new():
    """The table has no dead rows: every state it names can be reached from `new`."""
    reach = {"new"}
    changed = True
    while changed:
        changed = False
        for (p, _, n) in TABLE:
            if p in reach and n not in reach:
                reach.add(n)
                changed = True
    assert {p for (p, _, _) in TABLE} <= reach
