"""Flows: parents that wait for their children, in every dialect (jobgate issue 16; the
cross-dialect rule is in docs/mapping.md, "Flows (issue 16)").

A flow is built from the dependencies of core/extras.py: a parent is a job whose extras hold
the uids it waits for in ``deps``, so it waits in DELAYED at the far deadline BLOCKED_MS and is
served by no dialect (beanstalk reserve, workq lease, bunqueue PULL; beanstalk `kick`,
`kick-job` and `reserve-job` leave it alone) until its last child is done: completed (bunqueue
ACK, workq complete) or deleted by the beanstalk connection that reserved it. `Flows` is a base
of core.engine.Engine and adds what a flow needs beyond that, with the extras keys the engine
reads or writes itself (stored with the job, so they survive a restart):

- ``parentId`` (uid str, on a child): the parent whose ``deps`` name this child.
- ``parentPolicy`` (on a child): what the child's final failure (failed for good: buried with
  a result) does to its parent, as bunqueue 2.9.5 does it (application/operations/ack/
  failure.js, queue-manager/flow-options.js and flow-failures.js):
  ``"fail"`` (failParentOnFailure): the parent fails for good too, with the result
  ``Child job <uid> failed: <error>`` (also kept as ``dlqError``, with ``dlqReason``
  "unknown"); ``"remove"`` (removeDependencyOnFailure): the child is
  no longer waited for; ``"ignore"`` (ignoreDependencyOnFailure): the same, and the error is
  kept in the parent's ``ignoredFailures``; ``"continue"`` (continueParentOnFailure): the
  error is kept in the parent's ``failedChildren`` and the parent waits for nothing more.
  Without a policy the parent keeps waiting (the reference's default too).
- ``ignoredFailures`` / ``failedChildren`` (on a parent): {"<queue>:<uid>": error str}.
- ``keptValues`` (on a parent): {uid: [result bytes, resultFmt]} of completed children that
  were deleted since (the parent can still read their results).
- ``dependsOn`` (a dialect's list of declared dependencies, when present): a child that is no
  longer waited for is removed from it too.

Units: ms; deadlines are monotonic ms.
"""
from __future__ import annotations

from . import failures
from .extras import BLOCKED_MS
from .model import BURIED, COMPLETED, DELAYED, RESERVED
from .records import Job
from .transitions import check

#: The values of the ``parentPolicy`` extra.
POLICIES = ("fail", "remove", "ignore", "continue")


def child_key(job: Job, uid: str) -> str:
    """How a parent names a child in its failure maps: "<queue>:<uid>" (bunqueue's key)."""
    return f"{job.queue}:{uid}"


def failure_text(error) -> str:
    """A child's failure as its parent records it: `error` (str, bytes or None) as text,
    "unknown error" when it gave none."""
    if error is None or error == b"":
        return "unknown error"
    if error.__class__ is bytes:
        return error.decode("utf-8", "replace")
    return str(error)


class Flows:
    """Waiting for children and what a child's failure does; expects the Engine attributes
    (jobs, queues, dependents, clock) and the Extras / Outcomes methods."""

    def is_parked(self, job: Job) -> bool:
        """True while `job` waits in DELAYED at the far deadline for dependencies."""
        return (job.state is DELAYED and job.ext is not None and bool(job.ext.get("deps"))
                and job.ready_at >= self.clock.monotonic_ms() + BLOCKED_MS // 2)

    def add_dependencies(self, job: Job, uids: list, dialect: str) -> bool:
        """`job` also waits for the jobs `uids` that have not completed (a ready, delayed or
        reserved job then waits in DELAYED at BLOCKED_MS: operation `wait-children`).
        False when `job` is finished (completed, or failed for good) or buried."""
        if job.result is not None or job.state is COMPLETED or job.state is BURIED:
            return False
        unmet = [u for u in uids if not self.dependency_met(u)]
        if not unmet:
            return True
        ext = dict(job.ext) if job.ext else {}
        deps = list(ext.get("deps") or ())
        deps += [u for u in unmet if u not in deps]
        ext["deps"] = deps
        job.ext = ext
        for u in unmet:
            self.dependents.setdefault(u, set()).add(job.id)
        if self.is_parked(job):
            self._mark(job)
            return True
        prev = job.state
        row = check(prev, "wait-children", DELAYED)
        q = self.queues[job.queue]
        self._leave(job, q)
        self._to_delayed(job, q, self.clock.monotonic_ms() + BLOCKED_MS)
        self._emit(job, row, prev, dialect)
        return True

    def drop_dependencies(self, job: Job, uids, dialect: str) -> list:
        """`job` no longer waits for the jobs `uids` (None: for any); they also leave its
        ``dependsOn`` list when it has one. A parked job waiting for nothing more becomes
        ready at once (its ``runAt`` extra: now, as bunqueue sets it; its own delay is not
        waited for, as in bunqueue). Returns the uids that were unmet and are dropped."""
        ext = job.ext
        if ext is None:
            return []
        deps = list(ext.get("deps") or ())
        gone = deps if uids is None else [u for u in deps if u in uids]
        ext = dict(ext)
        left = [u for u in deps if u not in gone]
        if left:
            ext["deps"] = left
        else:
            ext.pop("deps", None)
        if uids is not None and ext.get("dependsOn"):
            ext["dependsOn"] = [u for u in ext["dependsOn"] if u not in uids]
        job.ext = ext
        self._unlink_deps(job.id, gone)
        if not left and job.state is DELAYED and job.ready_at >= (
                self.clock.monotonic_ms() + BLOCKED_MS // 2):
            ext = dict(job.ext)
            ext["runAt"] = self.clock.wall_ms()   # due now (flow-options.js)
            job.ext = ext
            self.requeue(job, 0, "ready", dialect)
        else:
            self._mark(job)
        return gone

    def deps_released(self, job: Job) -> None:
        """Parked `job` has no unmet dependency left (the last one completed): it is ready,
        or delayed until created + its own delay when that is still ahead (bunqueue
        dependencyProcessor.js: runAt decides). A job with a declared ``dependsOn`` list
        gets a timeline entry for the state it enters (waiting / prioritized / delayed, as
        bunqueue names them: core/failures.py keeps the timeline)."""
        now = self.clock.wall_ms()
        left = job.created_ms + job.delay_ms - now if job.delay_ms else 0
        ext = job.ext
        if ext is not None and "dependsOn" in ext:
            state = "delayed" if left > 0 else ("prioritized" if job.priority < 0
                                                 else "waiting")
            ext = dict(ext)
            ext["timeline"] = list(ext.get("timeline", ())) + [
                {"state": state, "timestamp": float(now)}]
            job.ext = failures.trimmed(ext)
        self.requeue(job, left if left > 0 else 0, "ready", "jobgate")

    def _keep_child_value(self, child: Job) -> None:
        """Completed `child` is being deleted (removeOnComplete, result retention, any
        dialect's delete): its result stays readable for its unfinished parent, in the
        parent's ``keptValues`` {uid: [result bytes, resultFmt]} (bunqueue keeps a child's
        result for its parent the same way: dependencyResults)."""
        pid = child.ext.get("parentId")
        parent = self.find_uid(pid)
        value = [child.result, child.ext.get("resultFmt") or 0]
        if parent is None:
            if self.shared is not None:   # the parent is on another node or in the database
                self.shared.flows.note(pid, ("kept", self.uid_of(child), value))
            return
        self.keep_value(parent, self.uid_of(child), value)

    def keep_value(self, parent: Job, uid: str, value: list) -> None:
        """Keep child `uid`'s result `value` ([result bytes, resultFmt]) in unfinished
        `parent`'s ``keptValues`` (see _keep_child_value)."""
        if parent.result is not None or parent.state is COMPLETED:
            return
        ext = dict(parent.ext) if parent.ext else {}
        kept = dict(ext.get("keptValues") or {})
        kept[uid] = value
        ext["keptValues"] = kept
        parent.ext = ext
        self._mark(parent)

    # ------------------------------------------------------------ failures
    def _child_failed(self, child: Job, error) -> None:
        """`child` failed for good (Outcomes._finish): apply its ``parentPolicy`` to its
        parent (see the module docstring). `error`: the failure's text (str, bytes or None)."""
        ext = child.ext
        policy = ext.get("parentPolicy")
        if policy is None:
            return
        pid = ext.get("parentId")
        parent = self.find_uid(pid)
        uid = self.uid_of(child)
        text = failure_text(error)
        if parent is None:
            if self.shared is not None:   # the parent is on another node or in the database
                self.shared.flows.note(pid, ("failed", uid, child_key(child, uid), policy,
                                             text))
            return
        self.child_failure(parent, uid, child_key(child, uid), policy, text)

    def child_failure(self, parent: Job, uid: str, key: str, policy: str, text: str) -> None:
        """Child `uid` (named `key`, see child_key) of `parent` failed for good with `text`:
        apply its `policy` (see the module docstring) to `parent`."""
        if parent.result is not None or parent.state is COMPLETED or parent.state is RESERVED:
            return
        if policy == "fail":
            msg = f"Child job {uid} failed: {text}"
            self._drop_quietly(parent)
            if self.dead_letter(parent, msg.encode(), "jobgate"):
                ext = failures.dead(parent.ext, self.clock.wall_ms(), "unknown")
                ext["dlqError"] = msg   # the dead letter's error; no failed attempt of its own
                parent.ext = ext
                self._mark(parent)
            return
        if uid not in ((parent.ext or {}).get("deps") or ()):
            return   # applied already (a note sent again by the shared sweep: shared_flows)
        if policy == "continue":
            self._record(parent, "failedChildren", key, text)
            self.drop_dependencies(parent, None, "jobgate")
            return
        if policy == "ignore":
            self._record(parent, "ignoredFailures", key, text)
        if policy in ("ignore", "remove"):
            self.drop_dependencies(parent, [uid], "jobgate")

    def _record(self, parent: Job, key: str, child: str, text: str) -> None:
        ext = dict(parent.ext) if parent.ext else {}
        m = dict(ext.get(key) or {})
        m[child] = text
        ext[key] = m
        parent.ext = ext
        self._mark(parent)

    def _drop_quietly(self, job: Job) -> None:
        """Forget every unmet dependency of `job` without moving it (it is about to fail)."""
        if job.ext is None or not job.ext.get("deps"):
            return
        self._unlink_deps(job.id, job.ext["deps"])
        ext = dict(job.ext)
        del ext["deps"]
        job.ext = ext


__all__ = ["Flows", "POLICIES", "child_key", "failure_text"]
