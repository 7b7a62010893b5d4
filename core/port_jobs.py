"""The port's operations on one job, named by its id (a base of core.api.Port): lookups and
snapshots, listings, finishing (complete, fail, dead-letter), moves (requeue, priority, payload,
extras), leases (check, renew) and result waits. Dialects reach these through core.api only.

Units: ms; snapshots are core/model.py values; `self._engine` is the engine behind the port.
"""
from __future__ import annotations

from .leases import NOT_ACTIVE
from .leases import check as _check_lease
from .leases import renewable as _renewable
from .model import COMPLETED, Failure, JobView
from .records import Job, live_job
from .views import adapter, job_view


class JobOps:
    """Operations on one job (see the module docstring); expects `self._engine`."""

    def find(self, uid: str) -> int | None:
        """The id of the live job whose uid (client or derived) is `uid`, or None."""
        job = self._engine.find_uid(uid)
        return None if job is None else job.id

    def job(self, id: int) -> JobView | None:
        """A snapshot of live job `id` (any state), or None."""
        job = self._engine.jobs.get(id)
        return None if job is None else job_view(self._engine, job)

    def lookup(self, uid: str) -> JobView | None:
        """A snapshot of the live job named `uid`, or None."""
        job = self._engine.find_uid(uid)
        return None if job is None else job_view(self._engine, job)

    def priority_counts(self, queue: str, delayed: bool = True) -> dict:
        """Ready (and, with `delayed`, delayed but not blocked) jobs of `queue` per rank."""
        e = self._engine
        q = e.queues.get(queue)
        out: dict = {}
        if q is None:
            return out
        jobs = e.jobs
        for x in (q.ready + q.delayed) if delayed else q.ready:
            j = live_job(jobs, x)
            if j is not None and not (j.ext is not None and j.ext.get("deps")):
                out[j.priority] = out.get(j.priority, 0) + 1
        return out

    def peek(self, id: int) -> JobView | None:
        """Job `id` in a state beanstalk sees (not completed), or None."""
        job = self._engine.peek(id)
        return None if job is None else job_view(self._engine, job)

    def peek_ready(self, queue: str) -> JobView | None:
        """The job reserve would take next from `queue` (ignoring a pause), or None."""
        job = self._engine.peek_ready(queue)
        return None if job is None else job_view(self._engine, job)

    def peek_delayed(self, queue: str) -> JobView | None:
        """The delayed job of `queue` with the least time left, or None."""
        job = self._engine.peek_delayed(queue)
        return None if job is None else job_view(self._engine, job)

    def peek_buried(self, queue: str) -> JobView | None:
        """The oldest buried job of `queue`, or None."""
        job = self._engine.peek_buried(queue)
        return None if job is None else job_view(self._engine, job)

    def jobs(self, queue: str, states=None) -> list:
        """Snapshots of the live jobs of `queue` (of `states` when given), in id order."""
        e = self._engine
        sel = [j for j in e.jobs.values() if j.queue == queue
               and (states is None or j.state in states)]
        sel.sort(key=lambda j: j.id)
        return [job_view(e, j) for j in sel]

    def dead_letters(self, queue: str) -> list:
        """Snapshots of the buried jobs of `queue` (failed ones included), in bury order."""
        e = self._engine
        q = e.queues.get(queue)
        return [] if q is None else [job_view(e, j) for j in q.buried.values()]

    def ready_page(self, queue: str, offset: int, limit: int) -> list:
        """Ready jobs of `queue` in serve order, [offset, offset + limit)."""
        e = self._engine
        q = e.queues.get(queue)
        return [] if q is None else [job_view(e, j) for j in e.ready_page(q, offset, limit)]

    def delayed_page(self, queue: str, offset: int, limit: int) -> list:
        """Delayed jobs of `queue`, soonest first, [offset, offset + limit)."""
        e = self._engine
        q = e.queues.get(queue)
        return [] if q is None else [job_view(e, j) for j in e.delayed_page(q, offset, limit)]

    # ------------------------------------------------------- outcomes
    def check_lease(self, id: int, token: str | None) -> int:
        """Whether `token` may finish job `id` now: LEASE_OK, NOT_ACTIVE (gone or not
        reserved), TOKEN_MISSING or TOKEN_MISMATCH (core/leases.py)."""
        job = self._engine.jobs.get(id)
        return NOT_ACTIVE if job is None else _check_lease(job, token)

    def renew(self, id: int, token: str | None = None, ttr_ms: int = 0,
              extras: dict | None = None) -> bool:
        """Renew the lease of reserved job `id` whoever holds it (a presented token must
        match): deadline = now + `ttr_ms` (0: its TTR). `extras`: set with it (not stored on
        their own). False when it is not reserved or the token does not match."""
        e = self._engine
        job = e.jobs.get(id)
        if job is None or not _renewable(job, token):
            return False
        if extras:
            e.update_ext(job, extras, persist=False)
        return e.touch_job(job, ttr_ms)

    def complete(self, id: int, result: bytes, dialect: str, extras: dict | None = None) -> bool:
        """Finish job `id` with `result` (any state, whoever holds it). `extras`: set first.
        False when it is gone or already has a result."""
        e = self._engine
        job = e.jobs.get(id)
        if job is None or job.result is not None or job.state is COMPLETED:
            return False
        if extras:
            e.update_ext(job, extras, persist=False)
        return e.complete(job, result, dialect)

    def fail(self, id: int, result: bytes, dialect: str, backoff_ms: int = 0,
             failure: Failure | None = None, unrecoverable: bool = False):
        """A failure of job `id` with `result` (bytes): retried (ready, or delayed
        `backoff_ms` ms) while attempts remain, else failed for good (buried with the result).
        `failure` is recorded with the job (core/failures.py). Returns "retried", "dead", or
        False when the job is gone or already has a result."""
        job = self._engine.jobs.get(id)
        if job is None:
            return False
        return self._engine.fail(job, result, dialect, backoff_ms, failure, unrecoverable)

    def dead_letter(self, id: int, result: bytes, dialect: str,
                    extras: dict | None = None) -> bool:
        """Fail job `id` for good now (bunqueue Discard); `extras` set after. False when it is
        gone or finished."""
        e = self._engine
        job = e.jobs.get(id)
        if job is None or not e.dead_letter(job, result, dialect):
            return False
        if extras:
            e.update_ext(job, extras)
        return True

    def remove(self, id: int, dialect: str, event: str = "delete") -> bool:
        """Delete job `id` in any state, whoever holds it (workq delete; bunqueue Cancel,
        removeOn*, Drain, Obliterate, Clean, PurgeDlq: `event`). False when it is gone."""
        return self._engine.delete(None, id, dialect, force=True, event=event)

    def requeue(self, id: int, delay_ms: int, event: str, dialect: str,
                extras: dict | None = None, drop=(), reset_fails: bool = False) -> bool:
        """Move job `id` back to ready (delayed `delay_ms` ms when > 0), its result cleared:
        `event` release (a reserved, ready or delayed job), promote (delayed), retry (buried
        or completed). Then `extras` are set and the keys in `drop` removed; `reset_fails`
        starts its failure count over. False when it is gone; IllegalTransition when `event`
        does not apply to its state."""
        e = self._engine
        job = e.jobs.get(id)
        if job is None:
            return False
        if reset_fails:
            job.fails = 0
        e.requeue(job, delay_ms, event, dialect)
        if extras or drop:
            e.update_ext(job, extras or {}, drop)
        return True

    def promote_jobs(self, queue: str, count: int | None, dialect: str,
                     extras: dict | None = None) -> list:
        """Promote up to `count` (None: every) delayed jobs of `queue` to ready at once,
        oldest first (creation ms, then id); jobs waiting for dependencies stay. Each is a
        `promote` transition (core/transitions.py), served to a waiting reserver of any
        dialect at once; `extras` are set on each. Returns the promoted ids in that order
        (bunqueue PromoteJobs: application/operations/jobPromotion.js promoteJobs)."""
        e = self._engine
        q = e.queues.get(queue)
        if q is None or not q.n_delayed or (count is not None and count <= 0):
            return []
        sel = [j for x in q.delayed
               if (j := live_job(e.jobs, x)) is not None and not e.blocked(j)]
        sel.sort(key=lambda j: (j.created_ms, j.id))
        if count is not None:
            sel = sel[:count]
        for job in sel:
            e.requeue(job, 0, "promote", dialect)
            if extras:
                e.update_ext(job, extras)
        return [j.id for j in sel]

    def change_priority(self, id: int, priority: int, dialect: str) -> bool:
        """Set job `id`'s rank (a ready job moves at once). False when it is gone."""
        job = self._engine.jobs.get(id)
        if job is None:
            return False
        self._engine.change_priority(job, priority, dialect)
        return True

    def replace_payload(self, id: int, payload: bytes, fmt: int) -> bool:
        """Replace job `id`'s payload in place (bunqueue Update). False when it is gone."""
        job = self._engine.jobs.get(id)
        if job is None:
            return False
        self._engine.replace_payload(job, payload, fmt)
        return True

    def update_extras(self, id: int, fields: dict, drop=(), persist: bool = True) -> bool:
        """Set extras `fields` of job `id` and remove the keys in `drop`; `persist`: store with
        the next commit (else with the row's next write). False when it is gone."""
        job = self._engine.jobs.get(id)
        if job is None:
            return False
        self._engine.update_ext(job, fields, drop, persist)
        return True

    # ------------------------------------------------------------ results
    def wait_result(self, id: int, timeout_ms: int, callback):
        """The result of job `id`: its JobView when it is finished (or None when it is gone);
        TIMED_OUT when it is not and `timeout_ms` <= 0; else a handle for cancel_result_wait,
        and `callback` later gets the finished JobView or TIMED_OUT."""
        e = self._engine
        job = e.jobs.get(id)
        if job is None:
            return None
        r = e.wait_result(job, timeout_ms, adapter(self._engine, job_view, callback))
        return job_view(e, r) if r.__class__ is Job else r

    def run(self, queue: str, payload: bytes, priority: int, ttr_ms: int, wait_ms: int,
            uid: str, dialect: str, callback):
        """workq `run`: put a job and wait for its result; `callback` gets the finished
        JobView, or TIMED_OUT (no worker within `wait_ms` ms, or its lease ran out); the job is
        deleted either way. Returns a handle for cancel_result_wait."""
        return self._engine.run(queue, payload, priority, ttr_ms, wait_ms, uid, dialect,
                               adapter(self._engine, job_view, callback))

    def cancel_result_wait(self, handle) -> bool:
        """Withdraw a result wait (its client is gone); a run's job is deleted."""
        if getattr(handle, "remote", False):   # shared mode: a wait for a job not here
            return handle.cancel()
        if handle.moved is not None:   # shared mode: its job left, the database answers
            return self._engine.shared.results.cancel_moved(handle)
        return self._engine.cancel_result_wait(handle)

    # ------------------------------------------------------------ listing
    def job_page(self, queue: str, state: str | None = None, after: int | None = None,
                 before: int | None = None, limit: int = 50):
        """One keyset page of `queue`'s jobs by id (core/paging.py): up to `limit` JobViews
        with id > `after` (the first ones), or with id < `before` (the last ones; a `before`
        past every id gives the last page), or the first page; `state`: one of core.model's
        LIVE_STATES or "failed" (buried with a result), None for all. Returns
        (views, more_before, more_after), or None when the queue does not exist (the flag
        behind the cursor may be a True "maybe": core.paging.Page). Raises
        ValueError for an unknown state, `limit` < 1 or both cursors. Cost: the ids walked
        until `limit` matches, ~30 ns each, or O(count) for a state sparse in the queue."""
        from .paging import page
        e = self._engine
        p = page(e, queue, state, after, before, limit)
        if p is None:
            return None
        return [job_view(e, j) for j in p.jobs], p.more_before, p.more_after

    def failed_count(self, queue: str) -> int:
        """How many buried jobs of `queue` carry a result (failed for good, dead-lettered);
        O(buried jobs of the queue). 0 for an unknown queue."""
        q = self._engine.queues.get(queue)
        return 0 if q is None else sum(1 for j in q.buried.values() if j.result is not None)

    def drain_queue(self, queue: str, dialect: str, event: str = "drain") -> int:
        """Delete the waiting jobs of `queue`: ready and delayed ones, not those waiting for
        dependencies (bunqueue Drain), in id order, each a `drain` transition (`event`).
        O(ready + delayed jobs of the queue). Returns how many; 0 for an unknown queue."""
        e = self._engine
        q = e.queues.get(queue)
        if q is None:
            return 0
        jobs = e.jobs
        sel = [x[3] for x in q.ready if live_job(jobs, x) is not None]
        sel += [x[3] for x in q.delayed
                if (j := live_job(jobs, x)) is not None and not e.blocked(j)]
        sel.sort()
        for id in sel:
            e.delete(None, id, dialect, force=True, event=event)
        return len(sel)
