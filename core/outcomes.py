"""How jobs finish, and what hangs on it (split from core.engine; DESIGN.md "The canonical model").

`Outcomes` is a base of core.engine.Engine. It adds to the state machine:

- results: `complete(job, result)` and `fail(job, result)` (workq; later bunqueue ACK / FAIL).
  A completed job leaves every queue index but stays, with its result, until its TTL ends (or
  RESULT_RETENTION_MS when it has none). A job that fails for good is BURIED with its result
  (DESIGN.md: failed = buried, so beanstalk's `kick` revives it).
- max-attempts and max-fails: a TTR expiry at `reserves >= max_attempts` fails the job with an
  empty result; `fail` requeues while `fails < max_fails` (workq-protocol.txt, "Max Fails";
  the reference workq does not enforce it, we do: docs/workq.md).
- result waiters (`wait_result`, `run`): every waiter gets the result when the job finishes.
- TTL eviction in any state (`expires_at`), counted in `evicted_jobs` when the job was unfinished.
- uid lookups: a client uid, or the uid derived from the id for jobs created without one.
- paged listings of a queue's ready and delayed jobs in serve order.

Units: ms everywhere; `expires_at` and timer times are monotonic ms.
"""
from __future__ import annotations

from heapq import heapify, heappop, heappush, nsmallest

from .model import (COMPLETED, RESERVED, TIMED_OUT, Job, Queue, ResultWaiter, derived_uid,
                    parse_derived_uid)

def _text(result: bytes) -> str | None:
    """A failure's text for the history (at most 1000 bytes), or None."""
    return result[:1000].decode("utf-8", "replace") if result else None


#: How long the result of a job without a TTL (e.g. a beanstalk put completed through workq)
#: is kept after it finished, in ms.
RESULT_RETENTION_MS = 3_600_000


class Outcomes:
    """Results, result waiters, TTL eviction, uid lookup; expects the Engine attributes."""

    # ------------------------------------------------------------------ uids
    def uid_of(self, job: Job) -> str:
        """The job's uid as other dialects see it: the client's, or derived from its id."""
        return job.uid if job.uid is not None else derived_uid(job.id)

    def find_uid(self, uid: str) -> Job | None:
        """The live job (any state, completed included) whose uid is `uid` (canonical form)."""
        job = self.by_uid.get(uid)
        if job is not None:
            return job
        id = parse_derived_uid(uid)
        if id is not None:
            job = self.jobs.get(id)
            if job is not None and job.uid is None:
                return job
        return None

    def uid_taken(self, uid: str) -> bool:
        """True when a new job may not take `uid`: a live job has it, or it is a derived uid
        (reserved for jobs created without one; see core.model.derived_uid)."""
        return uid in self.by_uid or parse_derived_uid(uid) is not None

    # ------------------------------------------------------------ expiry
    def _expire_at(self, job: Job, at: int) -> None:
        """Evict `job` at monotonic ms `at` (replaces an earlier expiry)."""
        job.expires_at = at
        h = self._expiry
        heappush(h, (at, job.id))
        if len(h) > 2 * len(self.jobs) + 1024:   # superseded and evicted entries: drop them
            jobs = self.jobs
            h[:] = [e for e in h if e[1] in jobs and jobs[e[1]].expires_at == e[0]]
            heapify(h)
        self._arm(at)

    def _expire_due(self, now: int) -> None:
        h = self._expiry
        jobs = self.jobs
        while h and h[0][0] <= now:
            at, id = h[0]
            heappop(h)
            job = jobs.get(id)
            if job is not None and job.expires_at == at:
                if job.state is RESERVED and job.dialect in self.ttl_waiting_only:
                    self._expire_at(job, max(job.deadline, now + 1))   # after its lease
                    continue
                if job.result is None:
                    self.evicted_jobs += 1
                self.delete(None, id, "jobgate", force=True, event="ttl-evict")

    def _retain(self, job: Job) -> None:
        if not job.expires_at:
            self._expire_at(job, self.clock.monotonic_ms() + RESULT_RETENTION_MS)

    # ------------------------------------------------------------ finishing
    def _finish(self, job: Job, q: Queue, result: bytes, ok: bool, event: str,
                dialect: str) -> None:
        """Give `job` (already out of its index) its result: completed, or failed (= buried)."""
        job.result = result
        job.result_ok = ok
        if ok:
            job.state = COMPLETED
            job.hver += 1
            q.n_done += 1
        else:
            self._to_buried(job, q)
        self._log(job, event, dialect, None, None if ok else _text(result))
        if not ok and event != "dlq":   # the history says when a job enters the dead letters
            self._log(job, "dlq", dialect)
        self._retain(job)
        if job.ext is not None:
            self._unindex(job)
        if ok and self.dependents:
            self._deps_done(self.uid_of(job))
        ws = self.result_waiters.pop(job.id, None)
        if ws:
            run = False
            for w in ws:
                if not w.done:
                    w.done = True
                    run = run or w.run
                    w.callback(job)
            if run:   # workq: a run's job is deleted once it has answered
                self.delete(None, job.id, "jobgate", force=True)

    def complete(self, job: Job, result: bytes, dialect: str) -> bool:
        """Finish `job` successfully with `result` (any state, whoever holds it: workq
        `complete`). False when it already has a result (workq: "Duplicate result")."""
        if job.result is not None or job.state is COMPLETED:
            return False
        q = self.queues[job.queue]
        self._leave(job, q)
        self._finish(job, q, result, True, "complete", dialect)
        return True

    def fail(self, job: Job, result: bytes, dialect: str, backoff_ms: int = 0) -> bool:
        """An explicit failure of `job` with `result` (workq `fail`, bunqueue FAIL). Counts it in
        `fails`; while fails < max_fails (and attempts remain) a leased job goes back to ready
        (delayed by `backoff_ms` ms when > 0), else the job fails for good (buried, with the
        result). False when it already has a result."""
        if job.result is not None or job.state is COMPLETED:
            return False
        job.fails += 1
        q = self.queues[job.queue]
        if job.fails < job.max_fails and not (job.max_attempts
                                              and job.reserves >= job.max_attempts):
            if job.state is RESERVED:
                self._leave(job, q)
                self._log(job, "fail", dialect, None, _text(result))
                if backoff_ms > 0:
                    self._to_delayed(job, q, self.clock.monotonic_ms() + backoff_ms)
                else:
                    self._to_ready(job, q)
            else:
                self._log(job, "fail", dialect, None, _text(result))
            return True
        self._leave(job, q)
        self._finish(job, q, result, False, "fail", dialect)
        return True

    def _ttr_expired(self, job: Job, q: Queue) -> None:
        """TTR ran out on reserved `job` (already out of its index): back to ready, or failed
        with an empty result once `reserves >= max_attempts` (workq, "Max Attempts"). A
        dialect may register `stall_handlers[dialect](job) -> bytes | None` for its jobs: it
        may count the stall, and returns a result to fail the job for good (bunqueue)."""
        job.timeouts += 1
        self.job_timeouts += 1
        self._log(job, "timeout", "jobgate")
        h = self.stall_handlers.get(job.dialect)
        if h is not None:
            result = h(job)
            if result is not None:   # the dialect dead-letters it
                self._finish(job, q, result, False, "fail", "jobgate")
                return
        if job.max_attempts and job.reserves >= job.max_attempts:
            self._finish(job, q, b"", False, "fail", "jobgate")
        else:
            self._to_ready(job, q)

    # ------------------------------------------------------------ waiting
    def _result_waiter(self, job: Job, timeout_ms: int, callback, run: bool) -> ResultWaiter:
        self._seq += 1
        w = ResultWaiter(job.id, callback, self._seq, run)
        self.result_waiters.setdefault(job.id, []).append(w)
        at = self.clock.monotonic_ms() + timeout_ms
        heappush(self._timers, (at, w.seq, 2, w))
        self._arm(at)
        return w

    def wait_result(self, job: Job, timeout_ms: int, callback):
        """The result of `job`: the Job itself when it is finished; TIMED_OUT when it is not and
        `timeout_ms` is 0; else a ResultWaiter whose `callback` later gets the finished Job or
        TIMED_OUT (after `timeout_ms` ms). Every waiter of a job gets its result."""
        if job.result is not None:
            return job
        if timeout_ms <= 0:
            return TIMED_OUT
        return self._result_waiter(job, timeout_ms, callback, False)

    def run(self, queue: str, payload: bytes, priority: int, ttr_ms: int, wait_ms: int,
            uid: str, dialect: str, callback) -> ResultWaiter:
        """workq `run`: put a job and wait for its result. `callback` gets the finished Job, or
        TIMED_OUT when no worker leased it within `wait_ms` ms, or when the lease that holds it
        at that moment reaches its TTR deadline. Either way the job is then deleted. Its TTL
        (eviction after a crash that lost the waiter) is wait_ms + ttr_ms."""
        job = self.put(queue, payload, priority, 0, ttr_ms, dialect, uid,
                       expire_ms=wait_ms + ttr_ms, event="run")
        return self._result_waiter(job, wait_ms, callback, True)

    def cancel_result_wait(self, w: ResultWaiter) -> bool:
        """Withdraw a waiter (its client went away) without calling back; a run's job is
        deleted. True if it was still waiting."""
        if w.done:
            return False
        w.done = True
        ws = self.result_waiters.get(w.job_id)
        if ws is not None:
            ws.remove(w)
            if not ws:
                del self.result_waiters[w.job_id]
        if w.run:
            self.delete(None, w.job_id, "jobgate", force=True)
        return True

    def _result_timer(self, w: ResultWaiter, now: int) -> None:
        """A result waiter's timer fired (tick, timer kind 2)."""
        if w.run and w.phase == 0:
            job = self.jobs.get(w.job_id)
            if job is not None and job.state is RESERVED and job.deadline > now:
                w.phase = 1   # a worker has it: wait for its result until the TTR deadline
                heappush(self._timers, (job.deadline, w.seq, 2, w))
                self._arm(job.deadline)
                return
        self.cancel_result_wait(w)
        w.callback(TIMED_OUT)

    # ------------------------------------------------------------ listings
    def ready_page(self, q: Queue, offset: int, limit: int) -> list[Job]:
        """Ready jobs of `q` in the order they would be served, [offset, offset + limit)."""
        live = (e for e in q.ready if e[3].hver == e[2])
        return [e[3] for e in nsmallest(offset + limit, live)[offset:]]

    def delayed_page(self, q: Queue, offset: int, limit: int) -> list[Job]:
        """Delayed jobs of `q`, soonest first, [offset, offset + limit)."""
        live = (e for e in q.delayed if e[3].hver == e[2])
        return [e[3] for e in nsmallest(offset + limit, live)[offset:]]
