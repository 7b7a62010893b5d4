"""Enforcing queue limits (issue 16; the rules in core/limits.py's docstring): the admission
test a waiting reserve passes, the token a reservation takes, and the limit timers that serve
waiters when a token is due or a concurrency slot is freed. In shared mode the concurrency
limit is applied under the slots this node holds (`slots_held`, core/shared_slots.py).

A base of core.limits.Limits (and so of core.engine.Engine); expects the Engine attributes
queues, clock, queue_settings, _seq, _arm, _serve, shared, slots_held and Limits._expire.
Units: monotonic ms.
"""
from __future__ import annotations

from heapq import heappop, heappush


class LimitChecks:
    """The limit checks and timers of core.limits.Limits (see the module docstring)."""

    def _cap(self, q, c):
        """The concurrency limit `c` of queue `q` as this engine applies it: in shared mode
        no more than the slots this node holds (core/shared_slots.py)."""
        h = self.slots_held
        if h is not None and c is not None:
            n = h.get(q.name, 0)
            if n < c:
                return n
        return c

    def _admits(self, q, now: int) -> bool:
        """True when limited queue `q` may take one more reservation at monotonic `now`."""
        s = q.limits
        c = s.concurrency
        if c is not None and q.n_reserved >= self._cap(q, c):
            return False
        return self._rate_open(s, now)

    def _rate_open(self, s, now: int) -> bool:
        """True when settings `s` have no rate limit or its bucket holds a token at monotonic
        `now` (an ended temporary limit is cleared)."""
        if s.rate_max is None:
            return True
        if s.rate_expires_ms is not None and self._expire(s):
            return True
        s.refill(now)
        return s.tokens >= 1

    def _took(self, q, now: int) -> None:
        """A reservation of limited queue `q` was made: it takes a token."""
        s = q.limits
        if s.rate_max is not None:
            s.refill(now)
            s.tokens -= 1

    def _limit_blocked(self, q, now: int) -> None:
        """`q` has waiters it may not serve now: arm its timer for the next token (or the end
        of a temporary limit); a full concurrency limit waits for a slot (_slot_freed)."""
        s = q.limits
        c = s.concurrency
        # held back by the limit itself (not by shared mode's slots: the rate timer then
        # tells the node when its waiters may use a slot again, core/shared_slots.py)
        if c is not None and q.n_reserved >= c or s.rate_max is None:
            return
        at = s.token_at(now)
        if at is not None and at <= now:
            return   # a token is there: only the slots hold them back (no timer at `now`,
            # which _limits_due would pop again at once, for ever)
        if s.rate_expires_ms is not None:
            end = now + max(0, s.rate_expires_ms - self.clock.wall_ms())
            at = end if at is None else min(at, end)
        if at is not None:
            self._limit_timer(s, at, now)

    def _limits_attached(self, q) -> None:
        """Shared mode: the limits of `q` changed: slots taken under another concurrency
        limit are taken again before they admit more (core.shared_slots.SharedSlots.
        limits_changed), and when reservers wait here a claim round runs (a raised limit
        leaves slots free)."""
        sh = self.shared
        if sh is not None:
            sh.slots.limits_changed(q)
            sh.tokens.limits_changed(q.name)
            if q.waiting:
                sh.wait_started()

    def _slot_freed(self, q) -> None:
        """A reserved job of limited queue `q` left the reserved state while reserves wait:
        serve them at once (the next tick, due now)."""
        s = q.limits
        now = self.clock.monotonic_ms()
        self._limit_timer(s, now, now)

    def _limit_timer(self, s, at: int, now: int) -> None:
        w = s.wake_at
        if w is None or at < w or w < now:
            s.wake_at = at
            self._seq += 1
            heappush(self._limit_timers, (at, self._seq, s))
            self._arm(at)

    def _limits_due(self, now: int) -> None:
        """Run the limit timers due at `now` (from tick)."""
        h = self._limit_timers
        while h and h[0][0] <= now:
            at, _, s = heappop(h)
            if s.wake_at != at:
                continue   # superseded
            s.wake_at = None
            q = self.queues.get(s.queue)
            if q is not None:
                if q.limits is s:
                    self._expire(s)
                self._serve(q)
                if q.waiting and self.shared is not None:
                    self.shared.wait_started()   # they may need concurrency slots now
