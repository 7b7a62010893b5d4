"""Concurrency limits across nodes (issue 19; docs/scaling.md "Concurrency limits across
nodes"): a bunqueue concurrency limit of n on a queue allows n active jobs across every node
of the database, not n per node.

A node reserves jobs of a queue with a concurrency limit only under **slots** it holds in
table `queue_slots` (migration 0012): its engine admits a reservation while the queue's
reserved jobs here are fewer than min(limit, slots held) (core.limits.Limits._cap). Slots
are taken in the database before they are used and given back after they are freed, so
the sum over the nodes never passes the limit:

- **take** (claim thread, `take_slots`): reservers wait here for such a queue and every slot
  is used: in one transaction, under the queue's lock row (`node = ''`, FOR UPDATE), the node
  counts the slots the other nodes hold (rows whose `until_ms` lapsed are deleted first) and
  takes what the limit leaves, up to what its waiters need. A grant is never below what the
  node has reserved. The grant is installed on the loop after the commit, then the waiting
  reservers are served and a claim round follows.
- **keep** (`keep_slots`, from the node's 100 ms timer, `SharedSlots.tick`): a node gives
  back the slots its reserved jobs and waiting reservers do not use (held above reserved +
  the waiters that its rate limit lets reserve), lowering its own count first and the row
  after; a give-back NOTIFYs `jobgate_slots` with the queue, so that a node waiting for a
  slot takes it. A node with more jobs reserved than slots (reserved before the limit was
  set) raises its count and its row to them. Every second the node's rows are written again
  with `until_ms` SLOT_LEASE_MS ahead: the slots of a node that died lapse after that.

The database's count of a node's slots is never below the node's own: a take commits before
the node uses its grant; a give-back lowers the node's count before its row, and is not sent
for a queue a claim round runs for; a refresh writes the rows as the node holds them, but
only raises the row of a queue a take runs for (GREATEST), so a lost give-back or a take
whose answer was lost is repaired within a second. `until_ms` is the
database's clock (clock_timestamp()), so the nodes' clocks need not agree. Units: ms. No I/O
in SharedSlots (the gateway runs the statements on its claim thread).
"""
from __future__ import annotations

import math


#: the channel of slots given back (payload: the queue): a node whose take got fewer slots
#: than it wanted takes again only after such a notice, a change of the queue's limits, or
#: the poll, not at every ready job of the queue
SLOTS_CHANNEL = "jobgate_slots"
#: ms a node's slots count after its last refresh (it refreshes them every second)
SLOT_LEASE_MS = 5000
#: ms between two refreshes of a node's slot rows
SLOT_REFRESH_MS = 1000
#: the database's clock, wall ms
_NOW = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"


def slot_limit(concurrency) -> int:
    """The number of reservations a concurrency limit (int or float) admits: the engine admits
    while reserved < limit, so a limit of 2.5 admits 3; none below 1 (0 for a limit <= 0)."""
    if concurrency <= 0:
        return 0
    return math.ceil(concurrency)


def take_slots(conn, node: str, wants: dict) -> dict:
    """Take slots for `node`: `wants` maps a queue to (limit, wanted, used): its slot limit,
    the slots the node wants in all, the jobs it has reserved. Returns queue -> (allowed,
    row): `allowed`, the reservations the node may now hold (up to `wanted`, at most what
    the limit leaves beside the others' live rows, 0 when they fill it), and `row`, the
    count written (max(used, allowed): the others count the jobs it has, even above the
    limit); a row below the node's previous one NOTIFYs the queue. One transaction per
    queue, queues in name order. Errors: the driver's (psycopg.Error)."""
    out = {}
    cur = conn.cursor()
    try:
        for queue in sorted(wants):
            limit, wanted, used = wants[queue]
            cur.execute("INSERT INTO queue_slots (queue, node, held, until_ms) "
                        "VALUES (%s, '', 0, 0) ON CONFLICT DO NOTHING", (queue,))
            cur.execute("SELECT held FROM queue_slots WHERE queue = %s AND node = '' "
                        "FOR UPDATE", (queue,))
            cur.execute("DELETE FROM queue_slots WHERE queue = %s AND node <> '' "
                        f"AND node <> %s AND until_ms <= {_NOW}", (queue, node))
            cur.execute("SELECT COALESCE(sum(held) FILTER (WHERE node <> %s), 0)::bigint, "
                        "COALESCE(sum(held) FILTER (WHERE node = %s), 0)::bigint "
                        "FROM queue_slots WHERE queue = %s AND node <> ''",
                        (node, node, queue))
            others, before = cur.fetchone()
            allowed = max(0, min(wanted, limit - others))
            row = max(used, allowed)
            if row > 0:
                cur.execute("INSERT INTO queue_slots (queue, node, held, until_ms) "
                            f"VALUES (%s, %s, %s, {_NOW} + %s) ON CONFLICT (queue, node) "
                            "DO UPDATE SET held = EXCLUDED.held, until_ms = EXCLUDED.until_ms",
                            (queue, node, row, SLOT_LEASE_MS))
            else:
                cur.execute("DELETE FROM queue_slots WHERE queue = %s AND node = %s",
                            (queue, node))
            if row < before:
                cur.execute(f"SELECT pg_notify('{SLOTS_CHANNEL}', %s)", (queue,))
            conn.commit()
            out[queue] = (allowed, row)
    finally:
        cur.close()
    return out


def keep_slots(conn, node: str, exact: dict, floor: dict, known) -> tuple:
    """Write `node`'s slots: `exact` (queue -> count, 0 deletes the row: give-backs) as they
    are, `floor` (queue -> count: refreshes, reservations above the slots) as the greater of
    the row and the count; every row of the node gets `until_ms` SLOT_LEASE_MS ahead; with
    `known` (a set, on a full refresh) the node's rows of other queues are deleted (a take
    whose answer was lost). NOTIFY jobgate_slots for each queue whose count went down.
    Returns (how many queues were notified, the queues written whose row was not there: it
    lapsed, and another node may have taken its slots). Errors: the driver's
    (psycopg.Error)."""
    cur = conn.cursor()
    try:
        # locked: a take that would delete a lapsed row of this node waits, then sees it
        # refreshed; one that deleted it first shows here as a row missing (lapsed)
        cur.execute("SELECT queue, held FROM queue_slots WHERE node = %s FOR UPDATE",
                    (node,))
        before = dict(cur.fetchall())
        up = [(q, n) for q, n in exact.items() if n > 0]
        if floor:
            cur.execute(
                "INSERT INTO queue_slots (queue, node, held, until_ms) "
                f"SELECT q, %s, n, {_NOW} + %s FROM unnest(%s::text[], %s::int[]) AS t(q, n) "
                "ON CONFLICT (queue, node) DO UPDATE "
                "SET held = GREATEST(queue_slots.held, EXCLUDED.held)",
                (node, SLOT_LEASE_MS, list(floor), list(floor.values())))
        if up:
            cur.execute(
                "INSERT INTO queue_slots (queue, node, held, until_ms) "
                f"SELECT q, %s, n, {_NOW} + %s FROM unnest(%s::text[], %s::int[]) AS t(q, n) "
                "ON CONFLICT (queue, node) DO UPDATE SET held = EXCLUDED.held",
                (node, SLOT_LEASE_MS, [q for q, _ in up], [n for _, n in up]))
        gone = [q for q, n in exact.items() if n <= 0]
        if known is not None:
            gone += [q for q in before if q not in known and q not in exact]
        if gone:
            cur.execute("DELETE FROM queue_slots WHERE node = %s AND queue = ANY(%s)",
                        (node, gone))
        cur.execute(f"UPDATE queue_slots SET until_ms = {_NOW} + %s WHERE node = %s",
                    (SLOT_LEASE_MS, node))
        lower = sorted(q for q, n in before.items()
                       if q in gone or (q in exact and exact[q] < n))
        if lower:
            cur.execute(f"SELECT count(pg_notify('{SLOTS_CHANNEL}', q)) "
                        "FROM unnest(%s::text[]) AS t(q)", (lower,))
        conn.commit()
        written = {q for q, n in exact.items() if n > 0} | set(floor)
        return len(lower), sorted(written - set(before))
    finally:
        cur.close()


class SharedSlots:
    """One node's slots (see the module docstring); `node`: core.shared.SharedNode.
    `held` (queue -> the reservations this node may hold) is the engine's `slots_held`;
    `rows` (queue -> the count in this node's database row: at least `held` and the
    queue's reserved jobs here); `limits` (queue -> the slot limit a take saw: a changed
    limit is taken again); `taking`: the queues a take runs for; `busy`: the queues the
    claim round running now is for (not given back meanwhile); `stored`: the database may
    hold rows of this node; `taken`, `given`: counters (tests, /metrics)."""

    def __init__(self, node) -> None:
        self.node = node
        self.held: dict = {}
        node.e.slots_held = self.held
        self.rows: dict = {}
        self.limits: dict = {}
        self.taking: set = set()
        self.busy: set = set()
        self._asked: dict = {}       # queue -> (slot limit, wanted) of the running take
        self.denied: set = set()     # queues whose last take got less than wanted
        self._noticed: set = set()   # queues given back elsewhere while a take ran
        self.rate_held: set = set()  # queues whose waiters the rate limit held back
        self.stored = False
        self.taken = self.given = 0
        self._refreshed = 0

    def _reserving(self, q, s, now: int) -> int:
        """The waiting reservers of limited queue `q` (settings `s`) that could reserve now
        as far as its pause and rate limit go (all or none)."""
        if q.paused_until > now or not self.node.e._rate_open(s, now):
            return 0
        return q.waiting

    def limits_changed(self, q) -> None:
        """The limits of queue `q` changed (engine, any node's change): a slot count taken
        under another concurrency limit admits nothing more until it is taken again (a
        lowered limit then counts the other nodes' rows; the row stays as it is)."""
        s = q.limits
        c = None if s is None or s.concurrency is None else slot_limit(s.concurrency)
        self.denied.discard(q.name)
        if self.limits.get(q.name) != c:
            self.held.pop(q.name, None)

    def freed(self, queue: str) -> bool:
        """A `jobgate_slots` notice: a node gave back slots of `queue`. True when reservers
        wait here for it (take again)."""
        self.denied.discard(queue)
        if queue in self.taking:   # the running take may not have seen it
            self._noticed.add(queue)
        q = self.node.e.queues.get(queue)
        return q is not None and q.waiting > 0

    def forget_denied(self) -> None:
        """Notices may have been missed (the poll, a reconnected listener): every queue may
        be taken again, and the take running now cannot deny its queues (as `emptied`)."""
        self.denied.clear()
        self._noticed |= self.taking

    def lapsed(self, queues) -> None:
        """This node's rows of `queues` had lapsed (written again by keep_slots): other
        nodes may have taken those slots, so the counts held here admit nothing more until
        taken again."""
        e = self.node.e
        for name in queues:
            self.held.pop(name, None)
            self.limits.pop(name, None)
            self.denied.discard(name)
            q = e.queues.get(name)
            if q is not None and q.waiting:
                self.node.wait_started()

    def wants(self, more: dict, skip: set, retry: bool = False) -> dict:
        """queue -> (limit, wanted, used) for take_slots: the queues with a concurrency limit
        whose waiting reservers (plus `more` a batch reserve asked for) need more slots than
        held here, not paused, not held back by their rate limit (remembered in
        `rate_held`: tick asks for a round when the token is due), not `denied` unless
        `retry` (the poll), and not in `skip` (queues known to have no claimable rows)
        unless ready jobs wait here for a slot. The caller marks the round (start)."""
        e = self.node.e
        now = e.clock.monotonic_ms()
        held = self.held
        out = {}
        for name, q in e.queues.items():
            s = q.limits
            if s is None or s.concurrency is None or not q.waiting:
                continue
            if name in skip and not q.n_ready or name in self.denied and not retry:
                continue
            n = self._reserving(q, s, now)
            if not n:
                if q.paused_until <= now:
                    self.rate_held.add(name)
                continue
            limit = slot_limit(s.concurrency)
            wanted = min(limit, q.n_reserved + n + more.get(name, 0))
            if wanted > held.get(name, 0):
                out[name] = (limit, wanted, q.n_reserved)
        return out

    def start(self, demand: dict, wants: dict) -> None:
        """A claim round starts for `demand` (queue -> jobs) after taking `wants` (queue ->
        (limit, wanted, used))."""
        self.taking = set(wants)
        self.busy = self.taking.union(demand)
        self._asked = {name: (w[0], w[1]) for name, w in wants.items()}

    def granted(self, grants) -> bool:
        """The round ended: install `grants` (take_slots' queue -> (allowed, row); None when
        no take ran or it failed) and serve the reservers they admit. True when a queue may
        hold more than before (claim again: its waiters may take rows now)."""
        self.taking = set()
        self.busy = set()
        asked, self._asked = self._asked, {}
        noticed, self._noticed = self._noticed, set()
        if not grants:
            return False
        e = self.node.e
        more = False
        for name, (allowed, row) in grants.items():
            q = e.queues.get(name)
            if row > 0:
                self.rows[name] = row
                self.stored = True
            else:
                self.rows.pop(name, None)
            s = None if q is None else q.limits
            now = None if s is None or s.concurrency is None else slot_limit(s.concurrency)
            limit, wanted = asked.get(name, (now, 0))
            if limit != now:
                # taken under a limit that changed meanwhile: only its row counts
                self.held.pop(name, None)
                more = more or (q is not None and q.waiting > 0)
                continue
            if allowed > self.held.get(name, 0):
                more = True
                self.taken += 1
            if allowed > 0:
                self.held[name] = allowed
            else:
                self.held.pop(name, None)
            self.limits[name] = limit
            if allowed < wanted and name not in noticed:   # the others hold the rest:
                self.denied.add(name)                        # wait for a notice
            else:
                self.denied.discard(name)
            if q is not None and q.limits is not None and q.n_ready:
                e._serve(q)
        return more

    def tick(self, now_ms: int):
        """Every 100 ms (`now_ms`: the caller's monotonic ms, for the refresh interval): the
        keep_slots arguments (exact, floor, known) when the database must learn something,
        else None. Raises the row of a queue with more jobs reserved here than it counts
        (reserved before the limit came, or past it); gives back what is not used (see the
        module docstring; not for a queue a round runs for): the row comes down to the
        reserved jobs plus the waiters the slots held here admit; every SLOT_REFRESH_MS
        refreshes every row as counted here (with `known`: the queues this node counts or is
        taking; a queue a take runs for only raised)."""
        e = self.node.e
        mono = e.clock.monotonic_ms()
        held, rows = self.held, self.rows
        exact, floor = {}, {}
        if self.rate_held:   # waiters their rate limit held back: ask for a round when due
            for name in list(self.rate_held):
                q = e.queues.get(name)
                s = None if q is None else q.limits
                if q is None or s is None or not q.waiting:
                    self.rate_held.discard(name)
                elif self._reserving(q, s, mono):
                    self.rate_held.discard(name)
                    self.node.wait_started()
        for name, s in e.queue_settings.items():
            if s.concurrency is None:
                continue
            q = e.queues.get(name)
            if q is not None and q.n_reserved > rows.get(name, 0):
                rows[name] = floor[name] = q.n_reserved
        for name, n in list(rows.items()):
            if name in self.busy:
                continue
            q = e.queues.get(name)
            s = None if q is None else q.limits
            if s is None or s.concurrency is None:
                target = 0   # no limit any more: none needed
            else:
                h = min(held.get(name, 0), slot_limit(s.concurrency))
                target = max(q.n_reserved,
                             min(h, q.n_reserved + self._reserving(q, s, mono)))
            if target < n:
                self.given += 1
                exact[name] = target
                floor.pop(name, None)
                if target:
                    rows[name] = target
                else:
                    del rows[name]
                if held.get(name, 0) > target:
                    if target:
                        held[name] = target
                    else:
                        held.pop(name, None)
        known = None
        if now_ms - self._refreshed >= SLOT_REFRESH_MS and (rows or self.stored):
            self._refreshed = now_ms
            for name, n in rows.items():
                if name in self.taking:   # its grant may be in the database already
                    floor.setdefault(name, n)
                else:   # as counted here: repairs a give-back or a take whose answer was lost
                    exact.setdefault(name, n)
            known = set(rows) | self.taking
            self.stored = bool(rows)
        if not exact and not floor and known is None:
            return None
        if exact or floor:
            self.stored = True
        return exact, floor, known


__all__ = ["SLOT_LEASE_MS", "SharedSlots", "keep_slots", "slot_limit", "take_slots"]
