"""A connection's scoped view of the engine port: the one place where the access model
(core/access.py) is enforced, for every dialect at once (docs/operations.md, "TLS and access").

`ScopedPort(port, principal)` has the operations of core.api.Port, each in one of these groups
(a contract test checks that every public name of Port is in exactly one, so a new port
operation cannot bypass the check):

- QUEUE_ARG: the first argument is a queue name; a disallowed name raises AccessDenied.
- QUEUE_LIST: `reserve(owner, queues, ...)`: AccessDenied when any named queue is disallowed.
- OWNER_QUEUE: `reserve_many(owner, queue, ...)`: the second argument is checked.
- JOB_ID (first argument) / OWNER_JOB (second, after the owner): a job of a disallowed queue
  is absent: the operation answers as for a job that does not exist (None, False, NOT_ACTIVE).
- UID: `find(uid)`, `lookup(uid)`: None for a job of a disallowed queue; `forward_to`
  carries the principal to the node holding the job, which checks it there; `reach_jobs` /
  `reach_ids` do not name the node holding a job of a disallowed queue (it reads as missing;
  its row, when no node held it, is taken in and given back at the next commit, unseen).
- LISTING: queue_names / queue_views list allowed queues only; `subscribe` delivers events of
  allowed queues only (`count_events` counts those only, `observe` calls back for those only,
  `failed_counts` lists those only). Webhooks (issue 16): a restricted
  principal registers webhooks for an allowed queue only (none for every queue: AccessDenied
  "*"), and sees, enables, disables and removes only those (others are absent: None / False).
  Cron (issue 16): cron_get / cron_delete / cron_list see the cron schedules of allowed
  queues only (cron_set is QUEUE_ARG). The global forms (core/port_global.py):
  `queue_names_global` lists allowed queues only; `peek_global` answers None,
  `kick_job_global` / `delete_global` False for a job of a disallowed queue (in shared mode
  the statement checks the row's queue with the principal's `allows`); `dedup_global` looks
  up the keys of allowed queues only; `lookup_remote_many` answers jobs of allowed queues only. The
  dashboard's (core/port_pages.py): `queue_views_global`, `failed_counts_global` and
  `job_counts_all_global` list allowed queues only, `job_global` answers None for a job of a
  disallowed queue.
- PASS: names no queue or job (clock, server counts, owners, timers, ids; a dialect's own
  records, whose keys the dialect checks against the queue they name).

Costs nothing for the default configuration: `Port.scoped(None)` and a principal allowed `*`
return the port itself.
"""
from __future__ import annotations

from .access import AccessDenied, Principal
from .leases import NOT_ACTIVE

QUEUE_ARG = ("attach", "keep", "pause", "queue", "priority_counts", "put", "put_many", "dedup",
             "kick", "peek_ready", "peek_delayed", "peek_buried", "jobs", "dead_letters",
             "ready_page", "delayed_page", "run", "set_rate_limit", "clear_rate_limit",
             "set_concurrency", "clear_concurrency", "set_stall_config", "stall_config",
             "queue_limits", "queue_settings", "clear_queue_settings", "promote_jobs",
             "cron_set", "job_page", "failed_count", "drain_queue", "queue_global",
             "job_counts", "job_counts_global", "jobs_global", "peek_ready_global",
             "peek_delayed_global", "peek_buried_global", "kick_global", "pause_global",
             "priority_counts_global", "job_page_global", "drain_global")
QUEUE_LIST = ("reserve",)
OWNER_QUEUE = ("reserve_many",)
#: name -> the answer for a job that is not visible
JOB_ID = {"job": None, "peek": None, "check_lease": NOT_ACTIVE, "renew": False,
          "complete": False, "fail": False, "dead_letter": False, "remove": False,
          "requeue": False, "change_priority": False, "replace_payload": False,
          "update_extras": False, "wait_result": None, "kick_job": False,
          "add_dependencies": False, "drop_dependencies": None,
          "apply_child_failure": False,
          "progress_event": False}
OWNER_JOB = {"reserve_job": None, "release": False, "bury": False, "touch": False,
             "delete": False}
UID = ("find", "lookup", "wait_result_uid", "lookup_remote", "remove_remote",
       "forward_to", "reach_jobs", "reach_ids")
LISTING = ("queue_names", "queue_views", "subscribe", "count_events", "observe",
           "failed_counts", "add_webhook",
           "remove_webhook", "set_webhook_enabled", "webhook", "webhooks", "cron_get",
           "cron_delete", "cron_list", "queue_names_global", "peek_global", "kick_job_global",
           "delete_global", "dedup_global", "lookup_remote_many", "queue_views_global",
           "failed_counts_global", "job_global", "cron_list_global", "cron_get_global",
           "cron_delete_global", "job_counts_all_global")
PASS = ("clock", "persistence", "restore", "tick", "next_due", "set_wakeup", "set_policy",
        "draining", "set_draining", "commit_mark", "committed", "stats", "detach",
        "new_owner", "owner_idle", "release_owner", "cancel_wait", "burn_id", "uid_taken",
        "dependency_met", "cancel_result_wait", "create", "of", "scoped", "storage_down",
        "set_storage_state", "storage_state", "webhook_stats", "webhooks_version",
        "set_webhook_allow", "restore_webhooks", "webhook_delivered", "on_webhooks_changed",
        "dialect_records", "dialect_record", "set_dialect_record", "dialect_record_global",
        "dialect_records_global",
        "feed_stats", "shared",
        "share", "stats_global", "end_pauses", "serve_forwarded", "uids_taken_global",
        "wait_for", "count_up_global", "counter_global",
        # server-wide counters, as stats (core/shared_figures.py)
        "share_figures", "own_figures", "figures_of_other_nodes")


class ScopedPort:
    """The engine port as principal `principal` (core.access.Principal) may see it; see the
    module docstring. `base`: the core.api.Port behind it."""

    def __init__(self, base, principal: Principal) -> None:
        self.base = base
        self.principal = principal
        self._allows = principal.allows
        self._jobs = base._engine.jobs

    def __getattr__(self, name: str):
        if name in PASS:
            return getattr(self.base, name)
        raise AttributeError(f"ScopedPort has no operation {name!r}")

    def _check(self, queue: str) -> None:
        if not self._allows(queue):
            raise AccessDenied(queue)

    def _visible(self, id) -> bool:
        job = self._jobs.get(id)
        return job is None or self._allows(job.queue)

    # -------------------------------------------------------------- special cases
    def reserve(self, owner, queues, *args, **kw):
        """Port.reserve; AccessDenied when one of `queues` is disallowed."""
        for q in queues:
            self._check(q)
        return self.base.reserve(owner, queues, *args, **kw)

    def reserve_many(self, owner, queue, *args, **kw):
        """Port.reserve_many; AccessDenied when `queue` is disallowed."""
        self._check(queue)
        return self.base.reserve_many(owner, queue, *args, **kw)

    def find(self, uid):
        """Port.find; None for a job of a disallowed queue."""
        id = self.base.find(uid)
        return id if id is None or self._visible(id) else None

    def reach_jobs(self, uids: list, callback) -> None:
        """Port.reach_jobs; a job another node holds in a disallowed queue is not named (it
        reads as missing)."""
        self.base.reach_jobs(uids, callback, self._allows)

    def reach_ids(self, ids: list, callback) -> None:
        """Port.reach_ids, as reach_jobs."""
        self.base.reach_ids(ids, callback, self._allows)

    def lookup(self, uid):
        """Port.lookup; None for a job of a disallowed queue."""
        v = self.base.lookup(uid)
        return v if v is None or self._allows(v.queue) else None

    def _filtered(self, callback):
        def answer(v):
            ok = v is None or isinstance(v, Exception) or not hasattr(v, "queue") \
                or self._allows(v.queue)
            callback(v if ok else None)
        return answer

    def wait_result_uid(self, uid, timeout_ms, callback):
        """Port.wait_result_uid; a job of a disallowed queue is answered as no such job."""
        return self.base.wait_result_uid(uid, timeout_ms, self._filtered(callback))

    def forward_to(self, node, dialect, body, callback, principal=None) -> None:
        """Port.forward_to as this principal: the node holding the job checks its queue."""
        self.base.forward_to(node, dialect, body, callback, self.principal)

    def lookup_remote(self, uid, callback) -> None:
        """Port.lookup_remote; a job of a disallowed queue is answered as no such job."""
        self.base.lookup_remote(uid, self._filtered(callback))

    def remove_remote(self, uid, callback) -> None:
        """Port.remove_remote, only for a job of an allowed queue (else answered False)."""
        def checked(v):
            if v is None or isinstance(v, Exception):
                callback(False if v is None else v)
            elif not self._allows(v.queue):
                callback(False)
            else:   # the queue seen is the one deleted from (a uid reused meanwhile: no)
                self.base.remove_remote(uid, callback, v.queue)
        self.base.lookup_remote(uid, checked)

    def queue_views_global(self, callback) -> None:
        """Port.queue_views_global, allowed queues only."""
        allows = self._allows
        self.base.queue_views_global(lambda r: callback(
            r if isinstance(r, Exception) else [v for v in r if allows(v.name)]))

    def failed_counts_global(self, callback) -> None:
        """Port.failed_counts_global, allowed queues only."""
        allows = self._allows
        self.base.failed_counts_global(lambda r: callback(
            r if isinstance(r, Exception) else {q: n for q, n in r.items() if allows(q)}))

    def job_counts_all_global(self, callback) -> None:
        """Port.job_counts_all_global, allowed queues only."""
        allows = self._allows
        self.base.job_counts_all_global(lambda r: callback(
            r if isinstance(r, Exception) else {q: c for q, c in r.items() if allows(q)}))

    def job_global(self, id, callback) -> None:
        """Port.job_global; None for a job of a disallowed queue."""
        self.base.job_global(id, self._filtered(callback))

    def lookup_remote_many(self, uids, callback) -> None:
        """Port.lookup_remote_many; jobs of disallowed queues are left out."""
        def answer(views):
            if not isinstance(views, Exception):
                views = {u: v for u, v in views.items() if self._allows(v.queue)}
            callback(views)
        self.base.lookup_remote_many(uids, answer)

    def dedup_global(self, pairs, callback) -> None:
        """Port.dedup_global for the pairs of allowed queues only (a push to a disallowed
        queue is refused by its own check)."""
        self.base.dedup_global([p for p in pairs if self._allows(p[0])], callback)

    def queue_names(self) -> list:
        """Port.queue_names, allowed queues only."""
        return [n for n in self.base.queue_names() if self._allows(n)]

    def queue_views(self) -> list:
        """Port.queue_views, allowed queues only."""
        return [v for v in self.base.queue_views() if self._allows(v.name)]

    def cron_get(self, name):
        """Port.cron_get; None for a schedule of a disallowed queue."""
        v = self.base.cron_get(name)
        return v if v is None or self._allows(v.queue) else None

    def cron_delete(self, name) -> bool:
        """Port.cron_delete; False for a schedule of a disallowed queue."""
        v = self.base.cron_get(name)
        return v is not None and self._allows(v.queue) and self.base.cron_delete(name)

    def cron_list(self) -> list:
        """Port.cron_list, schedules of allowed queues only."""
        return [v for v in self.base.cron_list() if self._allows(v.queue)]

    def cron_list_global(self, callback) -> None:
        """Port.cron_list_global, schedules of allowed queues only."""
        allows = self._allows
        self.base.cron_list_global(lambda r: callback(
            r if isinstance(r, Exception) else [v for v in r if allows(v.queue)]))

    def cron_get_global(self, name, callback) -> None:
        """Port.cron_get_global; None for a schedule of a disallowed queue."""
        self.base.cron_get_global(name, self._filtered(callback))

    def cron_delete_global(self, name, callback) -> None:
        """Port.cron_delete_global, for a schedule of an allowed queue only (else False)."""
        self.base.cron_delete_global(name, callback, self._allows)

    def subscribe(self, queues=None, *args, **kw):
        """Port.subscribe; events of allowed queues only (AccessDenied for a named queue that
        is disallowed)."""
        for q in queues or ():
            self._check(q)
        sub = self.base.subscribe(queues, *args, **kw)
        sub.allow = self._allows
        return sub

    def count_events(self):
        """Port.count_events; counts of allowed queues only."""
        c = self.base.count_events()
        c.allow = self._allows
        return c

    def observe(self, fn) -> None:
        """Port.observe; transitions of jobs of allowed queues only."""
        allows = self._allows

        def seen(job_id, queue, *rest):
            if allows(queue):
                fn(job_id, queue, *rest)
        self.base.observe(seen)

    def failed_counts(self) -> dict:
        """Port.failed_counts, allowed queues only."""
        return {q: n for q, n in self.base.failed_counts().items() if self._allows(q)}

    def queue_names_global(self, callback) -> None:
        """Port.queue_names_global, allowed queues only."""
        allows = self._allows
        self.base.queue_names_global(
            lambda r: callback(r if isinstance(r, Exception) else [n for n in r if allows(n)]))

    def peek_global(self, id, callback) -> None:
        """Port.peek_global; None for a job of a disallowed queue."""
        self.base.peek_global(id, callback, self._allows)

    def kick_job_global(self, id, dialect, callback) -> None:
        """Port.kick_job_global; False for a job of a disallowed queue."""
        self.base.kick_job_global(id, dialect, callback, self._allows)

    def delete_global(self, owner, id, callback) -> None:
        """Port.delete_global; False for a job of a disallowed queue."""
        self.base.delete_global(owner, id, callback, self._allows)

    # ------------------------------------------------------------------ webhooks
    def _hook_visible(self, id) -> bool:
        h = self.base.webhook(id)
        return h is not None and h.queue is not None and self._allows(h.queue)

    def add_webhook(self, id, url, events, queue=None, secret=None):
        """Port.add_webhook; AccessDenied for a disallowed queue, or "*" without a queue."""
        if queue is None:
            raise AccessDenied("*")
        if queue.__class__ is str:
            self._check(queue)
        return self.base.add_webhook(id, url, events, queue, secret)

    def remove_webhook(self, id) -> bool:
        """Port.remove_webhook; False for a webhook this principal does not see."""
        return self._hook_visible(id) and self.base.remove_webhook(id)

    def set_webhook_enabled(self, id, enabled) -> bool:
        """Port.set_webhook_enabled; False for a webhook this principal does not see."""
        return self._hook_visible(id) and self.base.set_webhook_enabled(id, enabled)

    def webhook(self, id):
        """Port.webhook; None for a webhook this principal does not see."""
        return self.base.webhook(id) if self._hook_visible(id) else None

    def webhooks(self) -> list:
        """Port.webhooks, those of allowed queues only."""
        return [h for h in self.base.webhooks()
                if h.queue is not None and self._allows(h.queue)]


def _queue_op(name: str):
    def op(self, queue, *args, **kw):
        if not self._allows(queue):
            raise AccessDenied(queue)
        return getattr(self.base, name)(queue, *args, **kw)
    op.__name__ = name
    op.__doc__ = f"Port.{name}; AccessDenied when the queue is disallowed."
    return op


def _job_op(name: str, absent):
    def op(self, id, *args, **kw):
        if not self._visible(id):
            return absent
        return getattr(self.base, name)(id, *args, **kw)
    op.__name__ = name
    op.__doc__ = f"Port.{name}; {absent!r} for a job of a disallowed queue."
    return op


def _owner_job_op(name: str, absent):
    def op(self, owner, id, *args, **kw):
        if not self._visible(id):
            return absent
        return getattr(self.base, name)(owner, id, *args, **kw)
    op.__name__ = name
    op.__doc__ = f"Port.{name}; {absent!r} for a job of a disallowed queue."
    return op


for _n in QUEUE_ARG:
    setattr(ScopedPort, _n, _queue_op(_n))
for _n, _a in JOB_ID.items():
    setattr(ScopedPort, _n, _job_op(_n, _a))
for _n, _a in OWNER_JOB.items():
    setattr(ScopedPort, _n, _owner_job_op(_n, _a))
del _n, _a


def scoped(port, principal: Principal | None):
    """`port` as `principal` sees it: the port itself when `principal` is None (no access
    control configured) or allowed every queue, else a ScopedPort."""
    if principal is None or principal.unrestricted:
        return port
    return ScopedPort(port, principal)
