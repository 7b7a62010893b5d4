"""The database side of a node in shared mode (issue 19, docs/scaling.md): several jobgate
processes on one PostgreSQL.

`SharedLink` runs, beside the engine's event loop:

- **a claim thread** with a connection of its own, which runs the statements the node needs in
  order: claims for the reservers waiting here (core.shared.SharedNode.demand), new id blocks,
  and, while this node leads, promotions of due delayed jobs, evictions of expired ones (TTL,
  result retention), the cron schedules' due runs
  (core/shared_cron.py) and the rescue of dead nodes' expired reservations
  (core/shared_store.py);
- **a listener thread** on one more session: `LISTEN jobgate_ready` (a NOTIFY names a queue
  that got a ready job: when reservers wait for it here, a claim runs), `jobgate_done`
  (result waits), `jobgate_events` and `jobgate_subs` (events across nodes:
  core/shared_events.py), `jobgate_calls` (commands forwarded to the node holding their job:
  core/shared_calls.py), the node's liveness lock, and the leader lock, tried every second
  while another node leads;
- **a timer task** on the loop: the claim poll (`database.poll_interval_ms`, for notifications
  lost with a connection), and the leader's promotion (every PROMOTE_MS) and rescue (every
  RESCUE_MS) rounds.

A lost connection is replaced after RECONNECT_S; meanwhile claims find nothing (probes answer
TIMED_OUT) and the writer's own retry (gateway/writer.py) covers commits. Units: ms unless
named `_s`.
"""
from __future__ import annotations

import logging
import queue
import threading
import time

import anyio

from .logs import event
from .shared_threads import LinkThreads

log = logging.getLogger("jobgate.shared")

#: ms between the leader's promotions of due delayed jobs
PROMOTE_MS = 100
#: ms between the leader's rescue rounds (dead nodes' expired reservations)
RESCUE_MS = 1000
#: (RECONNECT_S, PERIODIC, CRON_IDS, LISTEN_WAIT_S: gateway/shared_threads.py)


class SharedLink(LinkThreads):
    """See the module docstring. `port`: core.api.Port; `store`: the joined
    core.shared_store.SharedStore; `poll_ms`: the claim poll interval (ms); `clock`: the
    engine's clock (wall ms for deadlines); `flow_sweep_ms`: ms between the leader's sweeps
    for stalled flow parents (core/shared_flows.py; 0: none). `leader`: True while this node leads;
    `claims`, `claimed`, `notified`, `promoted`, `rescued`: counters for stats and tests."""

    def __init__(self, port, store, poll_ms: int, clock, flow_sweep_ms: int = 5000) -> None:
        self.port = port
        self.store = store
        self.poll_ms = poll_ms
        self.flow_sweep_ms = flow_sweep_ms
        self.clock = clock
        self.node = port.share(store.node)
        self.node.set_block(store.first_block)
        self.node.on_demand = self._want
        self.node.on_ids = self._want_ids
        self.node.on_query = self._query
        self.relay = self.node.events     # events across nodes (core/shared_events.py)
        self.relay.number = store.number
        self.relay.flush_soon = self._flush_soon
        self.relay.announce_soon = self._announce_soon
        self.calls = self.node.calls      # commands forwarded to a job's node (shared_calls)
        self.calls.number = store.number
        self._flushing = False
        self.tasks: queue.SimpleQueue = queue.SimpleQueue()
        self.loop = None
        self.pending = False      # a claim is queued or running
        self.again = False        # demand came while it ran: claim again after it
        self.poll_due = False     # the poll came while a round ran: poll after it
        self.leader = False
        self.stopping = False
        self.claims = self.claimed = self.notified = self.promoted = self.rescued = 0
        self.evicted = 0
        self.slot_notices = 0     # queues notified of concurrency slots given back
        self._threads: list = []
        self._cron_next = self._cron_end = 0   # the leader's ids for cron runs (claim thread)
        self._queued: set = set()   # periodic task kinds queued and not yet done

    # ------------------------------------------------------------- on the loop
    def want(self) -> None:
        """Claim for every queue reservers wait for here, soon (event-loop thread): the poll
        and a reconnected listener, when notifications may have been missed."""
        self.node.forget_emptied()
        self._want()

    def _want(self) -> None:
        """Claim soon for the waiting reservers of the queues that may hold claimable rows
        (core.shared.SharedNode.emptied): a reserver starting to wait, a notification."""
        if self.pending:
            self.again = True
            return
        demand, wants = self.node.start_round()
        tokens = self.node.tokens.asked
        if not demand and not wants and not tokens:
            self.node.end_probes()
            return
        self.pending = True
        self.again = False
        self.tasks.put(("claim", (demand, wants, tokens)))

    def _granted(self, grants, tokens) -> bool:
        """Install what a claim round took before its claim: concurrency slots
        (core/shared_slots.py) and rate-limit tokens (core/shared_tokens.py), each None when
        none were asked for or the take failed. True when waiters may reserve more now."""
        more = self.node.slots.granted(grants)
        return self.node.tokens.granted(tokens) or more

    def _claimed(self, rows, grants=None, tokens=None) -> None:
        """A claim round ended: `rows` claimed (None: it failed), `grants` and `tokens` the
        concurrency slots and rate-limit tokens it took first (_granted)."""
        self.pending = False
        self.claims += 1
        more = self._granted(grants, tokens)
        if more:
            self.node.carry_probes()   # the next round claims under the new slots
        if rows is None:   # the claim failed: no queue is known to be empty
            rows = []
        else:
            self.node.found(rows)
        self.claimed += len(rows)
        left = self.node.load(rows)
        if self.poll_due:   # the poll came while this round ran
            self.poll_due = False
            if self.node.wants_claim():
                self.want()
                return
        if self.again or more or (rows and not left):
            self._want()   # more waiters came, new slots, or the queue may hold more

    def _query(self, fn, args: tuple, callback) -> None:
        self.tasks.put(("call", (fn, args, callback)))

    def _periodic(self, kind: str, arg=None) -> None:
        """Queue a periodic task unless one of its kind waits already (a blocked or failing
        claim thread does not pile them up ahead of the claims)."""
        if kind not in self._queued:
            self._queued.add(kind)
            self.tasks.put((kind, arg))

    def _want_ids(self) -> None:
        self.tasks.put(("ids", None))

    def _hint(self, queue_name: str) -> None:
        self.notified += 1
        self.node.hint(queue_name)
        if self.node.waits_for(queue_name):
            self._want()

    def _slots_freed(self, queue_name: str) -> None:
        """A `jobgate_slots` notice: concurrency slots (core/shared_slots.py) or rate-limit
        tokens (core/shared_tokens.py) of the queue were given back: take them if reservers
        wait here."""
        self.node.tokens.freed(queue_name)
        if self.node.slots.freed(queue_name):
            self._want()

    def _flush_soon(self) -> None:
        """Events wait to be relayed to other nodes (called inside an engine operation):
        send them once this loop iteration is over."""
        if not self._flushing and self.loop is not None:
            self._flushing = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flushing = False
        self.relay.flush()

    def _announce_soon(self) -> None:
        """What this node's subscribers want changed (inside an engine operation): tell the
        other nodes once this loop iteration is over, not at the next tick."""
        if self.loop is not None:
            self.loop.call_soon(self._announce)

    def _announce(self) -> None:
        self.relay.tick(self.clock.wall_ms())

    def _subs_heard(self, payload: str) -> None:
        self.relay.heard_subs(payload, self.clock.wall_ms())

    def _post(self, fn, *args) -> None:
        loop = self.loop
        if loop is not None and not self.stopping:
            try:
                loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:   # the loop closed while stopping
                pass

    async def run(self) -> None:
        """Start the threads and run the timers until cancelled (then stop the threads)."""
        import asyncio
        self.loop = asyncio.get_running_loop()
        for name, target in (("jobgate-claims", self._claims_main),
                             ("jobgate-listen", self._listen_main)):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        event(log, "shared node", node=self.store.node)
        last_poll = last_promote = last_rescue = last_sweep = 0.0
        try:
            while True:
                await anyio.sleep(PROMOTE_MS / 1000)
                now = time.monotonic() * 1000
                try:   # callbacks into sessions: a bug there must not end the node's timers
                    if self.node.results.heap:
                        self.node.results.expire()
                    self.relay.tick(self.clock.wall_ms())
                    self.calls.expire()
                    self.node.flows.tick()
                    self.node.figures.tick(self.clock.wall_ms())   # core/shared_figures.py
                except Exception:
                    log.exception("shared-mode timer callback failed")
                if now - last_poll >= self.poll_ms:
                    last_poll = now
                    if self.pending:   # rounds back to back: the poll follows this one
                        self.poll_due = True
                    elif self.node.wants_claim():
                        self.want()
                slots = self.node.slots.tick(int(now))   # concurrency slots (shared_slots)
                if slots is not None:
                    self.tasks.put(("slots", slots))
                back = self.node.tokens.tick()   # rate-limit tokens unused here (shared_tokens)
                if back is not None:
                    self.tasks.put(("tokens", back))
                if now - last_rescue >= RESCUE_MS:
                    last_rescue = now
                    # rows this node claimed whose answer it lost (the claim committed, its
                    # reply did not arrive): held here in the database, by nobody in memory
                    self._periodic("sweep", self.node.held_ids())
                    if self.leader:
                        self._periodic("rescue")
                if self.leader and self.flow_sweep_ms and now - last_sweep >= self.flow_sweep_ms:
                    last_sweep = now
                    self.node.flows.sweep()   # flow parents whose notes were lost
                if self.leader and now - last_promote >= PROMOTE_MS:
                    last_promote = now
                    self._periodic("promote")
                    self._periodic("cron")
        finally:
            self.stop()

    async def settle(self, timeout_s: float = 5.0) -> None:
        """While stopping, after the last commit: wait (at most `timeout_s` s) until the flow
        notes of this node's last changes are delivered (core/shared_flows.py), so that a
        parent whose child finished here does not wait for the leader's sweep."""
        flows = self.node.flows
        with anyio.move_on_after(timeout_s):
            while flows.busy():
                await anyio.sleep(0.02)

    def join(self, timeout_s: float = 5.0) -> None:
        """After stop(): wait (at most `timeout_s` s) for the claim thread to finish the
        statement it runs, so that nothing commits after the store's close gave this node's
        rows back."""
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            if t.name == "jobgate-claims":
                t.join(max(0.0, deadline - time.monotonic()))

    def stop(self) -> None:
        """Stop the threads (they end within LISTEN_WAIT_S)."""
        self.stopping = True
        self.tasks.put(("stop", None))
