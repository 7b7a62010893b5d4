"""The port's flow operations (a base of core.api.Port; core/flows.py has the rules): a job
that starts or stops waiting for other jobs, named by its id. Dialects reach these through
core.api only (bunqueue UpdateParent, RemoveChildDependency, MoveToWaitingChildren).

Units: ms; `self._engine` is the engine behind the port.
"""
from __future__ import annotations


class FlowOps:
    """Flow operations on one job (see the module docstring); expects `self._engine`."""

    def add_dependencies(self, id: int, uids: list, dialect: str,
                         extras: dict | None = None) -> bool:
        """Job `id` also waits for the jobs named by `uids` (uid strs) that have not completed:
        a ready, delayed or reserved job then waits (DELAYED, parked; history event
        `wait-children`) until they complete. `extras` are set first (stored with the
        change). False when the job is gone, finished or buried."""
        e = self._engine
        job = e.jobs.get(id)
        if job is None:
            return False
        if extras:
            e.update_ext(job, extras, persist=False)
        return e.add_dependencies(job, list(uids), dialect)

    def drop_dependencies(self, id: int, uids, dialect: str, extras: dict | None = None,
                          drop=()) -> list | None:
        """Job `id` no longer waits for the jobs `uids` (None: for any); a job waiting for
        nothing more becomes ready. Then `extras` are set and the keys in `drop` removed.
        Returns the uids that were unmet and are no longer waited for, or None when the job
        is gone."""
        e = self._engine
        job = e.jobs.get(id)
        if job is None:
            return None
        gone = e.drop_dependencies(job, None if uids is None else set(uids), dialect)
        if extras or drop:
            e.update_ext(job, extras or {}, drop)
        return gone

    def apply_child_failure(self, id: int) -> bool:
        """Job `id`, a flow child that failed for good, applies its ``parentPolicy`` to its
        parent now (core/flows.py; used when the link is made after the failure). False when
        it is gone or not failed."""
        e = self._engine
        job = e.jobs.get(id)
        if job is None or job.result is None or job.result_ok or job.ext is None:
            return False
        e._child_failed(job, job.ext.get("failedReason") or job.result)
        return True
