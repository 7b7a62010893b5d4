"""The two threads of a shared-mode node's SharedLink (gateway/shared.py; docs/scaling.md):
the claim thread, which runs the node's statements in order on a connection of its own, and
the listener thread, which LISTENs for the other nodes' notifications and holds the node's
liveness and leader locks. `LinkThreads` is a base of SharedLink and expects its attributes
(store, node, port, tasks, clock, relay, calls, stopping, leader, counters, `_post`, `want`,
`_claimed`, `_granted`, `_hint`, `_slots_freed`, `_subs_heard`). Units: ms unless named `_s`.
"""
from __future__ import annotations

import logging
import time

from core.api import fire_due, give_tokens, keep_slots, take_slots, take_tokens

from .logs import event

log = logging.getLogger("jobgate.shared")

#: s before a lost connection is replaced
RECONNECT_S = 0.5
#: the periodic task kinds (at most one of each queued)
PERIODIC = frozenset(("promote", "cron", "rescue", "sweep"))
#: the most cron runs the leader fires in one round (every PROMOTE_MS)
CRON_IDS = 64
#: s the listener waits for a notification before it tries the leader lock again
LISTEN_WAIT_S = 1.0


class LinkThreads:
    """The claim thread's and the listener thread's loops of a SharedLink (module
    docstring)."""

    # ----------------------------------------------------------- claim thread
    def _claims_main(self) -> None:
        conn = None
        while True:
            kind, arg = self.tasks.get()
            if kind == "stop":
                break
            try:
                if conn is None:
                    conn = self.store.raw()
                now = self.clock.wall_ms()
                if kind == "claim":
                    demand, wants, want_tokens = arg
                    grants = tokens = None
                    if want_tokens:
                        try:
                            tokens = take_tokens(conn, want_tokens)
                        except Exception as e:   # the claim runs still (other queues)
                            conn.rollback()      # raises when the session is gone
                            log.warning("taking rate-limit tokens failed: %s", e)
                    if wants:
                        try:
                            grants = take_slots(conn, self.store.node, wants)
                        except Exception:
                            if tokens:   # taken and committed: the node uses them still
                                self._post(self._granted, None, tokens)
                            raise
                    try:
                        rows = self.store.claim(conn, demand, now)
                    except Exception:
                        if grants or tokens:   # taken and committed: the node uses them
                            self._post(self._granted, grants, tokens)
                        raise
                    self._post(self._claimed, rows, grants, tokens)
                elif kind == "slots":
                    n, lapsed = keep_slots(conn, self.store.node, *arg)
                    self.slot_notices += n
                    if lapsed:   # other nodes may have taken them: take again first
                        self._post(self.node.slots.lapsed, lapsed)
                elif kind == "tokens":
                    give_tokens(conn, arg)
                elif kind == "ids":
                    self._post(self.node.set_block, self.store.next_block(conn))
                elif kind == "promote":
                    self.promoted += self.store.promote(conn, now)
                    self.port.end_pauses(conn, now)   # pauses across nodes that ran out
                    self.evicted += self.store.evict(conn, now)
                elif kind == "cron":
                    if self._cron_next + CRON_IDS > self._cron_end:
                        self._cron_next = self.store.next_block(conn)
                        self._cron_end = self._cron_next + self.node.block_size
                    self._cron_next += fire_due(conn, now, range(self._cron_next,
                                                                 self._cron_next + CRON_IDS))
                elif kind == "call":
                    fn, args, callback = arg
                    self._post(callback, fn(conn, *args))
                elif kind == "rescue":
                    n = self.store.rescue(conn, now)
                    if n:
                        self.rescued += n
                        event(log, "rescued expired reservations of gone nodes", jobs=n)
                elif kind == "sweep":
                    n = self.store.sweep(conn, now, arg)
                    if n:
                        self.rescued += n
                        event(log, "returned this node's stranded claims", jobs=n)
            except Exception as e:   # connection lost, database down: try again later
                log.warning("shared-mode statement failed (%s): %s", kind, e)
                if conn is not None:
                    try:
                        conn.invalidate()
                    except Exception:  # pragma: no cover - gone anyway
                        pass
                    conn = None
                if kind == "claim":
                    self._post(self._claimed, None)
                elif kind == "ids":
                    self._post(self._ids_failed)
                elif kind == "call":
                    self._post(arg[2], e if isinstance(e, Exception) else RuntimeError(str(e)))
                elif kind == "cron":
                    # the round may have committed before the error: never reuse its ids
                    self._cron_next = self._cron_end
                time.sleep(RECONNECT_S)
            finally:
                if kind in PERIODIC:
                    self._queued.discard(kind)
        if conn is not None:
            try:
                conn.close()
            except Exception:  # pragma: no cover - stopping
                pass

    def _ids_failed(self) -> None:
        self.node.asking_ids = False

    # -------------------------------------------------------- listener thread
    def _listen_main(self) -> None:
        while not self.stopping:
            raw = None
            try:
                raw = self.store.raw()
                conn = raw.driver_connection
                conn.autocommit = True
                self.store.listen(conn)
                self._post(self.want)   # notifications may have been missed: claim once
                self._post(self.relay.connected)   # and other nodes' subscribers' wants
                me = f"{self.store.number}:"
                while not self.stopping:
                    if not self.leader and self.store.try_lead(conn):
                        self.leader = True
                        event(log, "leading the shared nodes", node=self.store.node)
                    for n in conn.notifies(timeout=LISTEN_WAIT_S):
                        ch = n.channel
                        if ch == "jobgate_ready":
                            self._post(self._hint, n.payload)
                        elif ch == "jobgate_slots":   # concurrency slots given back
                            self._post(self._slots_freed, n.payload)
                        elif ch == "jobgate_done":   # a result waiter here may be answered
                            self._post(self.node.results.hint, n.payload)
                        elif ch == "jobgate_calls":   # addressed `<to>:...`: ours only
                            if n.payload.startswith(me):
                                self._post(self.calls.received, n.payload)
                        elif ch == "jobgate_settings":   # `<from>:<queue>`: others' only
                            if not n.payload.startswith(me):
                                self._post(self.node.settings.heard, n.payload)
                        elif n.payload.startswith(me):
                            pass   # this node's own events and announcements
                        elif ch == "jobgate_events":
                            self._post(self.relay.received, n.payload)
                        else:   # jobgate_subs: what another node's subscribers want
                            self._post(self._subs_heard, n.payload)
                    conn.execute("SELECT 1")   # a dead session raises here
            except Exception as e:
                if self.stopping:
                    break
                if self.leader:
                    self.leader = False   # the session held the leader lock: it is gone
                log.warning("shared-mode listener lost its session: %s", e)
                time.sleep(RECONNECT_S)
            finally:
                if raw is not None:
                    try:
                        raw.invalidate()
                    except Exception:  # pragma: no cover - gone anyway
                        pass
