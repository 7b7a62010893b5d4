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
- **keep** (`keep_slots`, on the node's timer): a node gives back the slots its reserved jobs
  and waiting reservers do not use (held above reserved + waiting), lowering its own count
  first and the row after; a give-back NOTIFYs `jobgate_ready` with the queue, so that a node
  waiting for a slot takes it. Every second the node's rows are written again with `until_ms`
  SLOT_LEASE_MS ahead: the slots of a node that died lapse after that.

The database's count of a node's slots is never below the node's own (take: database first;
give back: node first; no give-back is sent while a take runs). Units: ms; `until_ms` wall ms.
No I/O in SharedSlots (the gateway runs the statements on its claim thread).
"""
from __future__ import annotations

import math

from .shared_reads import READY_CHANNEL

#: ms a node's slots count after its last refresh (it refreshes them every second)
SLOT_LEASE_MS = 5000


def slot_limit(concurrency) -> int:
    """The number of reservations a concurrency limit (int or float) admits: the engine admits
    while reserved < limit, so a limit of 2.5 admits 3; none below 1 (0 for a limit <= 0)."""
    if concurrency <= 0:
        return 0
    return math.ceil(concurrency)


def take_slots(conn, node: str, wants: dict, now_ms: int) -> dict:
    """Take slots for `node`: `wants` maps a queue to (limit, wanted, used): its slot limit,
    the slots the node wants in all, the jobs it has reserved. Returns queue -> the slots the
    node now holds (at least `used`, at most what the limit leaves beside the others' live
    slots, unless `used` is above that). One transaction per queue, queues in name order.
    Errors: the driver's (psycopg.Error)."""
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
                        "AND node <> %s AND until_ms <= %s", (queue, node, now_ms))
            cur.execute("SELECT COALESCE(sum(held), 0)::bigint FROM queue_slots "
                        "WHERE queue = %s AND node <> '' AND node <> %s", (queue, node))
            others = cur.fetchone()[0]
            grant = max(used, min(wanted, limit - others))
            if grant > 0:
                cur.execute("INSERT INTO queue_slots (queue, node, held, until_ms) "
                            "VALUES (%s, %s, %s, %s) ON CONFLICT (queue, node) DO UPDATE "
                            "SET held = EXCLUDED.held, until_ms = EXCLUDED.until_ms",
                            (queue, node, grant, now_ms + SLOT_LEASE_MS))
            else:
                cur.execute("DELETE FROM queue_slots WHERE queue = %s AND node = %s",
                            (queue, node))
            conn.commit()
            out[queue] = grant
    finally:
        cur.close()
    return out


def keep_slots(conn, node: str, held: dict, now_ms: int) -> int:
    """Write `node`'s slots as `held` (queue -> count; a queue not in it: none): rows updated
    with `until_ms` SLOT_LEASE_MS ahead, rows of other queues deleted, and NOTIFY
    jobgate_ready for each queue whose count went down. Returns how many queues got
    notified. Errors: the driver's (psycopg.Error)."""
    cur = conn.cursor()
    try:
        cur.execute("SELECT queue, held FROM queue_slots WHERE node = %s", (node,))
        before = dict(cur.fetchall())
        names = [q for q, n in held.items() if n > 0]
        if names:
            cur.execute(
                "INSERT INTO queue_slots (queue, node, held, until_ms) "
                "SELECT q, %s, n, %s FROM unnest(%s::text[], %s::int[]) AS t(q, n) "
                "ON CONFLICT (queue, node) DO UPDATE "
                "SET held = EXCLUDED.held, until_ms = EXCLUDED.until_ms",
                (node, now_ms + SLOT_LEASE_MS, names, [held[q] for q in names]))
        cur.execute("DELETE FROM queue_slots WHERE node = %s AND NOT (queue = ANY(%s))",
                    (node, names))
        lower = sorted(q for q, n in before.items() if held.get(q, 0) < n)
        if lower:
            cur.execute(f"SELECT count(pg_notify('{READY_CHANNEL}', q)) "
                        "FROM unnest(%s::text[]) AS t(q)", (lower,))
        conn.commit()
        return len(lower)
    finally:
        cur.close()


class SharedSlots:
    """One node's slots (see the module docstring); `node`: core.shared.SharedNode. `held`
    (queue -> slots held here) is the engine's `slots_held`; `taking`: a take runs;
    `stored`: the database may hold rows of this node; `taken`, `given`: counters (tests,
    /metrics)."""

    def __init__(self, node) -> None:
        self.node = node
        self.held: dict = {}
        node.e.slots_held = self.held
        self.taking = False
        self.stored = False
        self.taken = self.given = 0

    def wants(self, more: dict, skip: set) -> dict:
        """queue -> (limit, wanted, used) for take_slots: the queues with a concurrency limit
        whose waiting reservers (plus `more` a batch reserve asked for) need more slots than
        held here, not paused, and not in `skip` (queues known to have no claimable rows)
        unless ready jobs wait here for a slot. The caller sets `taking` while it takes them."""
        e = self.node.e
        now = e.clock.monotonic_ms()
        held = self.held
        out = {}
        for name, q in e.queues.items():
            s = q.limits
            if s is None or s.concurrency is None or not q.waiting or q.paused_until > now:
                continue
            if name in skip and not q.n_ready:
                continue
            limit = slot_limit(s.concurrency)
            wanted = min(limit, q.n_reserved + q.waiting + more.get(name, 0))
            if wanted > held.get(name, 0):
                out[name] = (limit, wanted, q.n_reserved)
        return out

    def granted(self, grants) -> bool:
        """The take committed: install `grants` (queue -> slots held; None when it failed)
        and serve the reservers they admit. True when a queue got more slots than before
        (claim again: its waiters may take rows now)."""
        self.taking = False
        if not grants:
            return False
        e = self.node.e
        more = False
        for name, n in grants.items():
            if n > self.held.get(name, 0):
                more = True
                self.taken += 1
            if n > 0:
                self.held[name] = n
                self.stored = True
            else:
                self.held.pop(name, None)
            q = e.queues.get(name)
            if q is not None and q.limits is not None and q.n_ready:
                e._serve(q)
        return more

    def surplus(self) -> dict | None:
        """Lower the slots held here to what is used (reserved jobs, plus waiting reservers
        up to the limit; none for a queue without a concurrency limit any more). Returns the
        whole new `held` for keep_slots when something was given back, else None; None
        while a take runs."""
        if self.taking or not self.held:
            return None
        e = self.node.e
        lowered = False
        for name, n in list(self.held.items()):
            q = e.queues.get(name)
            s = None if q is None else q.limits
            if s is None or s.concurrency is None:
                target = 0 if q is None else q.n_reserved
            else:
                target = max(q.n_reserved,
                             min(slot_limit(s.concurrency), q.n_reserved + q.waiting))
            if target < n:
                lowered = True
                self.given += 1
                if target:
                    self.held[name] = target
                else:
                    del self.held[name]
        return dict(self.held) if lowered else None

    def refresh(self) -> dict | None:
        """The slots to write again (every second): `held` when this node holds any or the
        database may still hold rows of it, else None."""
        if self.taking:
            return None
        if self.held:
            self.stored = True
            return dict(self.held)
        if self.stored:
            self.stored = False
            return {}
        return None


__all__ = ["SLOT_LEASE_MS", "SharedSlots", "keep_slots", "slot_limit", "take_slots"]
