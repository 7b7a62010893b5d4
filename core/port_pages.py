"""The dashboard's reads and changes across nodes (issue 19; docs/dashboard.md "Several
nodes"), a base of core.api.Port as the other port_*.py: each has a callback form that, on a
single server, answers at once from the engine (queue_views, failed_counts, job, job_page,
drain_queue) and, on a node in shared mode, merges the engine's jobs with the rows no node or
another node holds (core/shared_pages.py), after this node's changes so far are committed.
On a database error the callback gets the Exception. Units: wall ms; ids are job ids.
"""
from __future__ import annotations

from .model import BURIED
from .port_global import _sr, _then, merged_view


#: a `before` cursor at or above this asks for the last page (the dashboard's END, 2**63):
#: nothing lies after it
PAST_EVERY_ID = 1 << 62


def _matches(job, state) -> bool:
    """True when `job` is in `state` (a core.paging FILTERS name: "failed" is a buried job
    with a result) or `state` is None."""
    if state is None:
        return True
    if state == "failed":
        return job.state is BURIED and job.result is not None
    return job.state == state


def _pages():
    from . import shared_pages   # shared mode only
    return shared_pages


class PageOps:
    """The dashboard's global operations of core.api.Port (see the module docstring)."""

    def queue_views_global(self, callback) -> None:
        """`callback(list of QueueView)`: queue_views(); in shared mode every queue with jobs
        (or a pause) on any node, each one's job counts and pause spanning every node (its
        connection figures are this node's): this node's queues first, in their order, then
        the others sorted. One scan of the jobs table (as beanstalk `stats`)."""
        e = self._engine
        sh = e.shared
        if sh is None:
            callback(self.queue_views())
            return
        now = self.clock.wall_ms()

        def merge(res):
            rows, pauses = res
            by_queue: dict = {}
            for r in rows:
                by_queue.setdefault(r[0], []).append(r)
            local = [v.name for v in self.queue_views()]
            seen = set(local)
            names = local + sorted(n for n in set(by_queue) | set(pauses) if n not in seen)
            out = []
            for n in names:
                v = merged_view(e, n, by_queue.get(n, []), pauses.get(n), now)
                if v is not None:
                    out.append(v)
            return out
        sh.query_settled(_sr().counts, (sh.node, None, now), _then(callback, merge))

    def failed_counts_global(self, callback) -> None:
        """`callback({queue: jobs failed for good})`: failed_counts(); in shared mode every
        node's buried jobs with a result."""
        e = self._engine
        sh = e.shared
        if sh is None:
            callback(self.failed_counts())
            return

        def merge(db: dict) -> dict:
            out = self.failed_counts()
            for q, n in db.items():
                out[q] = out.get(q, 0) + n
            return out
        sh.query_settled(_pages().failed_counts, (sh.node,), _then(callback, merge))

    def job_counts_all_global(self, callback) -> None:
        """`callback({queue: counts})`: every queue's job_counts (job_counts_global's dict
        per queue: bunqueue's Prometheus gauges); in shared mode every node's, queues with
        rows anywhere or a pause included. On a database error `callback` gets the
        Exception."""
        e = self._engine
        sh = e.shared
        if sh is None:
            callback({n: self.job_counts(n) for n in e.queue_order})
            return
        now = self.clock.wall_ms()

        def merge(res):
            db, pauses = res
            out = {n: self.job_counts(n) for n in e.queue_order}
            for q, c in db.items():
                mine = out.get(q)
                if mine is None:
                    out[q] = dict(c, paused=False)
                else:
                    for k, n in c.items():
                        mine[k] += n
            for q, p in pauses.items():
                if p[0] > now:
                    out.setdefault(q, self.job_counts(q))["paused"] = True
            return out
        sh.query_settled(_pages().job_counts_all, (sh.node, now), _then(callback, merge))

    def job_global(self, id: int, callback) -> None:
        """`callback(JobView | None)`: job(id); in shared mode a job this node does not hold
        is read from its row (as its holder last committed it)."""
        e = self._engine
        v = self.job(id)
        if v is not None or e.shared is None:
            callback(v)
            return
        e.shared.query_settled(_sr().job, (id, self.clock.wall_ms()), callback)

    def job_page_global(self, queue: str, state, after, before, limit: int,
                        callback) -> None:
        """`callback((views, more_before, more_after) | None)`: job_page(); in shared mode the
        page merges the jobs of `queue` this engine has (put here, claimed or taken in:
        O(jobs here), read once this node's changes so far are committed) with the rows no
        node or another node holds (by id; None when the queue has jobs nowhere and does not
        exist here). The flags may say True where nothing more is (a "maybe", as job_page's).
        Raises ValueError as job_page does."""
        e = self._engine
        local = self.job_page(queue, state, after, before, limit)   # checks the arguments
        if e.shared is None:
            callback(local)
            return

        def merge(db):
            views, more = db
            mine = [self.job(j.id) for j in list(e.jobs.values())
                    if j.queue == queue and _matches(j, state)
                    and (after is None or j.id > after) and (before is None or j.id < before)]
            if not mine and not views and after is None and before is None \
                    and queue not in e.queues:
                return None
            by_id = {v.id: v for v in views}
            by_id.update((v.id, v) for v in mine)
            ids = sorted(by_id)
            if before is not None:
                page = ids[-limit:]
                return ([by_id[i] for i in page], more or len(ids) > limit,
                        before < PAST_EVERY_ID)
            page = ids[:limit]
            return ([by_id[i] for i in page], after is not None, more or len(ids) > limit)
        e.shared.query_settled(_pages().page, (e.shared.node, queue, state, after, before,
                                               limit, self.clock.wall_ms()),
                               _then(callback, merge))

    def drain_global(self, queue: str, dialect: str, callback) -> None:
        """`callback(int)`: drain_queue(queue, dialect) (event `drain`); in shared mode also the
        waiting rows of `queue` no node holds (ready, and delayed that are not flow parents
        parked for their children), each with its history row; how many in all."""
        e = self._engine
        n = self.drain_queue(queue, dialect)
        if e.shared is None:
            callback(n)
            return
        e.shared.query_settled(_pages().drain, (queue, dialect, self.clock.wall_ms(),
                                                self._history()),
                               _then(callback, lambda m: n + m))


__all__ = ["PageOps"]
