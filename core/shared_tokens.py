"""Rate limits across nodes (issue 19; docs/scaling.md "Rate limits across nodes"): a bunqueue
rate limit of r per window on a queue admits r reservations per window across every node of
the database, not r per node.

The token bucket of such a queue lives in table `queue_tokens` (migration 0013), one row per
queue: `tokens` (a float), the `rate_max` and `window_ms` it is for, and `refilled_ms` (the
database's wall clock when it was last refilled). A node in shared mode never refills its
own bucket (core.limits.QueueSettings.granted): its engine admits a reservation while the
tokens it took from the database last (`QueueSettings.tokens`) hold a whole one, and each
reservation spends one, as on a single server.

- **take** (claim thread, `take_tokens`, in the claim round before the slots and the claim):
  reservers wait here and the tokens held here do not cover them: in one transaction, the
  queue's row locked (FOR UPDATE), the bucket is refilled by the database's clock, up to
  `rate_max` (a row made for another limit starts full: a new limit), and the node takes as
  many whole tokens as its waiters need, at most what the bucket holds. None there: the
  answer says in how many ms the next one is, and the node takes again then (`due`), not at
  every ready job. The bucket is for the queue's stored limit (its queue_settings row): a
  node whose own values differ gets nothing and asks again after SETTLE_MS, and reads the
  stored settings again when that lasts RELOAD_MS (a settings notification it lost).
- **give back** (`give_tokens`, from the node's 100 ms tick): tokens held here that no
  reserver here can use now (nobody waits, the queue is paused, its waiters' queue has
  nothing ready here and its last claim found no row, or beyond what its concurrency limit
  admits here now (the slots it holds, the jobs it has reserved); never those of a queue the
  running claim round is for) go back to the row (up to `rate_max`; dropped when the row is
  for another limit now), so that a node does not sit on them while another node's workers
  wait; it NOTIFYs `jobgate_slots` with the queue (the channel of slots given back), and a
  node whose take found the bucket empty takes again (`freed`).
- A node takes no token for a queue whose last claim found no row while nothing of it is
  ready here (`emptied`, core/shared.py): a worker waiting on an empty queue does not take
  and give back tokens in turn with the other nodes; the next ready notification, or the
  poll, ends that.

So every reservation spends a token that left the shared bucket once, and the bucket's
outflow is the limit: at most `rate_max` at once and `rate_max` per window after. Tokens a
node holds when it dies or stops are lost (the bucket refills). No I/O in SharedTokens (the
gateway runs the statements on its claim thread). Units: ms.
"""
from __future__ import annotations

import math

import msgpack

from .shared_slots import SLOTS_CHANNEL

#: ms after which a node whose rate limit is not the stored one takes again (by then it has
#: installed the stored one, or committed its own change)
SETTLE_MS = 250
#: take_tokens' `next_ms` for a queue whose stored limit is not the one the node asked under
STALE = -1
#: ms a node's limit may differ from the stored one before it reads the stored settings
#: again (their notification was lost with its listener's session)
RELOAD_MS = 1000
#: the database's clock, wall ms
_NOW = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"


def _stored_limit(cur, queue: str):
    """The (rate_max, window_ms) of `queue`'s stored rate limit (its queue_settings row, which
    every node installs: core/shared_settings.py), or None when it has none."""
    from .limits import DEFAULT_WINDOW_MS
    # shared: a change of the settings waits until the take's transaction ends, so the
    # bucket is reset under the limit this take saw, never under one replaced meanwhile
    cur.execute("SELECT spec FROM queue_settings WHERE queue = %s FOR SHARE", (queue,))
    row = cur.fetchone()
    if row is None:
        return None
    spec = msgpack.unpackb(bytes(row[0]), raw=False, strict_map_key=False)
    rate = spec.get("rateLimit")
    if rate is None:
        return None
    return rate, spec.get("rateLimitDuration") or DEFAULT_WINDOW_MS


def take_tokens(conn, wants: dict) -> dict:
    """Take tokens: `wants` maps a queue to (rate_max, window_ms, wanted). Returns queue ->
    (taken, next_ms): `taken` whole tokens (0 when the bucket holds none, or the limit is
    below 1 and admits nothing) and, when none were taken, the ms until a take may get one
    (None: never, a limit below 1). The bucket is for the queue's stored limit (its row
    read FOR SHARE: no change of it commits while the take runs): a row made for other
    values starts full (a new limit), and a node whose limit is not the stored one (its
    install of a change is on the way or was lost, or its own change is not committed yet)
    gets none: `next_ms` STALE. One transaction per queue, queues in name order.
    Errors: the driver's (psycopg.Error)."""
    out = {}
    cur = conn.cursor()
    try:
        for queue in sorted(wants):
            rate, window, wanted = wants[queue]
            stored = _stored_limit(cur, queue)
            if stored is None or stored[0] != rate or stored[1] != window:
                conn.commit()
                out[queue] = (0, STALE)
                continue
            # the row keeps the values as floats: compared as stored (2**53 + 1 ms is one
            # limit too)
            rate_f, window_f = float(rate), float(window)
            cur.execute("INSERT INTO queue_tokens (queue, tokens, rate_max, window_ms, "
                        f"refilled_ms) VALUES (%s, %s, %s, %s, {_NOW}) "
                        "ON CONFLICT (queue) DO NOTHING", (queue, rate_f, rate_f, window_f))
            cur.execute(f"SELECT tokens, rate_max, window_ms, refilled_ms, {_NOW} "
                        "FROM queue_tokens WHERE queue = %s FOR UPDATE", (queue,))
            tokens, rate0, window0, at, now = cur.fetchone()
            if rate0 != rate_f or window0 != window_f:
                tokens = rate_f   # made for other values: a new limit starts full
            elif now > at:
                tokens = min(rate_f, tokens + (now - at) * rate_f / window_f)
            taken = max(0, min(wanted, math.floor(tokens))) if rate >= 1 else 0
            tokens -= taken
            cur.execute("UPDATE queue_tokens SET tokens = %s, rate_max = %s, window_ms = %s, "
                        "refilled_ms = %s WHERE queue = %s",
                        (tokens, rate_f, window_f, max(now, at), queue))
            conn.commit()
            if taken or rate < 1:
                out[queue] = (taken, None)
            else:
                out[queue] = (0, max(1, math.ceil((1 - tokens) * window_f / rate_f)))
    finally:
        cur.close()
    return out


def give_tokens(conn, back: dict) -> None:
    """Give tokens back: `back` maps a queue to (rate_max, window_ms, tokens); a row made for
    another limit since keeps its count. NOTIFY jobgate_slots for each queue. One
    transaction. Errors: the driver's."""
    cur = conn.cursor()
    try:
        for queue in sorted(back):
            rate, window, n = back[queue]
            cur.execute("UPDATE queue_tokens SET tokens = LEAST(rate_max, tokens + %s) "
                        "WHERE queue = %s AND rate_max = %s AND window_ms = %s",
                        (n, queue, float(rate), float(window)))
            cur.execute(f"SELECT pg_notify('{SLOTS_CHANNEL}', %s)", (queue,))
        conn.commit()
    finally:
        cur.close()


class SharedTokens:
    """One node's side of the shared token buckets (see the module docstring); `node`:
    core.shared.SharedNode. `asked`: queue -> (rate_max, window_ms, wanted) of the take
    running now; `due`: queue -> monotonic ms before which a take would find no token;
    `taken`, `given`: tokens taken and given back (tests, /metrics)."""

    def __init__(self, node) -> None:
        self.node = node
        self.asked: dict = {}
        self.due: dict = {}
        self._noticed: set = set()   # queues given back elsewhere while a take ran
        self._stale: dict = {}       # queue -> monotonic ms its limit was first seen stale
        self.taken = self.given = 0
        for s in node.e.queue_settings.values():   # loaded at start: take them first
            adopt(s)

    def wants(self, more: dict, skip=frozenset(), retry: bool = False) -> dict:
        """queue -> (rate_max, window_ms, wanted) for take_tokens: the queues with a rate
        limit whose waiting reservers (plus `more` a batch reserve asked for, no more than
        the concurrency limit leaves) need more tokens than held here, not paused, not in
        `skip` (queues known to have no claimable rows) unless ready jobs wait here, and not
        `due` later unless `retry` (the poll). A limit held as a float window is compared
        as stored (the row's `window_ms` is a float too)."""
        e = self.node.e
        now = e.clock.monotonic_ms()
        out = {}
        for name, q in e.queues.items():
            s = q.limits
            if s is None or s.rate_max is None or not q.waiting or q.paused_until > now:
                continue
            if name in skip and not q.n_ready:
                continue
            if s.rate_expires_ms is not None and e._expire(s):
                continue
            need = q.waiting + more.get(name, 0)
            if s.concurrency is not None:   # no more than the limit leaves, and while the
                # node waits for a slot (`denied`) no more than the slots held here leave
                cap = (self.node.slots.held.get(name, 0) if name in self.node.slots.denied
                       else math.ceil(s.concurrency))
                need = min(need, max(0, cap - q.n_reserved))
            have = math.floor(s.tokens)
            if need <= have or not retry and self.due.get(name, 0) > now:
                continue
            out[name] = (s.rate_max, s.window_ms(), need - have)
        return out

    def start(self, wants: dict) -> None:
        """A claim round starts after taking `wants` (see wants())."""
        self.asked = wants

    def granted(self, grants) -> bool:
        """The round ended: add `grants` (take_tokens' answer; None when no take ran or it
        failed) to the buckets here and serve the reservers they admit. True when a queue
        got tokens (claim again: its waiters may take rows now). Tokens taken for a limit
        that changed meanwhile are dropped (the row was for the old one). A take that found
        none sets the time of the next token, unless a give-back was noticed while it ran
        (that take may not have seen it: the next round takes again)."""
        asked, self.asked = self.asked, {}
        noticed, self._noticed = self._noticed, set()
        if not grants:
            return False
        e = self.node.e
        now = e.clock.monotonic_ms()
        more = False
        for name, (taken, next_ms) in grants.items():
            q = e.queues.get(name)
            s = None if q is None else q.limits
            rate, window, _ = asked.get(name, (None, None, 0))
            if s is None or s.rate_max != rate or s.window_ms() != window:
                continue
            if next_ms == STALE:   # not the stored limit: ask again soon, and read the
                self.due[name] = now + SETTLE_MS   # stored one if it stays so
                first = self._stale.setdefault(name, now)
                if now - first >= RELOAD_MS:
                    self._stale[name] = now
                    self.node.settings.reload(name)
                continue
            self._stale.pop(name, None)
            if taken:
                s.tokens += taken
                self.taken += taken
                self.due.pop(name, None)
                more = True
                if q.n_ready:
                    e._serve(q)
            elif name in noticed:
                self.due.pop(name, None)
            elif next_ms is not None:
                self.due[name] = now + next_ms
            else:   # a limit below 1: only a changed limit admits anything
                self.due[name] = math.inf
        return more

    def limits_changed(self, name: str) -> None:
        """The limits of queue `name` changed: a take may find tokens at once."""
        self.due.pop(name, None)

    def freed(self, name: str) -> None:
        """A `jobgate_slots` notice: a node gave back slots or tokens of queue `name`; a take
        may find tokens before the bucket refills (also when the take running now found
        none: it may have run before the give-back committed)."""
        self.due.pop(name, None)
        if name in self.asked:
            self._noticed.add(name)

    def forget_due(self) -> None:
        """Notices may have been missed (the poll, a reconnected listener; as
        SharedSlots.forget_denied): a give-back may have left tokens in a bucket, so every
        queue may be taken again, and the take running now cannot set its queues' `due`."""
        self.due.clear()
        self._noticed |= set(self.asked)

    def tick(self):
        """Every 100 ms: the give_tokens argument (queue -> (rate_max, window_ms, tokens))
        for the whole tokens no reserver here can use now, or None; and a claim round asked
        for when a queue's waiters reach the time its next token is due."""
        node = self.node
        e = node.e
        now = e.clock.monotonic_ms()
        if self.due:
            for name, at in list(self.due.items()):
                if at <= now:
                    del self.due[name]
                    q = e.queues.get(name)
                    if q is not None and q.waiting:
                        node.wait_started()
        back = {}
        busy = node.slots.busy   # the queues the running claim round is for
        for name, s in e.queue_settings.items():
            if s.rate_max is None or not s.granted or s.tokens < 1 or name in self.asked \
                    or name in busy:
                continue
            n = math.floor(s.tokens) - self._usable(name, e.queues.get(name), s, now)
            if n > 0:
                s.tokens -= n
                self.given += n
                back[name] = (s.rate_max, s.window_ms(), n)
        return back or None

    def _usable(self, name: str, q, s, now: int) -> int:
        """How many tokens the reservers of queue `q` (settings `s`) waiting here could spend
        now (one each, and what batch reserves asked for more): none while nobody waits,
        the queue is paused, or nothing is ready here and its last claim found no row; with
        a concurrency limit, no more than it admits here now (the slots held here, once
        taken: core.limit_checks._cap) beside the jobs reserved here. Called between claim
        rounds: the round that takes slots follows a round's tokens at once (same
        callback), so a take's tokens are not given back before its slots are taken."""
        node = self.node
        if q is None or not q.waiting or q.paused_until > now:
            return 0
        if not q.n_ready and name in node.emptied:
            return 0
        n = q.waiting + node.more.get(name, 0)   # (a batch reserve's extra jobs)
        if s.concurrency is not None:
            n = min(n, max(0, math.ceil(node.e._cap(q, s.concurrency)) - q.n_reserved))
        return n


def adopt(s) -> None:
    """Shared mode: the rate limit of settings `s` (core.limits.QueueSettings) takes its
    tokens from the database; it starts with none here."""
    if not s.granted:
        s.granted = True
        s.tokens = 0.0


__all__ = ["SharedTokens", "adopt", "give_tokens", "take_tokens"]
