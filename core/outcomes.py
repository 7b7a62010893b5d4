"""How jobs finish, and what hangs on it (split from core.engine; DESIGN.md "The canonical model").

`Outcomes` is a base of core.engine.Engine. It adds to the state machine:

- results: `complete(job, result)` and `fail(job, result)` (workq complete / fail, bunqueue
  ACK / FAIL). A completed job leaves every queue index but stays, with its result, until its
  TTL ends (or RESULT_RETENTION_MS when it has none). A job that fails for good is BURIED with
  its result (DESIGN.md: failed = buried, so beanstalk's `kick` revives it).
- failure records (core/failures.py): what a worker reported with a failure (error, stack) and
  the attempts made, kept with the job.
- max-attempts and max-fails: a TTR expiry at `reserves >= max_attempts` fails the job with an
  empty result; `fail` requeues while `fails < max_fails` (workq-protocol.txt, "Max Fails";
  the reference workq does not enforce it, we do: docs/workq.md). The stall policy of the
  job's dialect (core/failures.py JobPolicy) may count the expiry as an attempt and dead-letter.
- result waiters (`wait_result`, `run`): every waiter gets the result when the job finishes;
  they are the feed's per-job watchers (core/events.py `Feed.watchers`).
- TTL eviction in any state (`expires_at`), counted in `evicted_jobs` when the job was unfinished.
- uid lookups: a client uid, or the uid derived from the id for jobs created without one.
- paged listings of a queue's ready and delayed jobs in serve order.

Units: ms everywhere; `expires_at` and timer times are monotonic ms.
"""
from __future__ import annotations

from heapq import heapify, heappop, heappush, nsmallest

from . import failures
from .model import (BURIED, COMPLETED, DELAYED, READY, RESERVED, TIMED_OUT, derived_uid,
                    parse_derived_uid, uuid_shaped)
from .records import Job, Queue, ResultWaiter, live_job
from .transitions import check

#: How long the result of a job without a TTL (e.g. a beanstalk put completed through workq)
#: is kept after it finished, in ms.
RESULT_RETENTION_MS = 3_600_000

_RESULT = object()   # _finish: the failure text is the result


class Outcomes:
    """Results, result waiters, TTL eviction, uid lookup; expects the Engine attributes."""

    # ------------------------------------------------------------------ uids
    def uid_of(self, job: Job) -> str:
        """The job's uid as other dialects see it: the client's, or derived from its id."""
        return job.uid if job.uid is not None else derived_uid(job.id)

    def find_uid(self, uid: str) -> Job | None:
        """The live job (any state, completed included) whose uid is `uid` (canonical form), or
        whose derived uid it is (a job without a uid, or whose uid is not UUID-shaped)."""
        job = self.by_uid.get(uid)
        if job is not None:
            return job
        id = parse_derived_uid(uid)
        if id is not None:
            job = self.jobs.get(id)
            if job is not None and (job.uid is None or not uuid_shaped(job.uid)):
                return job   # its derived uid names it too (workq's view of it)
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
                if job.state is RESERVED and self.policy(job).ttl_spares_reserved:
                    self._expire_at(job, max(job.deadline, now + 1))   # after its lease
                    continue
                if job.result is None:
                    self.evicted_jobs += 1
                self.delete(None, id, "jobgate", force=True, event="ttl-evict")

    def _retain(self, job: Job) -> None:
        if not job.expires_at:
            self._expire_at(job, self.clock.monotonic_ms() + RESULT_RETENTION_MS)

    # ------------------------------------------------------------ finishing
    def _finish(self, job: Job, q: Queue, result: bytes, ok: bool, row, prev: str,
                dialect: str, error=_RESULT) -> None:
        """Give `job` (already out of its index) its result: completed, or failed (= buried).
        `row`: the transition (core.transitions.Row) whose events are written; `error`: the
        failure's text for them (str, bytes or None; default: the result bytes)."""
        job.result = result
        job.result_ok = ok
        pol = self.policies.get(job.dialect)
        if pol is not None and pol.stamp_finish:
            ext = dict(job.ext) if job.ext else {}
            ext["finishedOn"] = self.clock.wall_ms()
            job.ext = ext
        if ok:
            job.state = COMPLETED
            job.hver += 1
            q.n_done += 1
            q.done[job.id] = job
        else:
            self._to_buried(job, q)
        self._emit(job, row, prev, dialect, None,
                   None if ok else (result if error is _RESULT else error))
        self._retain(job)
        if job.ext is not None:
            self._unindex(job)
        if ok and self.dependents:
            self._deps_done(self.uid_of(job))
        elif not ok and job.ext is not None and job.ext.get("parentId") is not None:
            self._child_failed(job, result if error is _RESULT else error)   # core/flows.py
        if ok and self.shared is not None:
            # waiters on other nodes, and remembered for a late "wait" note even without
            # extras (core/shared_flows.py)
            self.shared.flows.completed(job)
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
        if pol is not None and job.id in self.jobs:
            rm = pol.remove_completed if ok else pol.remove_failed
            if rm is not None and rm(job.ext):   # glide-mq removeOnComplete / removeOnFail
                self.delete(None, job.id, dialect, force=True, event="remove")

    def complete(self, job: Job, result: bytes, dialect: str) -> bool:
        """Finish `job` successfully with `result` (any state, whoever holds it: workq
        `complete`). False when it already has a result (workq: "Duplicate result")."""
        if job.result is not None or job.state is COMPLETED:
            return False
        prev = job.state
        row = check(prev, "complete", COMPLETED)
        q = self.queues[job.queue]
        self._leave(job, q)
        self._finish(job, q, result, True, row, prev, dialect)
        return True

    def fail(self, job: Job, result: bytes, dialect: str, backoff_ms: int = 0,
             failure=None, unrecoverable: bool = False):
        """An explicit failure of `job` with `result` (workq `fail`, bunqueue FAIL). Counts it in
        `fails`; while fails < max_fails (and attempts remain, and it is not `unrecoverable`)
        a leased job goes back to ready (delayed by `backoff_ms` ms when > 0), else the job
        fails for good (buried, with the result). `failure` (core.model.Failure or None) is
        recorded with the job (core/failures.py). Returns "retried", "dead", or False when the
        job already has a result."""
        if job.result is not None or job.state is COMPLETED:
            return False
        now = self.clock.wall_ms() if failure is not None else 0
        if failure is not None:
            job.ext = failures.failed(job.ext, failure, job.fails + 1, now)
        job.fails += 1
        q = self.queues[job.queue]
        prev = job.state
        err = result if failure is None else failure.error
        if not unrecoverable and job.fails < job.max_fails and not (
                job.max_attempts and job.reserves >= job.max_attempts):
            if prev is RESERVED:
                if not backoff_ms:
                    pol = self.policies.get(job.dialect)
                    if pol is not None and pol.backoff_on_fail and pol.backoff is not None:
                        backoff_ms = pol.backoff(job, job.fails)   # the creator's backoff
                row = check(prev, "fail", DELAYED if backoff_ms > 0 else READY)
                self._leave(job, q)
                self._to_state(job, q, backoff_ms)
                self._emit(job, row, prev, dialect, None, err)
            else:
                row = check(prev, "fail", prev)
                self._emit(job, row, prev, dialect, None, err)
            if failure is not None:
                run_at = now + (job.ready_at - self.clock.monotonic_ms()
                                if job.state is DELAYED else 0)
                job.ext = failures.trimmed(failures.retried(job.ext, job.fails + 1, now, run_at))
                self._mark(job)
            if job.state is READY:
                self._serve(q)
            return "retried"
        row = check(prev, "fail", BURIED)
        self._leave(job, q)
        self._finish(job, q, result, False, row, prev, dialect, err)
        if failure is not None and job.ext is not None:
            job.ext = failures.dead(failures.trimmed(job.ext), now)
            self._mark(job)
        return "dead"

    def _ttr_expired(self, job: Job, q: Queue) -> None:
        """TTR ran out on reserved `job` (already out of its index): back to ready, or failed
        with an empty result once `reserves >= max_attempts` (workq, "Max Attempts"), or as the
        stall policy of its dialect decides (core/failures.py)."""
        job.timeouts += 1
        self.job_timeouts += 1
        result = failures.stalled(job, self.stall_policy(job), self.clock.wall_ms())
        if result is not None:   # the policy dead-letters it
            self.stall_failures += 1
        elif job.max_attempts and job.reserves >= job.max_attempts:
            result = b""
        if result is not None:
            self._finish(job, q, result, False, check(RESERVED, "timeout", BURIED), RESERVED,
                         "jobgate")
        else:
            self._to_ready(job, q)
            self._emit(job, check(RESERVED, "timeout", READY), RESERVED, "jobgate")
            self._serve(q)

    # ------------------------------------------------------------ waiting
    def _result_waiter(self, job: Job, timeout_ms: int, callback, run: bool) -> ResultWaiter:
        self._seq += 1
        w = ResultWaiter(job.id, callback, self._seq, run)
        self.result_waiters.setdefault(job.id, []).append(w)
        at = w.at = self.clock.monotonic_ms() + timeout_ms
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
                w.at = job.deadline
                heappush(self._timers, (job.deadline, w.seq, 2, w))
                self._arm(job.deadline)
                return
        self.cancel_result_wait(w)
        w.callback(TIMED_OUT)

    # ------------------------------------------------------------ listings
    def ready_page(self, q: Queue, offset: int, limit: int) -> list[Job]:
        """Ready jobs of `q` in the order they would be served, [offset, offset + limit)."""
        jobs = self.jobs
        live = (e for e in q.ready if live_job(jobs, e) is not None)
        return [jobs[e[3]] for e in nsmallest(offset + limit, live)[offset:]]

    def delayed_page(self, q: Queue, offset: int, limit: int) -> list[Job]:
        """Delayed jobs of `q`, soonest first, [offset, offset + limit)."""
        jobs = self.jobs
        live = (e for e in q.delayed if live_job(jobs, e) is not None)
        return [jobs[e[3]] for e in nsmallest(offset + limit, live)[offset:]]
