"""The port's global reads and admin changes (a base of core.api.Port; issue 19, item 4):
beanstalk's stats, stats-tube, list-tubes, peek*, stats-job, kick, kick-job, delete and
pause-tube, and bunqueue's GetJobCounts and Count, as operations with a callback form, so that a node in shared mode can answer them
from the database every node shares (docs/mapping.md, "Shared mode").

Each `*_global` operation calls `callback(answer)` exactly once:

- single-node mode: at once, on the caller's stack, with what the plain operation returns
  (`stats()`, `queue()`, `peek()`, `kick()` ...): nothing changes for a single server;
- shared mode: on the event loop, when the statement of core/shared_reads.py (reads) or
  core/shared_changes.py (kick, kick-job, delete, pause) has run on the
  node's claim thread (core.shared.SharedNode.query_settled: after every change made on this
  node so far is committed). A job this node holds (it is in the engine) is answered from the
  engine at once, as in single-node mode. On a database error `callback` gets the Exception.

Counts in shared mode are the database's (rows held by this node left out) plus this node's
engine; connection figures (using, watching, waiting, total_jobs, cmd counts) stay per node.
Units: ms (wall ms in the database). `self._engine` is the engine behind the port.
"""
from __future__ import annotations

from .model import BURIED, COMPLETED, DELAYED, READY, RESERVED, QueueView, ServerStats
from .views import job_view, queue_view, server_stats


def _sr():
    from . import shared_reads   # loads msgpack and the schema: shared mode only
    return shared_reads


def _sc():
    from . import shared_changes   # shared mode only
    return shared_changes


def _then(callback, convert):
    """A query callback: an Exception passes through, anything else goes through `convert`."""
    def cb(x):
        callback(x if isinstance(x, Exception) else convert(x))
    return cb


#: QueueView / ServerStats field of each state
_STATE_FIELD = {READY: 1, DELAYED: 3, RESERVED: 5, BURIED: 6, COMPLETED: 7}
_STATS_FIELD = {READY: 1, RESERVED: 2, DELAYED: 3, BURIED: 4, COMPLETED: 5}


def merged_view(e, name: str, rows: list, pause, now_ms: int) -> QueueView | None:
    """Queue `name` as this engine has it (None: not here) with the database's `rows` of it
    added ([(queue, state, jobs, urgent)], shared_reads.counts) and its `pause` across nodes
    ((until_ms, pause_ms) or None) at wall `now_ms`; None when it exists nowhere."""
    q = e.queues.get(name)
    if q is None and not rows and pause is None:
        return None
    if q is not None:
        v = list(queue_view(e, q))
    else:
        v = [name, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, False, 0, 0, False, False]
    for _, state, n, urgent in rows:
        i = _STATE_FIELD.get(state)
        if i is not None:
            v[i] += n
        v[2] += urgent
    if pause is not None:
        left = pause[0] - now_ms
        if left > 0:
            v[14], v[15], v[16] = True, pause[1], max(left, v[16])
    return QueueView(*v)


class GlobalOps:
    """Global reads and admin changes of core.api.Port (see the module docstring)."""

    def _history(self) -> bool:
        j = self._engine.journal
        return j is not None and j.history

    # ----------------------------------------------------------------- reads
    def stats_global(self, callback) -> None:
        """`callback(ServerStats)`: the server's counts (stats()); in shared mode the job
        counts and `queues` span every node, the rest is this node's."""
        e = self._engine
        sh = e.shared
        if sh is None:
            callback(self.stats())
            return

        def merge(res):
            rows, pauses = res
            st = list(server_stats(e))
            names = set(e.queues) | set(pauses)
            for q, state, n, urgent in rows:
                names.add(q)
                i = _STATS_FIELD.get(state)
                if i is not None:
                    st[i] += n
                st[0] += urgent
            st[6] = len(names)
            return ServerStats(*st)
        sh.query_settled(_sr().counts, (sh.node, None, self.clock.wall_ms()),
                         _then(callback, merge))

    def queue_global(self, name: str, callback) -> None:
        """`callback(QueueView | None)`: queue `name` (queue()); in shared mode its job counts
        and pause span every node, its connection figures and counters are this node's; None
        when it exists nowhere."""
        e = self._engine
        sh = e.shared
        if sh is None:
            callback(self.queue(name))
            return

        def merge(res):
            rows, pauses = res
            return merged_view(e, name, rows, pauses.get(name), self.clock.wall_ms())
        sh.query_settled(_sr().counts, (sh.node, name, self.clock.wall_ms()),
                         _then(callback, merge))

    def job_counts(self, name: str) -> dict:
        """The job counts of queue `name` by state in this engine (job_counts_global's
        dict)."""
        q = self.queue(name)
        if q is None:
            return {READY: 0, "prioritized": 0, DELAYED: 0, "blocked": 0, RESERVED: 0,
                    BURIED: 0, COMPLETED: 0, "paused": False}
        prio = sum(n for rank, n in self.priority_counts(name, delayed=False).items()
                   if rank < 0)
        return {READY: q.ready, "prioritized": prio, DELAYED: q.delayed, "blocked": q.blocked,
                RESERVED: q.reserved, BURIED: q.buried, COMPLETED: q.completed,
                "paused": q.paused}

    def job_counts_global(self, name: str, callback) -> None:
        """`callback(dict)`: the job counts of queue `name` by state, for bunqueue's
        GetJobCounts and Count: {"ready", "prioritized" (ready jobs with a rank below 0, in
        `ready` too), "delayed", "blocked" (delayed for dependencies, in `delayed` too),
        "reserved", "buried", "completed", "paused" (bool)}; all 0 for a queue that exists
        nowhere. In shared mode the counts span every node (rows held by none or by another
        node, plus this node's engine; `completed` reads the table); on a database error
        `callback` gets the Exception."""
        e = self._engine
        sh = e.shared
        if sh is None:
            callback(self.job_counts(name))
            return

        def merge(res):
            db, pauses = res
            out = self.job_counts(name)
            for k, n in db.items():
                out[k] += n
            p = pauses.get(name)
            if p is not None and p[0] > self.clock.wall_ms():
                out["paused"] = True
            return out
        sh.query_settled(_sr().job_counts, (sh.node, name, self.clock.wall_ms()),
                         _then(callback, merge))

    def priority_counts_global(self, name: str, callback) -> None:
        """`callback({rank: jobs})`: the ready and delayed jobs of queue `name` per rank, not
        counting those waiting for dependencies (priority_counts); in shared mode those of
        every node (rows held by none or by another node added to this engine's); on a
        database error `callback` gets the Exception."""
        e = self._engine
        sh = e.shared
        if sh is None:
            callback(self.priority_counts(name))
            return

        def merge(db: dict) -> dict:
            out = self.priority_counts(name)
            for rank, n in db.items():
                out[rank] = out.get(rank, 0) + n
            return out
        sh.query_settled(_sr().priority_counts, (sh.node, name, self.clock.wall_ms()),
                         _then(callback, merge))

    def jobs_global(self, queue: str, where, newest_first: bool, limit: int,
                    callback) -> None:
        """`callback(list of JobView)`: the first `limit` jobs of `queue` by id (descending
        with `newest_first`) among those `where` selects: None (every state) or a list of
        (state, rank) filters, OR-ed, rank None (any), "neg" (priority below 0), "nonneg",
        "blocked" (waiting for dependencies) or "free" (not blocked) (bunqueue GetJobs). In shared mode the jobs of every node and of the database (the
        database's read by id, at most `limit` rows); on a database error `callback` gets
        the Exception."""
        e = self._engine

        def keep(j) -> bool:
            if where is None:
                return True
            for state, rank in where:
                if j.state is not state:
                    continue
                if rank is None or (rank == "neg" and j.priority < 0) or (
                        rank == "nonneg" and j.priority >= 0) or (
                        rank == "blocked" and j.blocked) or (rank == "free" and not j.blocked):
                    return True
            return False
        local = [j for j in self.jobs(queue) if keep(j)]
        if newest_first:
            local.reverse()
        sh = e.shared
        if sh is None:
            callback(local[:limit])
            return

        def merge(rows):
            out = sorted(local + rows, key=lambda j: j.id, reverse=newest_first)
            return out[:limit]
        sh.query_settled(_sr().queue_jobs, (sh.node, queue, where, newest_first, limit,
                                            self.clock.wall_ms()), _then(callback, merge))

    def queue_names_global(self, callback) -> None:
        """`callback(list of str)`: queue_names(); in shared mode followed by the queues that
        have jobs (or a pause) in the database only, sorted."""
        e = self._engine
        sh = e.shared
        if sh is None:
            callback(self.queue_names())
            return

        def merge(names):
            local = list(e.queue_order)
            seen = set(local)
            return local + [n for n in names if n not in seen]
        sh.query_settled(_sr().queue_names, (self.clock.wall_ms(),), _then(callback, merge))

    def peek_global(self, id: int, callback, allows=None) -> None:
        """`callback(JobView | None)`: job `id` in a state beanstalk sees (peek()); in shared
        mode a job this node does not hold is read from its row (time left from its
        ready_at_ms or, reserved on another node, its lease_until_ms). `allows(queue)`: a job
        of a queue it refuses is None."""
        e = self._engine
        sh = e.shared
        job = e.peek(id)
        if sh is None or job is not None or id in e.jobs:
            v = None if job is None else job_view(e, job)
            callback(None if v is None or (allows is not None and not allows(v.queue)) else v)
            return

        def seen(v):
            if v is None or v.state is COMPLETED or (allows is not None and not allows(v.queue)):
                return None
            return v
        sh.query_settled(_sr().job, (id, self.clock.wall_ms()), _then(callback, seen))

    def _top(self, queue: str, state: str, local, callback) -> None:
        e = self._engine
        sh = e.shared
        if sh is None:
            callback(local(queue))
            return

        def best(v):
            mine = local(queue)   # a job of this node's engine (claimed, not yet served)
            if mine is None:
                return v
            if v is None:
                return mine
            if state is READY:
                return mine if (mine.priority, mine.id) < (v.priority, v.id) else v
            if state is DELAYED:
                return mine if mine.due_ms < v.due_ms else v
            return v
        sh.query_settled(_sr().top, (queue, state, self.clock.wall_ms()), _then(callback, best))

    def peek_ready_global(self, queue: str, callback) -> None:
        """`callback(JobView | None)`: peek_ready(queue), across nodes in shared mode."""
        self._top(queue, READY, self.peek_ready, callback)

    def peek_delayed_global(self, queue: str, callback) -> None:
        """`callback(JobView | None)`: peek_delayed(queue), across nodes in shared mode."""
        self._top(queue, DELAYED, self.peek_delayed, callback)

    def peek_buried_global(self, queue: str, callback) -> None:
        """`callback(JobView | None)`: peek_buried(queue), across nodes in shared mode (the
        buried job put first: the database keeps no bury time)."""
        self._top(queue, BURIED, self.peek_buried, callback)

    # --------------------------------------------------------------- changes
    def kick_global(self, queue: str, bound: int, dialect: str, callback) -> None:
        """`callback(int)`: kick(queue, bound, dialect); in shared mode the jobs of the
        database (buried first, else delayed), each kicked by one node only."""
        e = self._engine
        sh = e.shared
        if sh is None:
            callback(self.kick(queue, bound, dialect))
            return
        n = e.kick(queue, bound, dialect)   # this node's own (changed since the last commit)
        if n >= bound:
            callback(n)
            return
        sh.query_settled(_sc().kick, (queue, bound - n, dialect, self.clock.wall_ms(),
                                      self._history()), _then(callback, lambda k: n + k))

    def _job_here_or_db(self, id: int, callback, allows, here, db) -> None:
        """`callback(here())` for a job in this node's engine (or on a single server), False
        for one of a queue `allows` refuses; else, with `(fn, args) = db()`,
        `callback(fn(conn, *args))` in the database after this node's commits."""
        e = self._engine
        job = e.jobs.get(id)
        if e.shared is None or job is not None:
            if job is not None and allows is not None and not allows(job.queue):
                callback(False)
                return
            callback(here())
            return
        e.shared.query_settled(*db(), callback)

    def kick_job_global(self, id: int, dialect: str, callback, allows=None) -> None:
        """`callback(bool)`: kick_job(id, dialect); in shared mode a job not in this node's
        engine is kicked in the database. `allows` as in peek_global."""
        self._job_here_or_db(id, callback, allows, lambda: self.kick_job(id, dialect),
                             lambda: (_sc().kick_job, (id, dialect, self.clock.wall_ms(),
                                                       self._history(), allows)))

    def delete_global(self, owner, id: int, callback, allows=None) -> None:
        """`callback(bool)`: delete(owner, id); in shared mode a job not in this node's engine
        is deleted from the database when it is ready, delayed or buried (reserved on another
        node: False). `allows` as in peek_global."""
        self._job_here_or_db(id, callback, allows, lambda: self.delete(owner, id),
                             lambda: (_sc().delete, (id, owner._o.dialect, self.clock.wall_ms(),
                                                     self._history(), allows)))

    def pause_global(self, queue: str, ms: int, callback, here: bool = True) -> None:
        """`callback(bool)`: pause(queue, ms); in shared mode also for every node (claims
        skip the queue until the pause ends; table queue_pauses); False when the queue exists
        nowhere. `here=False`: the caller paused this node's queue already (counted once)."""
        e = self._engine
        sh = e.shared
        here = self.pause(queue, ms) if here else queue in e.queues
        if sh is None:
            callback(here)
            return
        sh.settings.pausing(queue, callback)
        sh.query_settled(_sc().pause, (queue, ms, self.clock.wall_ms(), here, sh.calls.number),
                         lambda r: sh.settings.paused(queue, r))

    def end_pauses(self, conn, now_ms: int) -> int:
        """Shared mode, the leader's round (gateway/shared.py, on its claim thread with its
        connection `conn`): end the pauses across nodes due by wall ms `now_ms`, notifying
        their queues. Returns how many. Raises the driver's errors."""
        return _sc().end_pauses(conn, now_ms)
