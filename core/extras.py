"""Job extras that not every dialect has (split from core.engine; DESIGN.md "The canonical model",
row "extras"): deduplication keys, dependencies, LIFO order, owner-agnostic requeue and lock
renewal, batch reservation, in-place changes of priority, payload and extras.

`Extras` is a base of core.engine.Engine. bunqueue is the first dialect to use it, but nothing
here knows its wire format: `job.ext` is a plain dict whose keys the dialect chooses, with three
keys the engine reads itself:

- ``uniqueKey`` (str): while the job is unfinished, no other job of its queue may take the key
  (`dedup_job`); the key is released when the job finishes or is deleted.
- ``deps`` (list of uid str): unmet dependencies. Such a job waits in DELAYED with the far
  deadline BLOCKED_MS and becomes ready when the last dependency completes (`_deps_done`),
  or is deleted by the owner that reserved it (beanstalk's `delete` after `reserve`, its only
  word for success). A dependency that is deleted otherwise (cancelled, deleted while not
  reserved, evicted) leaves it waiting. Flows build on this: core/flows.py.
- ``lifo`` (true): among equal priorities, this job is served before older ones.
- ``resultFmt`` (1): the result is a MessagePack value (a bunqueue ACK result).
- ``timeout`` (ms): the job's own processing limit (bunqueue's `timeout` option). A reservation
  of it ends that many ms after it began whatever its lease (a lock TTL renewed by heartbeats
  does not extend it), and the job then fails with its dialect policy's `timeout_error`
  (core/failures.py JobPolicy), retried after the policy's backoff while attempts remain. The
  engine then writes ``timedOutLease``: the token of the lease that the timeout ended (a late
  outcome presented with it is answered as ignored, bunqueue's isRetiredOutcome).

`job.ext` is never changed in place: every change replaces the dict (`update_ext`), so a
snapshot (core.model.JobView) may share it.

Units: ms; deadlines are monotonic ms.
"""
from __future__ import annotations

from heapq import heappush

from .model import BURIED, COMPLETED, DELAYED, READY, RESERVED, TOKEN_CHECKED
from .records import Job, Owner
from .transitions import NEW, check

#: How far in the future a job waiting for dependencies is parked (ms, about 100 years).
BLOCKED_MS = 100 * 365 * 86_400_000


class Extras:
    """Dedup keys, dependencies and owner-agnostic operations; expects the Engine attributes
    (jobs, queues, journal, clock, unique, dependents) and its state-entry methods."""

    # ------------------------------------------------------------- indexes
    def index_extras(self, job: Job) -> None:
        """Register the job's dedup key and unmet dependencies (put, recovery)."""
        ext = job.ext
        key = ext.get("uniqueKey")
        if key is not None and job.result is None:
            self.unique[(job.queue, key)] = job
        for d in ext.get("deps") or ():
            self.dependents.setdefault(d, set()).add(job.id)

    def _unindex(self, job: Job) -> None:
        """The job finished or is gone: release its dedup key (called for jobs with ext)."""
        key = job.ext.get("uniqueKey")
        if key is not None and self.unique.get((job.queue, key)) is job:
            del self.unique[(job.queue, key)]

    def _unlink_deps(self, job_id: int, uids) -> None:
        """Job `job_id` no longer waits for the jobs `uids` in the dependents index (they
        were dropped, or the job leaves this engine: core/shared.py spill)."""
        dependents = self.dependents
        for u in uids:
            s = dependents.get(u)
            if s is not None:
                s.discard(job_id)
                if not s:
                    del dependents[u]

    def dedup_job(self, queue: str, key: str) -> Job | None:
        """The unfinished job of `queue` holding dedup key `key`, or None."""
        return self.unique.get((queue, key))

    def blocked(self, job: Job) -> bool:
        """True while the job waits for dependencies."""
        return job.ext is not None and bool(job.ext.get("deps"))

    def dependency_met(self, uid: str) -> bool:
        """True when the job `uid` has completed (or is gone: removed after completing)."""
        job = self.find_uid(uid)
        return job is None or job.state is COMPLETED

    def _deps_done(self, uid: str) -> None:
        """Job `uid` completed: jobs that waited only for it become ready."""
        ids = self.dependents.pop(uid, None)
        if not ids:
            return
        for id in sorted(ids):
            job = self.jobs.get(id)
            if job is None or job.ext is None:
                continue
            deps = job.ext.get("deps")
            if not deps or uid not in deps:
                continue
            deps = [d for d in deps if d != uid]
            ext = dict(job.ext)
            if deps:
                ext["deps"] = deps
                job.ext = ext
                self._mark(job)
                continue
            del ext["deps"]
            job.ext = ext
            if job.state is DELAYED and job.ready_at >= self.clock.monotonic_ms() + BLOCKED_MS // 2:
                self.deps_released(job)   # core/flows.py
            else:
                self._mark(job)

    def _mark(self, job: Job) -> None:
        j = self.journal
        if j is not None:
            j.mark(job)

    # --------------------------------------------------------- state moves
    def requeue(self, job: Job, delay_ms: int, event: str, dialect: str) -> None:
        """Move `job` from any state the table allows for `event` (release, ready, promote,
        retry: reserved by anyone, delayed, buried, completed) back to ready, or delayed for
        `delay_ms` ms; its result, if any, is cleared."""
        prev = job.state
        row = check(prev, event, DELAYED if delay_ms > 0 else READY)
        q = self.queues[job.queue]
        self._leave(job, q)
        if job.result is not None:
            job.result = None
            job.result_ok = False
            if not job.ttl_ms:
                job.expires_at = 0   # it was only kept for its result
            if job.ext is not None and job.ext.get("uniqueKey") is not None:
                self.unique.setdefault((job.queue, job.ext["uniqueKey"]), job)
        self._to_state(job, q, delay_ms)
        self._emit(job, row, prev, dialect)
        if job.state is READY:
            self._serve(q)

    def touch_job(self, job: Job, ttr_ms: int = 0) -> bool:
        """Renew a reservation whoever holds it: deadline = now + `ttr_ms` (0: its lease
        length), never past the job's own timeout; the job's TTR is not changed. False when
        the job is not reserved."""
        if job.state is not RESERVED:
            return False
        self._renew(job, ttr_ms)
        return True

    def _start_timeout(self, job: Job, now: int, timeout_ms) -> None:
        """`job` was just reserved at monotonic `now` and has its own processing timeout
        (ext ``timeout``, ms): the reservation ends at now + timeout_ms whatever its lease."""
        at = now + int(timeout_ms)
        job.timeout_at = at
        if at < job.deadline:
            job.deadline = at

    def _timed_out(self, job: Job) -> None:
        """The own timeout of reserved `job` passed (tick): a failure with the policy's
        timeout_error, retried after the policy's backoff or failed for good (dlqReason
        ``timeout``), as bunqueue 2.9.5's job timeout scheduler does (application/background/
        timeouts.js: fail(id, 'Job timeout exceeded', timeout))."""
        from .leases import token_str
        from .model import Failure
        pol = self.policy(job)
        text = pol.timeout_error
        backoff = pol.backoff(job, job.fails + 1) if pol.backoff is not None else 0
        self.job_timeouts += 1
        lease = token_str(job.token)
        outcome = self.fail(job, text.encode(), "jobgate", backoff, Failure(text, None))
        fields = {"timedOutLease": lease}
        if outcome == "dead":
            fields["dlqReason"] = "timeout"
        self.update_ext(job, fields)

    def reserve_many(self, owner: Owner, queue: str, n: int,
                     mode: int = TOKEN_CHECKED) -> list[Job]:
        """Reserve up to `n` ready jobs of `queue` at once (not while it is paused; within its
        rate and concurrency limits); `mode`: the leases' token mode (core.leases)."""
        q = self.queues.get(queue)
        out: list[Job] = []
        if q is None or not q.n_ready:
            return out
        now = self.clock.monotonic_ms()
        if q.paused_until > now or q.limits is not None and q.waiting:
            return out   # a limited queue serves its waiters first (core.limits)
        while len(out) < n:
            if q.limits is not None and not self._admits(q, now):
                break
            job = self._pop_ready(q)
            if job is None:
                break
            self._to_reserved(job, q, owner, now, mode)
            out.append(job)
        return out

    def change_priority(self, job: Job, priority: int, dialect: str) -> None:
        """Set the job's canonical rank; a ready job moves to its new place at once."""
        prev = job.state
        row = check(prev, "priority", prev)
        if prev is READY:
            q = self.queues[job.queue]
            self._leave(job, q)
            job.priority = priority
            self._to_ready(job, q)
            self._emit(job, row, prev, dialect)
            self._serve(q)
        else:
            job.priority = priority
            self._emit(job, row, prev, dialect)

    def replace_payload(self, job: Job, payload: bytes, fmt: int) -> None:
        """Replace the payload in place (bunqueue Update); stored with the next commit."""
        job.payload = payload
        job.fmt = fmt
        j = self.journal
        if j is not None:
            j.payload_replaced(job)

    def update_ext(self, job: Job, fields: dict, drop=(), persist: bool = True) -> None:
        """Set extras `fields` of `job` and remove the keys in `drop` (a new dict: `ext` is
        never changed in place). `persist`: store them with the next commit; else they are
        stored whenever the job's row is written next."""
        ext = dict(job.ext) if job.ext else {}
        ext.update(fields)
        for k in drop:
            ext.pop(k, None)
        job.ext = ext
        if persist:
            self._mark(job)

    def dead_letter(self, job: Job, result: bytes, dialect: str) -> bool:
        """Fail `job` for good now (bunqueue Discard): buried with `result`, event `dlq`.
        False when it already finished."""
        if job.state is COMPLETED or job.state is BURIED and job.result is not None:
            return False
        prev = job.state
        row = check(prev, "dlq", BURIED)
        q = self.queues[job.queue]
        self._leave(job, q)
        self._finish(job, q, result, False, row, prev, dialect)
        return True

    def put_plain(self, queue: str, items: list, ttr_ms: int, dialect: str, max_fails: int,
                  event: str) -> list[Job]:
        """Create ready jobs of priority rank 0 in `queue` from `items`, a list of
        (payload bytes, fmt, uid str, ext dict | None) with no dependencies, dedup keys,
        delay or TTL: the same as put() for each, in one pass (bunqueue PUSHB).
        Returns the jobs, in order."""
        out: list[Job] = []
        if not items:
            return out
        row = check(NEW, event, READY)
        now = self.clock.wall_ms()
        q = self.queues.get(queue) or self.queue(queue)
        jobs = self.jobs
        by_uid = self.by_uid
        ready = q.ready
        j = self.journal
        if j is not None and queue not in j.known_queues:
            j.queue_seen(queue)
        feed = self.feed
        fast = j is not None and not feed.subs and not feed.counters \
            and feed.sinks == (j.on_events,)
        if fast:
            events = j.events if j.history else None
            dirty = j.dirty
        nid = self.next_id
        for payload, fmt, uid, ext in items:
            job = Job(nid, queue, payload, 0, ttr_ms, 0, now, dialect, uid)
            jobs[nid] = job
            by_uid[uid] = job
            job.fmt = fmt
            job.max_fails = max_fails
            job.hver = 1
            if ext is not None:
                job.ext = ext
                heappush(ready, (0, self.lifo_key(job), 1, nid))
            else:
                heappush(ready, (0, nid, 1, nid))
            if fast:
                if events is not None:
                    events.append((nid, queue, dialect, event, now, 0, uid, 0, len(payload),
                                   None, None))
                dirty[nid] = job
            out.append(job)
            nid += 1
        n = len(out)
        q.ids.extend(range(self.next_id, nid))   # the listing index (core/paging.py)
        self.next_id = nid
        q.total_jobs += n
        self.total_jobs += n
        q.n_ready += n
        if fast:
            j.records += n
            if not j.pending:
                j.pending = True
                if j.on_pending is not None:
                    j.on_pending()
        else:   # subscribers, or memory mode: each job through the feed
            for job in out:
                self._emit(job, row, NEW, dialect, at=now)
        self._serve(q)
        return out

    def lifo_key(self, job: Job) -> int:
        """The tie-break key among equal priorities: the id, negated for LIFO jobs."""
        ext = job.ext
        return -job.id if ext is not None and ext.get("lifo") else job.id

