"""Queues of the engine (split from core.engine; a base of core.engine.Engine): creation on
demand, connection references (using / watching), garbage collection of empty unreferenced
queues in beanstalkd's order, peeks, and pausing.

Units: ms; pause deadlines are monotonic ms. Dialects reach this through core/api.py only.
"""
from __future__ import annotations

from heapq import heapify, heappop, heappush

from .model import COMPLETED
from .records import Job, Queue


def _top(heap: list, jobs: dict):
    """Drop stale entries (the job gone, or its hver changed since the push) from a lazy heap
    of (key, key, hver, job id); return its top job. `jobs`: the engine's id -> Job."""
    while heap:
        e = heap[0]
        j = jobs.get(e[3])
        if j is not None and j.hver == e[2]:
            return j
        heappop(heap)
    return None


class Queues:
    """Queue bookkeeping; expects the Engine attributes (queues, queue_order, pinned, jobs,
    clock, _pauses, _seq) and its `_serve` / `_arm`."""

    # ----------------------------------------------------------------- queues
    def queue(self, name: str) -> Queue:
        """Return the queue `name`, creating it on demand."""
        q = self.queues.get(name)
        if q is None:
            q = self.queues[name] = Queue(name)
            self.queue_order.append(name)
            s = self.queue_settings.get(name) if self.queue_settings else None
            if s is not None and s.limited:
                q.limits = s
        return q

    def attach(self, name: str, role: str) -> Queue:
        """Count a connection reference to queue `name`; role is "using" or "watching"."""
        q = self.queue(name)
        setattr(q, role, getattr(q, role) + 1)
        return q

    def detach(self, name: str, role: str) -> None:
        """Drop a reference taken with attach(); the queue may be garbage-collected."""
        q = self.queues.get(name)
        if q is not None:
            setattr(q, role, getattr(q, role) - 1)
            self._gc(q)

    def _gc(self, q: Queue) -> None:
        if q.name in self.pinned or not q.is_empty() or q.is_referenced():
            return
        if self.queue_settings and q.name in self.queue_settings:
            return   # settings (limits, stall config) keep a queue listed (core/limits.py)
        del self.queues[q.name]
        order = self.queue_order
        i = order.index(q.name)
        last = order.pop()
        if i < len(order):
            order[i] = last

    def paused(self, q: Queue, now: int) -> bool:
        """True while `q` is paused at monotonic time `now` (ms)."""
        return q.paused_until > now

    # ----------------------------------------------------------------- peeks
    def peek(self, id: int) -> Job | None:
        """The live job `id` in a beanstalk-visible state (not completed), or None."""
        job = self.jobs.get(id)
        return None if job is None or job.state is COMPLETED else job

    def peek_ready(self, queue: str) -> Job | None:
        """The next job reserve would take from `queue` (ignores pause)."""
        q = self.queues.get(queue)
        return _top(q.ready, self.jobs) if q is not None and q.n_ready else None

    def peek_delayed(self, queue: str) -> Job | None:
        """The delayed job of `queue` with the least time left."""
        q = self.queues.get(queue)
        return _top(q.delayed, self.jobs) if q is not None and q.n_delayed else None

    def peek_buried(self, queue: str) -> Job | None:
        """The oldest buried job of `queue`."""
        q = self.queues.get(queue)
        return next(iter(q.buried.values())) if q is not None and q.buried else None

    def pause(self, queue: str, delay_ms: int, count: bool = True) -> bool:
        """Pause `queue` for `delay_ms` ms (0 unpauses); False if the queue does not exist.
        `count`: a client's pause (cmd-pause-tube counts it), not another node's installed
        here (core/shared_settings.py)."""
        q = self.queues.get(queue)
        if q is None:
            return False
        now = self.clock.monotonic_ms()
        if count:
            q.pauses += 1
        q.pause_ms = delay_ms
        q.paused_until = now + delay_ms if delay_ms > 0 else 0
        if delay_ms > 0:
            self._seq += 1
            h = self._pauses
            if len(h) > 2 * len(self.queues) + 1024:   # superseded pauses: drop them
                qs = self.queues
                newest: dict = {}   # queue name -> its latest (until, seq, name) entry
                for e in h:
                    if e[2] in qs and qs[e[2]].paused_until == e[0]:
                        if e[2] not in newest or e[1] > newest[e[2]][1]:
                            newest[e[2]] = e
                h[:] = list(newest.values())
                heapify(h)
            heappush(h, (q.paused_until, self._seq, queue))
            self._arm(q.paused_until)
        else:
            self._serve(q)
        return True
