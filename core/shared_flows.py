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
  readable for the parent (``keptValues``);
- ``("wait", waiter uid, job id)``, sent to a job another job depends on (a bunqueue PUSH
  with ``dependsOn`` outside a flow) that another node held when the push ran (`job id`: the
  id its row had then): that node adds the waiter to the job's ``waiters``, so that its
  completion on any node reaches the waiter; a job that has completed already answers with a
  "done" note to the waiter instead, also when its row is gone since (removed on completion:
  each node remembers the ids of the last RECENT_DONE jobs it completed, so a custom uid used
  again by a newer job does not count). A dependency that is gone without completing (failed
  and removed, deleted) releases nothing, as on a single server.

The notes made before one commit go together, after it: those to one parent are applied
at once, values and failures before completions, so that a worker given a parent released by
its last child reads that child's kept value too. They are delivered by taking the parents'
rows into this node's engine (core/shared_calls.py `reach`: rows no node holds) and applying
them there with the engine's own flow code, so a released parent is written back (ready) at
the next commit or handed to a waiting worker here. When another node holds a parent (it
took it for notes of its own, a moment ago), its notes are forwarded to that node
(`jobgate_calls`, handler FLOW_CALLS), which applies them or, if it gave the parent back
meanwhile, delivers them again. Notes that cannot be delivered (the database fails, the
holder does not answer) are tried again RETRY_MS later, the wait doubling up to RETRY_MAX_MS,
and never given up.

Which jobs wait for a job: a child's ``waiters`` extra (the uids of the flow jobs whose
``dependsOn`` name it), written by bunqueue's PUSHF in shared mode, or added by a "wait" note
(`wait_for`); the parent's ``deps`` are as on a single server.

A safety net for notes lost with their node (stopped or killed between the child's commit
and the notes' delivery): the leader's sweep (`stalled`) pages through the parked rows nobody
holds, SWEEP_MAX a round, and finds the children of theirs that completed or failed for good
with a policy; the loop sends those "done" and "failed" notes again (a note for a child the
parent no longer waits for changes nothing: the parent's ``deps`` name only the children not
yet applied). A child that completed with removeOnComplete (or failed and was removed)
leaves no row, so a note lost for it is not repaired, nor is a lost "kept" note
(docs/scaling.md). Units: ms.
"""
from __future__ import annotations

from collections import OrderedDict

import msgpack

from .extras import BLOCKED_MS
from .flows import failure_text
from .model import COMPLETED
from .shared_reads import UID_SQL, _run

#: the Calls "dialect" of parent notes forwarded to the node holding the parent
FLOW_CALLS = "@flow"
#: ms before notes that could not be delivered are tried again (doubling each time)
RETRY_MS = 1000
#: ms between tries at most: a note is never given up (the database may be away a while)
RETRY_MAX_MS = 30_000
#: deliveries of notes whose parent no other node holds and that is not here (see _reached)
ABSENT_TRIES = 3
#: jobs completed on this node that it remembers (their ids), so that a "wait" note arriving
#: after its dependency completed and was removed answers "done"
RECENT_DONE = 16384
#: parked parents the leader's sweep reads per round (it pages through them round by round)
SWEEP_MAX = 500
#: the order notes to one parent are applied in: its children's values and failures before
#: the completions that may release it (a worker given the parent reads them all)
_ORDER = {"kept": 0, "failed": 1, "done": 2, "wait": 3}


def waiters(ext) -> tuple:
    """The uids of the jobs waiting for the job whose extras are `ext` (its ``waiters``)."""
    if ext is None:
        return ()
    return ext.get("waiters") or ()


def stalled(conn, now_ms: int, after: tuple) -> tuple:
    """The leader's sweep (see the module docstring): up to SWEEP_MAX parked parents no node
    holds (a delayed row at the far deadline), in (ready_at_ms, id) order after the cursor
    `after` ((ready_at_ms, id); (0, 0) from the start), and the notes of the children they
    wait for whose rows are completed ("done", to every job waiting for them) or failed for
    good with a ``parentPolicy`` (buried with a result: "failed", as core/flows.py sends it,
    to the child's own parent only). Returns ([(parent uid, [note, ...])], the cursor for the
    next round: (0, 0) once the end was reached)."""
    def go(cur):
        cur.execute(f"SELECT {UID_SQL}, extras, ready_at_ms, id FROM jobs WHERE state = "
                    "'delayed' AND ready_at_ms > %s AND node IS NULL AND extras IS NOT NULL "
                    "AND (ready_at_ms, id) > (%s, %s) ORDER BY ready_at_ms, id LIMIT %s",
                    (now_ms + BLOCKED_MS // 2, after[0], after[1], SWEEP_MAX))
        got = cur.fetchall()
        nxt = (got[-1][2], got[-1][3]) if len(got) == SWEEP_MAX else (0, 0)
        parents = []
        for uid, extras, _, _ in got:
            ext = msgpack.unpackb(bytes(extras), raw=False, strict_map_key=False)
            deps = ext.get("deps") if ext.__class__ is dict else None
            if deps:
                parents.append((uid, list(deps)))
        if not parents:
            return [], nxt
        cur.execute("SELECT uid, state, queue, result, extras FROM jobs WHERE uid = ANY(%s) "
                    "AND (state = 'completed' OR (state = 'buried' AND result IS NOT NULL "
                    "AND result_ok = 0))", ([d for _, deps in parents for d in deps],))
        done = set()
        failed = {}   # child uid -> (its parentId, its "failed" note)
        for uid, state, queue, result, extras in cur.fetchall():
            if state == "completed":
                done.add(uid)
                continue
            ext = (msgpack.unpackb(bytes(extras), raw=False, strict_map_key=False)
                   if extras is not None else None)
            policy = ext.get("parentPolicy") if ext.__class__ is dict else None
            if policy is not None:   # failed for good: its policy acts on its parent only
                # the text of the final failure: its result (a failedReason may be an
                # earlier attempt's, when the last failure was a Discard)
                failed[uid] = (ext.get("parentId"), ("failed", uid, f"{queue}:{uid}", policy,
                                                     failure_text(bytes(result))))
        out = []
        for uid, deps in parents:
            notes = [("done", d) if d in done else failed[d][1] for d in deps
                     if d in done or (d in failed and failed[d][0] == uid)]
            if notes:
                out.append((uid, notes))
        return out, nxt
    return _run(conn, go)


class SharedFlows:
    """One node's parent notes (see the module docstring); `node`: core.shared.SharedNode.
    Counters: `sent` (notes delivered: applied here or forwarded), `applied` (notes applied
    to a parent here), `retried` (deliveries tried again), `absent` (notes whose parent
    was found nowhere: deleted)."""

    def __init__(self, node) -> None:
        self.node = node
        self.pending: dict = {}    # parent uid -> [note, ...] until this node's next commit
        self.flushing = False
        self.retry: list = []      # (due monotonic ms, {parent uid: [note, ...]}, tries)
        self.sent = self.applied = self.retried = self.absent = 0
        self.sweeping = False
        self.sweep_after = (0, 0)  # the sweep's cursor (stalled)
        self.inflight = 0          # deliveries waiting for the database or another node
        self.recent_done = OrderedDict()   # ids of the jobs completed here lately -> None
        node.calls.handlers[FLOW_CALLS] = self.serve

    # ------------------------------------------------------------- engine hooks
    def completed(self, job) -> None:
        """`job` completed (or was deleted by the worker that reserved it): the jobs waiting
        for it that are not in this engine get a "done" note (a local one was released by the
        engine itself); remembered for late "wait" notes (RECENT_DONE)."""
        e = self.node.e
        done = self.recent_done
        done[job.id] = None
        if len(done) > RECENT_DONE:
            done.popitem(last=False)   # the oldest (O(1); a dict's first key is not)
        ws = waiters(job.ext)
        if not ws:
            return
        uid = e.uid_of(job)
        for w in ws:
            if e.find_uid(w) is None:
                self.note(w, ("done", uid))

    def wait_for(self, waiter: str, deps, holders=None) -> None:
        """Job `waiter` (just created here, waiting for `deps`: uids) is to be told when each
        of `deps` completes on any node: a dependency in this engine gets it in its
        ``waiters`` now, every other one through a "wait" note (see the module docstring),
        sent after this node's commit to the node holding it (`holders`: {uid: (node number,
        job id)}, as the push found them); a dependency in neither is not waited for."""
        e = self.node.e
        for d in deps:
            job = e.find_uid(d)
            if job is not None:
                self.add_waiter(job, waiter)
                continue
            held = (holders or {}).get(d)
            if held is not None:
                note = ("wait", waiter, held[1])
                self.inflight += 1   # busy() until sent
                self.node.after_commit(lambda h=held[0], t=d, n=note: self._wait_sent(h, t, n))

    def _wait_sent(self, holder: int, target: str, note: tuple) -> None:
        self.inflight -= 1
        self._forward(holder, target, [note], 0)

    def _done_here(self, note: tuple) -> bool:
        """True for a "wait" note whose dependency (by job id) completed on this node lately
        (RECENT_DONE)."""
        return note[0] == "wait" and len(note) > 2 and note[2] in self.recent_done

    def add_waiter(self, job, waiter: str) -> None:
        """`job` (in this engine) is waited for by job `waiter`: added to its ``waiters``
        (stored with the next commit); a completed `job` sends `waiter` its "done" note
        instead (core/extras.py dependency_met)."""
        e = self.node.e
        if job.state is COMPLETED:
            if e.find_uid(waiter) is None:
                self.note(waiter, ("done", e.uid_of(job)))
            else:
                e._deps_done(e.uid_of(job))
            return
        ws = waiters(job.ext)
        if waiter not in ws:
            e.update_ext(job, {"waiters": list(ws) + [waiter]})

    def note(self, parent: str, note: tuple) -> None:
        """Deliver `note` to job `parent` once this node's changes so far are committed; the
        notes made before that commit go together, those to one parent applied at once."""
        self.pending.setdefault(parent, []).append(note)
        if not self.flushing:
            self.flushing = True
            self.node.after_commit(self._flush)

    # ------------------------------------------------------------------ delivery
    def _flush(self) -> None:
        self.flushing = False
        batch, self.pending = self.pending, {}
        if batch:
            self._deliver(batch, 0, 0)

    def busy(self) -> bool:
        """True while notes wait for this node's commit, their delivery is under way, or
        they wait to be tried again (a stopping node waits for that, a while:
        gateway/server.py)."""
        return bool(self.pending) or self.flushing or self.inflight > 0 or bool(self.retry)

    def _deliver(self, batch: dict, tries: int, absent: int) -> None:
        self.inflight += 1
        self.node.calls.reach(list(batch), lambda held: self._reached(batch, tries, absent,
                                                                      held))

    def _reached(self, batch: dict, tries: int, absent: int, held) -> None:
        self.inflight -= 1
        if isinstance(held, Exception):
            self._again(batch, tries)
            return
        e = self.node.e
        nowhere: dict = {}
        for parent, notes in batch.items():
            job = e.find_uid(parent)
            if job is not None:
                self.sent += len(notes)
                self.apply(job, notes)
                continue
            holder = held.get(parent)
            if holder is None:
                # no other node holds it: either it has no row (gone: nothing waits any
                # more), or this node took it for other notes and gave it back at a commit
                # in between (its row said "this node" when the statement ran): again
                nowhere[parent] = notes
                continue
            self._forward(holder, parent, notes, tries)
        if nowhere:
            if absent + 1 < ABSENT_TRIES:
                self._deliver(nowhere, tries, absent + 1)
                return
            for target, notes in nowhere.items():
                for n in notes:
                    if self._done_here(n):
                        self.note(n[1], ("done", target))   # completed here, then removed
                    else:   # gone (a "wait": failed and removed, or deleted: nothing)
                        self.absent += 1

    def _forward(self, holder: int, parent: str, notes: list, tries: int) -> None:
        self.inflight += 1

        def answered(reply) -> None:
            self.inflight -= 1
            if reply is None:
                self._again({parent: notes}, tries)
            else:
                self.sent += len(notes)
        self.node.calls.send(holder, FLOW_CALLS, _pack((parent, [list(n) for n in notes])),
                             None, answered)

    def _again(self, batch: dict, tries: int) -> None:
        self.retried += 1
        wait = min(RETRY_MS << min(tries, 5), RETRY_MAX_MS)
        self.retry.append((self.node.e.clock.monotonic_ms() + wait, batch, tries + 1))

    def tick(self) -> None:
        """Deliver again the notes whose retry time came (the gateway's timer)."""
        if not self.retry:
            return
        now = self.node.e.clock.monotonic_ms()
        due = [r for r in self.retry if r[0] <= now]
        if not due:
            return
        self.retry = [r for r in self.retry if r[0] > now]
        for _, batch, tries in due:
            self._deliver(batch, tries, 0)

    def sweep(self) -> None:
        """The leader's safety net (see the module docstring): read the next stalled parents
        (`stalled`, paging round by round) and deliver their "done" and "failed" notes again;
        one sweep at a time."""
        if self.sweeping:
            return
        self.sweeping = True
        self.node.query(stalled, (self.node.e.clock.wall_ms(), self.sweep_after),
                        self._swept)

    def _swept(self, found) -> None:
        self.sweeping = False
        if isinstance(found, Exception):
            return
        parents, self.sweep_after = found
        for parent, notes in parents:
            for n in notes:
                self.note(parent, n)

    def serve(self, body: bytes, principal, reply) -> None:
        """Notes another node forwarded here (this node held the parent): applied when the
        parent is still here, else delivered again from here; answered at once."""
        try:
            parent, notes = msgpack.unpackb(body, raw=False, use_list=False)
            notes = [tuple(n) for n in notes]
        except (ValueError, TypeError, msgpack.UnpackException):
            reply(None, False)
            return
        job = self.node.e.find_uid(parent)
        if job is not None:
            self.apply(job, notes)
            reply(b"1", True)
            return
        for n in notes:
            if self._done_here(n):
                self.note(n[1], ("done", parent))   # it completed here meanwhile
            else:
                self.note(parent, n)
        reply(b"1", False)

    def apply(self, parent, notes: list) -> None:
        """Apply `notes` to `parent`, a job in this engine (core/flows.py): values and
        failures first, then completions (_ORDER)."""
        e = self.node.e
        for note in sorted(notes, key=lambda n: _ORDER.get(n[0], 3)):
            self.applied += 1
            kind = note[0]
            if kind == "done":
                e._deps_done(note[1])
            elif kind == "failed":
                e.child_failure(parent, note[1], note[2], note[3], note[4])
            elif kind == "kept":
                e.keep_value(parent, note[1], list(note[2]))
            elif kind == "wait":
                self.add_waiter(parent, note[1])


_pack = msgpack.Packer(use_bin_type=True).pack

__all__ = ["FLOW_CALLS", "SharedFlows", "stalled", "waiters"]
