"""Flows across nodes (issue 19; docs/scaling.md "Flows across nodes"): a flow parent waits
for its children (core/flows.py) while its children are pulled, completed or failed on any
node.

A parent waiting for children is parked (DELAYED at the far deadline) and, in shared mode, is
a row nobody holds; its children are claimed by whichever nodes have workers. When a child
finishes on a node that does not hold the parent, that node sends the parent a *note* once
its own commit (the child's completion) is in the database:

- ``("done", child uid)``: the child completed (or was deleted by the beanstalk worker that
  reserved it): the parent stops waiting for it and is released when it was the last one;
- ``("failed", child uid, key, policy, error text)``: the child failed for good and has a
  ``parentPolicy`` (fail / remove / ignore / continue), applied to the parent;
- ``("kept", child uid, [result, fmt])``: a completed child is being deleted: its result stays
  readable for the parent (``keptValues``).

A note is delivered by taking the parent's row into this node's engine (core/shared_calls.py
`reach`: a row no node holds) and applying it there with the engine's own flow code, so the
released parent is written back (ready) at the next commit or handed to a waiting worker
here. When another node holds the parent (it took it for a note of its own, a moment ago),
the note is forwarded to that node (`jobgate_calls`, handler FLOW_CALLS), which applies it or,
if it gave the parent back meanwhile, delivers it again. A note that cannot be delivered (the
database fails, the holder does not answer) is tried again RETRY_MS later, up to TRIES times.

Which jobs wait for a job: a child's ``waiters`` extra (the uids of the flow jobs whose
``dependsOn`` name it), written by bunqueue's PUSHF in shared mode; the parent's ``deps``
are as on a single server.

A safety net for a note lost with its node (killed between the child's commit and the note):
the leader's sweep (`stalled`) reads the parked rows nobody holds and the children of theirs
that completed, and the loop sends the "done" notes again (a note for a child the parent no
longer waits for changes nothing). A child that completed with removeOnComplete leaves no row,
so a note lost for it is not repaired (docs/scaling.md). Units: ms.
"""
from __future__ import annotations

import msgpack

from .extras import BLOCKED_MS
from .shared_reads import UID_SQL, _run

#: the Calls "dialect" of parent notes forwarded to the node holding the parent
FLOW_CALLS = "@flow"
#: ms before a note that could not be delivered is tried again
RETRY_MS = 1000
#: deliveries of one note at most
TRIES = 30
#: deliveries of a note whose parent no other node holds and that is not here (see _reached)
ABSENT_TRIES = 3
#: parked parents the leader's sweep reads at most per round
SWEEP_MAX = 500


def waiters(ext) -> tuple:
    """The uids of the jobs waiting for the job whose extras are `ext` (its ``waiters``)."""
    if ext is None:
        return ()
    return ext.get("waiters") or ()


def stalled(conn, now_ms: int) -> list:
    """[(parent uid, [child uid, ...])]: parked parents no node holds (a delayed row at the far
    deadline, at most SWEEP_MAX) and those of the children they wait for whose rows are
    completed (the leader's sweep; see the module docstring)."""
    def go(cur):
        cur.execute(f"SELECT {UID_SQL}, extras FROM jobs WHERE state = 'delayed' AND "
                    "ready_at_ms > %s AND node IS NULL AND extras IS NOT NULL "
                    "ORDER BY ready_at_ms LIMIT %s", (now_ms + BLOCKED_MS // 2, SWEEP_MAX))
        parents = []
        for uid, extras in cur.fetchall():
            ext = msgpack.unpackb(bytes(extras), raw=False, strict_map_key=False)
            deps = ext.get("deps") if ext.__class__ is dict else None
            if deps:
                parents.append((uid, list(deps)))
        if not parents:
            return []
        cur.execute("SELECT uid FROM jobs WHERE uid = ANY(%s) AND state = 'completed'",
                    ([d for _, deps in parents for d in deps],))
        done = {r[0] for r in cur.fetchall()}
        return [(uid, [d for d in deps if d in done]) for uid, deps in parents
                if any(d in done for d in deps)]
    return _run(conn, go)


class SharedFlows:
    """One node's parent notes (see the module docstring); `node`: core.shared.SharedNode.
    Counters: `sent` (notes delivered by taking the parent here or forwarding it),
    `applied` (notes applied to a parent here), `dropped` (given up after TRIES)."""

    def __init__(self, node) -> None:
        self.node = node
        self.retry: list = []      # (due monotonic ms, parent uid, note, tries)
        self.in_flight: set = set()   # (parent uid, note kind, child uid) being delivered
        self.sent = self.applied = self.dropped = 0
        self.sweeping = False
        node.calls.handlers[FLOW_CALLS] = self.serve

    # ------------------------------------------------------------- engine hooks
    def completed(self, job) -> None:
        """`job` completed (or was deleted by the worker that reserved it): the jobs waiting
        for it that are not in this engine get a "done" note (a local one was released by the
        engine itself)."""
        e = self.node.e
        ws = waiters(job.ext)
        if not ws:
            return
        uid = e.uid_of(job)
        for w in ws:
            if e.find_uid(w) is None:
                self.note(w, ("done", uid))

    def note(self, parent: str, note: tuple, tries: int = 0) -> None:
        """Deliver `note` to job `parent` once this node's changes so far are committed."""
        key = (parent, note[0], note[1])
        if key in self.in_flight:
            return
        self.in_flight.add(key)
        self.node.calls.reach([parent], lambda held: self._reached(parent, note, tries, held))

    # ------------------------------------------------------------------ delivery
    def _reached(self, parent: str, note: tuple, tries: int, held) -> None:
        e = self.node.e
        if isinstance(held, Exception):
            self._again(parent, note, tries)
            return
        job = e.find_uid(parent)
        if job is not None:
            self.in_flight.discard((parent, note[0], note[1]))
            self.sent += 1
            self.apply(job, note)
            return
        holder = held.get(parent)
        if holder is None:
            # no other node holds it: either it has no row (gone: nothing waits any more), or
            # this node took it for another note and gave it back at a commit in between
            # (its row then said "this node" when the statement ran): ask again, a few times
            self.in_flight.discard((parent, note[0], note[1]))
            if tries + 1 < ABSENT_TRIES:
                self.note(parent, note, tries + 1)
            return

        def answered(reply) -> None:
            if reply is None:
                self._again(parent, note, tries)
            else:
                self.in_flight.discard((parent, note[0], note[1]))
                self.sent += 1
        self.node.calls.send(holder, FLOW_CALLS, _pack((parent, list(note))), None, answered)

    def _again(self, parent: str, note: tuple, tries: int) -> None:
        self.in_flight.discard((parent, note[0], note[1]))
        if tries + 1 >= TRIES:
            self.dropped += 1
            return
        due = self.node.e.clock.monotonic_ms() + RETRY_MS
        self.retry.append((due, parent, note, tries + 1))

    def tick(self) -> None:
        """Deliver again the notes whose retry time came (the gateway's timer)."""
        if not self.retry:
            return
        now = self.node.e.clock.monotonic_ms()
        due = [r for r in self.retry if r[0] <= now]
        if not due:
            return
        self.retry = [r for r in self.retry if r[0] > now]
        for _, parent, note, tries in due:
            self.note(parent, note, tries)

    def sweep(self) -> None:
        """The leader's safety net (see the module docstring): read the stalled parents
        (`stalled`) and deliver their "done" notes again; one sweep at a time."""
        if self.sweeping:
            return
        self.sweeping = True
        self.node.query(stalled, (self.node.e.clock.wall_ms(),), self._swept)

    def _swept(self, found) -> None:
        self.sweeping = False
        if isinstance(found, Exception):
            return
        for parent, kids in found:
            for kid in kids:
                self.note(parent, ("done", kid))

    def serve(self, body: bytes, principal, reply) -> None:
        """A note another node forwarded here (this node held the parent): applied when the
        parent is still here, else delivered again from here; answered at once."""
        try:
            parent, note = msgpack.unpackb(body, raw=False, use_list=False)
        except (ValueError, TypeError, msgpack.UnpackException):
            reply(None, False)
            return
        job = self.node.e.find_uid(parent)
        if job is not None:
            self.apply(job, tuple(note))
            reply(b"1", True)
            return
        self.note(parent, tuple(note))
        reply(b"1", False)

    def apply(self, parent, note: tuple) -> None:
        """Apply `note` to `parent`, a job in this engine (core/flows.py)."""
        e = self.node.e
        self.applied += 1
        kind = note[0]
        if kind == "done":
            e._deps_done(note[1])
        elif kind == "failed":
            e.child_failure(parent, note[1], note[2], note[3], note[4])
        elif kind == "kept":
            e.keep_value(parent, note[1], list(note[2]))


_pack = msgpack.Packer(use_bin_type=True).pack

__all__ = ["FLOW_CALLS", "SharedFlows", "stalled", "waiters"]
