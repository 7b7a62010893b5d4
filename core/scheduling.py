"""Waiting reserves and timed work of the engine (split from core.engine).

`Scheduling` is the base of core.engine.Engine: it keeps the waiters (per-queue FIFO deques, served
longest-waiter first) and the timer heaps, and runs due work in `tick()`. Times are monotonic ms.
Timed work: delayed -> ready, TTR expiry (reserved -> ready, counts a timeout; or failed at
max-attempts), reserve timeouts (TIMED_OUT), the DEADLINE_SOON safety margin of a waiting owner,
the end of a queue pause, result-wait timeouts and TTL eviction (core.outcomes), queue limit
timers (core.limits) and the cron schedules' runs (core.cron, on wall-clock due times).
"""
from __future__ import annotations

from heapq import heapify, heappop, heappush

from .model import DEADLINE_SOON, DELAYED, READY, TIMED_OUT, TOKEN_CHECKED
from .records import Owner, Queue, Waiter, live_job
from .transitions import check

#: The last second of a reservation's TTR is a safety margin (beanstalk protocol, "reserve").
SAFETY_MARGIN_MS = 1000
_INF = float("inf")


def compact_heap(heap: list, live: int, jobs: dict) -> None:
    """Rebuild a lazy heap in place when stale entries outnumber live ones (bounded memory);
    `jobs`: the engine's id -> Job (core.records.live_job)."""
    if len(heap) > 2 * live + 1024:
        heap[:] = [e for e in heap if live_job(jobs, e) is not None]
        heapify(heap)


def _due(heap: list, now: int, jobs: dict):
    """Pop the entries of a lazy (time, id, hver, job id) heap that are due at `now` (ms) and
    yield the jobs whose entry is still current; the heap may grow while this runs."""
    while heap and heap[0][0] <= now:
        e = heappop(heap)
        j = jobs.get(e[3])
        if j is not None and j.hver == e[2]:
            yield j


class Scheduling:
    """Waiters and timers; expects the Engine attributes (queues, clock, heaps, counters)."""

    def _arm(self, at) -> None:
        if at < self._wake_at:
            self._wake_at = at
            if self.wakeup is not None:
                self.wakeup()

    def _wait(self, owner: Owner, qs: list, now: int, timeout_ms, soonest, callback,
              mode: int = TOKEN_CHECKED):
        """Register a Waiter for `owner` on queues `qs` (timeout_ms: None = forever; soonest:
        the owner's earliest reservation deadline or None; mode: the lease token mode of the
        reservation it will make) with its timers; returns it."""
        self._seq += 1
        w = Waiter(owner, qs, None if timeout_ms is None else now + timeout_ms, callback,
                   self._seq, mode)
        owner.waiter = w
        for q in qs:
            q.waiters.append(w)
            q.waiting += 1
            if q.limits is not None and q.n_ready:
                self._limit_blocked(q, now)   # core.limits: wake when the window allows
        self.waiting += 1
        h = self._timers
        if len(h) > 4 * (self.waiting + len(self.result_waiters)) + 1024:   # served: drop
            h[:] = [e for e in h if not e[3].done]
            heapify(h)
        if w.timeout_at is not None:
            heappush(self._timers, (w.timeout_at, w.seq, 0, w))
            self._arm(w.timeout_at)
        if soonest is not None:
            at = soonest - SAFETY_MARGIN_MS
            heappush(self._timers, (at, w.seq, 1, w))
            self._arm(at)
        return w

    def _finish_waiter(self, w: Waiter) -> None:
        w.done = True
        w.owner.waiter = None
        self.waiting -= 1
        for q in w.queues:
            q.waiting -= 1
            dq = q.waiters
            while dq and dq[0].done:
                dq.popleft()
            if len(dq) > 2 * q.waiting + 16:
                live = [x for x in dq if not x.done]
                dq.clear()
                dq.extend(live)
            self._gc(q)

    def cancel_wait(self, owner: Owner) -> bool:
        """Withdraw the owner's waiting reserve without calling its callback; True if one was."""
        w = owner.waiter
        if w is None or w.done:
            return False
        self._finish_waiter(w)
        return True

    def _dispatch(self, q: Queue) -> None:
        """Give ready jobs of `q` to its waiters, longest waiter first."""
        now = self.clock.monotonic_ms()
        if q.paused_until > now:
            return
        dq = q.waiters
        while q.n_ready and dq:
            if q.limits is not None and not self._admits(q, now):
                self._limit_blocked(q, now)   # core.limits: served when the limit allows
                break
            w = dq.popleft()
            if w.done:
                continue
            # The waiter may watch a more urgent ready job elsewhere only if that job is paused or
            # arrived in this same instant; serving from `q` keeps longest-waiter-first exact.
            job = self._pop_ready(q)
            self._to_reserved(job, q, w.owner, now, w.mode)   # first: the queue holds the job,
            self._finish_waiter(w)                     # so dropping the waiter can't GC it
            w.callback(job)

    # ----------------------------------------------------------------- timers
    def next_due(self):
        """Monotonic ms of the earliest timer, or None when there is none. Entries at the top
        of the lazy heaps that tick() would skip (a waiter served or gone, a job moved on)
        are dropped first, so that the gateway does not wake for them: a reserve served at
        once leaves its timeout entry behind, one wake per reserve otherwise."""
        h = self._timers
        while h and h[0][3].done:
            heappop(h)
        jobs = self.jobs
        for h in (self._delayed, self._reserved):
            while h and live_job(jobs, h[0]) is None:
                heappop(h)
        due = _INF
        for h in (self._delayed, self._reserved, self._timers, self._pauses, self._expiry,
                  self._limit_timers):
            if h and h[0][0] < due:
                due = h[0][0]
        if self.cron.heap:
            c = self.cron.due_mono()
            if c is not None and c < due:
                due = c
        self._wake_at = due
        return None if due is _INF else due

    def tick(self) -> None:
        """Run every timer due at the clock's current time."""
        now = self.clock.monotonic_ms()
        row = check(DELAYED, "ready", READY)
        for job in _due(self._delayed, now, self.jobs):
            q = self.queues[job.queue]
            self._leave(job, q)
            self._to_ready(job, q)
            self._emit(job, row, DELAYED, "jobgate")
            self._serve(q)
        for job in _due(self._reserved, now, self.jobs):
            m = job.more
            if m is not None and m.timeout_at and m.timeout_at <= now:
                self._timed_out(job)   # its own timeout, not its lease (core.extras)
                continue
            q = self.queues[job.queue]
            self._leave(job, q)
            self._ttr_expired(job, q)
        h = self._timers
        while h and h[0][0] <= now:
            _, _, kind, w = heappop(h)
            if w.done:
                continue
            if kind == 2:   # a result waiter (core.outcomes)
                self._result_timer(w, now)
                continue
            if kind == 0:
                self._finish_waiter(w)
                w.callback(TIMED_OUT)
                continue
            soonest = self._soonest_deadline(w.owner)
            if soonest is None:
                continue
            if now >= soonest - SAFETY_MARGIN_MS:
                self._finish_waiter(w)
                w.callback(DEADLINE_SOON)
            else:
                heappush(h, (soonest - SAFETY_MARGIN_MS, w.seq, 1, w))
        h = self._pauses
        while h and h[0][0] <= now:
            until, _, name = heappop(h)
            q = self.queues.get(name)
            if q is not None and q.paused_until == until:
                q.paused_until = 0
                self._serve(q)
                if self.shared is not None and q.waiting:
                    self.shared.wait_started()   # shared mode: claim for its reservers
        if self._expiry and self._expiry[0][0] <= now:
            self._expire_due(now)
        h = self._limit_timers
        if h and h[0][0] <= now:
            self._limits_due(now)   # core.limits: a freed slot, the next rate token
        if self.cron.heap:
            self.cron.tick()   # cron schedules (core/cron.py): wall-clock due times
