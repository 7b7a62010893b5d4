"""Result waits across nodes (issue 19, docs/scaling.md "Wake-ups across nodes"): workq
`result` and bunqueue `WaitJob` on a node that does not hold the job.

In shared mode a job that nobody on this node holds is a row in the database. A client that
waits for its result registers a `RemoteWait` here; the node reads the row (`job_uid` of
core/shared_reads.py, on its
claim thread through SharedNode.query) at once and again on every `jobgate_done` notification
for the job's uid (sent in the transaction that stored its result or deleted it:
core/shared_store.py), and answers when the row holds a result (completed, or failed for good),
or when it is gone (None: the job was deleted). A wait ends with TIMED_OUT after its timeout;
the timers are checked by the gateway every 100 ms (so a timeout is up to 100 ms late).

Units: ms (timeouts), monotonic ms (deadlines).
"""
from __future__ import annotations

from heapq import heappop, heappush

from .model import TIMED_OUT, derived_uid
from .shared_changes import delete_uid
from .shared_reads import DONE_CHANNEL, job_uid

__all__ = ["DONE_CHANNEL", "RemoteWait", "RemoteWaits"]


class RemoteWait:
    """A result wait for the job named `uid` on another node (a handle for
    Port.cancel_result_wait). `callback(outcome)` is called once: a JobView of the finished
    job, None when there is no such job, TIMED_OUT, or an Exception (the database failed)."""

    __slots__ = ("uid", "callback", "deadline", "done", "owner", "final")
    remote = True

    def __init__(self, owner, uid: str, callback, deadline: int, final: bool) -> None:
        self.owner = owner
        self.uid = uid
        self.callback = callback
        self.deadline = deadline
        self.done = False
        self.final = final   # timeout <= 0: answered after one read, finished or not

    def cancel(self) -> bool:
        """Withdraw the wait without calling back; True if it was still waiting."""
        if self.done:
            return False
        self.done = True
        self.owner._drop(self)
        return True


class RemoteWaits:
    """The result waits of one node (core.shared.SharedNode `results`)."""

    def __init__(self, node) -> None:
        self.node = node
        self.by_uid: dict = {}      # uid -> [RemoteWait]
        self.heap: list = []        # (deadline, seq, RemoteWait)
        self._seq = 0
        self._reading: dict = {}    # uid -> True while a read runs, "again" after a hint

    def wait(self, uid: str, timeout_ms: int, callback, settled: bool = False) -> RemoteWait:
        """Wait up to `timeout_ms` ms (<= 0: one read only) for the result of job `uid`.
        `settled`: the first read waits until this node's changes so far are committed (a
        job leaving this node now: its row is written by that commit)."""
        now = self.node.e.clock.monotonic_ms()
        w = RemoteWait(self, uid, callback, now + max(0, timeout_ms), timeout_ms <= 0)
        self.by_uid.setdefault(uid, []).append(w)
        if timeout_ms > 0:
            self._seq += 1
            heappush(self.heap, (w.deadline, self._seq, w))
        self._read(uid, settled)
        return w

    def hint(self, uid: str) -> None:
        """A `jobgate_done` notification named `uid`: read its row again if anyone waits."""
        if uid in self.by_uid:
            self._read(uid)

    def expire(self) -> None:
        """Answer TIMED_OUT to every wait past its deadline."""
        now = self.node.e.clock.monotonic_ms()
        h = self.heap
        while h and h[0][0] <= now:
            w = heappop(h)[2]
            if not w.done:
                self._answer(w, TIMED_OUT)

    # ------------------------------------------------------ waiters of jobs that leave
    def take_over(self, job, w) -> None:
        """`w` (a core.records.ResultWaiter of `job`, waiting here) goes on waiting through
        the database: `job` leaves this node (spilled, so that any node's worker may take it).
        It keeps its deadline. A workq `run` (`w.run`) keeps a single server's rules: its
        job's row is deleted once answered; at its deadline, a job a worker holds (reserved
        with time left) is waited for until that lease's deadline, else deleted and
        TIMED_OUT; a job gone meanwhile answers TIMED_OUT."""
        e = self.node.e
        w.done = True   # the engine's timer and completion skip it from now on
        uid = job.uid if job.uid is not None else derived_uid(job.id)
        self._moved_wait(w, uid, max(1, w.at - e.clock.monotonic_ms()))

    def _moved_wait(self, w, uid: str, left_ms: int) -> None:
        def answer(outcome) -> None:
            if not w.run:
                w.moved = None
                w.callback(outcome)
            elif outcome is TIMED_OUT:
                self.node.query(job_uid, (uid, self.node.e.clock.wall_ms()), checked)
            else:
                w.moved = None
                self._drop_row(uid)
                w.callback(TIMED_OUT if outcome is None or isinstance(outcome, Exception)
                           else outcome)

        def checked(view) -> None:
            if w.moved is None:
                return   # cancelled meanwhile
            lease = None if view is None or isinstance(view, Exception) else view.lease
            if view is not None and not isinstance(view, Exception) and \
                    view.result is not None:
                answer(view)
            elif lease is not None and lease.left_ms > 0 and w.phase == 0:
                w.phase = 1   # a worker has it: wait for its result until its deadline
                self._moved_wait(w, uid, lease.left_ms)
            else:
                w.moved = None
                self._drop_row(uid)
                w.callback(TIMED_OUT)
        w.moved = self.wait(uid, left_ms, answer, settled=w.phase == 0)

    def cancel_moved(self, w) -> bool:
        """Withdraw `w`, a waiter taken over (its client is gone): a run's job is deleted.
        True if it was still waiting."""
        rw, w.moved = w.moved, None
        if rw is None:
            return False
        rw.cancel()
        if w.run:
            self._drop_row(rw.uid)
        return True

    def _drop_row(self, uid: str) -> None:
        """Delete the row of a workq run's job (answered, timed out or withdrawn)."""
        e = self.node.e
        j = e.journal
        self.node.query(delete_uid, (uid, None, "jobgate", e.clock.wall_ms(),
                                     j is not None and j.history), _ignore)

    # ------------------------------------------------------------------ inside
    def _read(self, uid: str, settled: bool = False) -> None:
        if uid in self._reading:
            self._reading[uid] = "again"   # a wait came while a read ran: read once more
            return
        self._reading[uid] = True
        asked = list(self.by_uid.get(uid, ()))   # the waits this read answers for

        def answered(view) -> None:
            again = self._reading.pop(uid, None) == "again"
            self._got(uid, view, asked)
            if again and uid in self.by_uid:
                self._read(uid)
        (self.node.query_settled if settled else self.node.query)(
            job_uid, (uid, self.node.e.clock.wall_ms()), answered)

    def _got(self, uid: str, view, asked: list) -> None:
        """Answer the waits of `uid` from `view` (its row's JobView, None or an Exception):
        every wait when the job finished or is gone (or the read failed); else only the waits
        that must not wait (timeout <= 0) and that were registered before this read
        started."""
        waits = self.by_uid.get(uid)
        if not waits:
            return
        if view is None or isinstance(view, Exception) or view.result is not None:
            outcome = view
        else:
            for w in asked:
                if w.final and not w.done:
                    self._answer(w, TIMED_OUT)
            return
        for w in list(waits):
            if not w.done:
                self._answer(w, outcome)

    def _answer(self, w: RemoteWait, outcome) -> None:
        w.done = True
        self._drop(w)
        w.callback(outcome)

    def _drop(self, w: RemoteWait) -> None:
        waits = self.by_uid.get(w.uid)
        if waits is not None:
            try:
                waits.remove(w)
            except ValueError:
                pass
            if not waits:
                del self.by_uid[w.uid]


def _ignore(outcome) -> None:
    """A query whose outcome nobody waits for (a run's row deleted: a failure leaves it to
    its TTL)."""
