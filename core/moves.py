"""What a worker or an operator does to a job that exists (a base of core.engine.Engine, split
from it): release, bury, touch and delete of a reserved job by its owner (beanstalk; the
other dialects through the port), delete in any state (workq, bunqueue), kick and kick-job of
buried or delayed jobs, and the abandon of every reservation of an owner that went away.

Every change is a row of core/transitions.py, checked before an index is touched and emitted
to the feed after. Units: ms; times are monotonic ms from the engine's clock. Ownership: an
owner that does not hold the job gets False (beanstalkd: NOT_FOUND).
"""
from __future__ import annotations

from heapq import heappush, nsmallest

from .model import BURIED, COMPLETED, DELAYED, DELETED, READY, RESERVED, TOKEN_REQUIRED
from .paging import compact_ids as _compact_ids
from .records import Job, Owner, Queue, live_job
from .scheduling import compact_heap
from .transitions import GONE, check


class Moves:
    """release / bury / touch / delete / kick / kick_job / release_owner (module docstring);
    `self` is the core.engine.Engine."""

    def _revive(self, job: Job) -> None:
        """Void the result of a failed job that is taken out of the dead letters."""
        job.result = None
        job.result_ok = False
        if not job.ttl_ms:
            job.expires_at = 0    # it was only kept for its result

    def release(self, owner: Owner, id: int, priority: int, delay_ms: int) -> bool:
        """Return a job the owner reserved to ready (or delayed for `delay_ms` ms)."""
        job = owner.reserved.get(id)
        if job is None:
            return False
        row = check(RESERVED, "release", DELAYED if delay_ms > 0 else READY)
        q = self.queues[job.queue]
        self._leave(job, q)
        job.priority = priority
        job.delay_ms = delay_ms
        job.releases += 1
        self._to_state(job, q, delay_ms)
        self._emit(job, row, RESERVED, owner.dialect, owner.name)
        if job.state is READY:
            self._serve(q)
        return True

    def bury(self, owner: Owner, id: int, priority: int) -> bool:
        """Bury a job the owner reserved, with a new priority."""
        job = owner.reserved.get(id)
        if job is None:
            return False
        row = check(RESERVED, "bury", BURIED)
        q = self.queues[job.queue]
        self._leave(job, q)
        job.priority = priority
        job.buries += 1
        self._to_buried(job, q)
        self._emit(job, row, RESERVED, owner.dialect, owner.name)
        return True

    def touch(self, owner: Owner, id: int) -> bool:
        """Restart the TTR of a job the owner reserved: deadline = now + its lease length (the
        owner's lock TTL, else the job's ttr_ms)."""
        job = owner.reserved.get(id)
        if job is None:
            return False
        self._renew(job)
        return True

    def _renew(self, job: Job, lease_ms: int = 0) -> None:
        """deadline = now + `lease_ms` (0: the owner's lock TTL, else the job's ttr_ms) for
        reserved `job`, never past its own timeout (timeout_at); a stored lease is stored
        again."""
        row = check(RESERVED, "touch", RESERVED)
        job.hver += 1
        job.deadline = self.clock.monotonic_ms() + (lease_ms or job.owner.ttr_ms or job.ttr_ms)
        if job.more is not None and job.more.timeout_at and job.more.timeout_at < job.deadline:
            job.deadline = job.more.timeout_at
        heappush(self._reserved, (job.deadline, job.id, job.hver, job.id))
        compact_heap(self._reserved, self.n_reserved, self.jobs)
        self._arm(job.deadline)
        if job.lease_mode == TOKEN_REQUIRED and self.journal is not None:
            self._emit(job, row, RESERVED, job.owner.dialect)   # no event: the row only
        elif self.shared is not None:
            # shared mode: the row's lease deadline moves too, so that no other node's
            # rescuer takes the job before its new deadline (core/shared_store.py)
            self.journal.mark(job)

    def delete(self, owner: Owner | None, id: int, dialect: str = "", force: bool = False,
               event: str = "delete") -> bool:
        """Delete job `id` unless another owner has it reserved or it is completed (beanstalk
        sees completed jobs as gone). `force` (workq): delete in any state, whoever holds it."""
        job = self.jobs.get(id)
        if job is None:
            return False
        if not force and (job.state is COMPLETED
                          or (job.state is RESERVED and job.owner is not owner)):
            return False
        prev = job.state
        if owner is not None and prev is RESERVED and not force \
                and self.policy(job).delete_completes:
            return self.complete(job, b"", owner.dialect)   # its producer sees it completed
        row = check(prev, event, GONE)
        q = self.queues[job.queue]
        self._leave(job, q)
        job.state = DELETED
        del self.jobs[id]
        if job.uid is not None:
            self.by_uid.pop(job.uid, None)
        if job.ext is not None:
            self._unindex(job)
        q.deletes += 1
        q.ids_dead += 1   # the listing index drops it lazily (core/paging.py)
        if q.ids_dead > (len(q.ids) >> 1) + 1024:
            _compact_ids(self, q)
        feed = self.feed
        if feed.active:
            if owner is not None:
                feed.emit(job, row.events, prev, owner.dialect, True, owner.name)
            else:
                feed.emit(job, row.events, prev, dialect)
        if prev is COMPLETED and job.ext is not None and job.result_ok \
                and job.ext.get("parentId") is not None:
            self._keep_child_value(job)   # core/flows.py
        if owner is not None and prev is RESERVED and self.dependents:
            # beanstalk's success: its holder deleted it; jobs waiting for it go on
            # (core/flows.py; any other delete leaves them waiting)
            self._deps_done(self.uid_of(job))
        if owner is not None and prev is RESERVED and self.shared is not None:
            # waiters on other nodes, and remembered for a late "wait" note even without
            # extras (core/shared_flows.py)
            self.shared.flows.completed(job)
        self._gc(q)
        return True

    def kick(self, queue: str, bound: int, dialect: str) -> int:
        """Kick up to `bound` jobs of `queue`: buried ones (FIFO) if any, else delayed (soonest)."""
        q = self.queues.get(queue)
        if q is None:
            return 0
        n = 0
        if q.buried:
            while n < bound and q.buried:
                job = next(iter(q.buried.values()))
                self._kick(job, q, dialect)
                n += 1
        elif q.n_delayed:
            # soonest first; jobs parked for dependencies (flow parents) are not kicked
            jobs = self.jobs
            live = [(e, j) for e in q.delayed
                    if (j := live_job(jobs, e)) is not None and not self.is_parked(j)]
            for e, j in nsmallest(bound, live, key=lambda x: x[0]):
                self._kick(j, q, dialect)
                n += 1
        return n

    def _kick(self, job: Job, q: Queue, dialect: str) -> None:
        prev = job.state
        row = check(prev, "kick", READY)
        self._leave(job, q)
        job.kicks += 1
        if job.result is not None:   # a failed (dead-lettered) job revived: its result is void
            self._revive(job)
        self._to_ready(job, q)
        self._emit(job, row, prev, dialect)
        self._serve(q)

    def kick_job(self, id: int, dialect: str) -> bool:
        """Kick one buried or delayed job to ready."""
        job = self.jobs.get(id)
        if job is None or job.state not in (BURIED, DELAYED) or self.is_parked(job):
            return False
        self._kick(job, self.queues[job.queue], dialect)
        return True

    def release_owner(self, owner: Owner) -> None:
        """The owner went away: cancel its wait and return its reservations to ready."""
        self.cancel_wait(owner)
        for job in list(owner.reserved.values()):
            row = check(RESERVED, "abandon", READY)
            q = self.queues[job.queue]
            self._leave(job, q)
            self._to_ready(job, q)
            self._emit(job, row, RESERVED, owner.dialect, owner.name)
            self._serve(q)
