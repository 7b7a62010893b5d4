"""The port's queue settings and cron operations (a base of core.api.Port): rate and
concurrency limits and the stall config per queue (core/limits.py has the rules), and cron
schedules (core/cron.py). Dialects reach these through core.api only (bunqueue RateLimit,
SetConcurrency, SetStallConfig, GetQueueLimits, Cron, CronList, ...).

Units: ms; `self._engine` is the engine behind the port. Every change is stored with the next
commit (table queue_settings / cron_schedules) and survives a restart.
"""
from __future__ import annotations

from .cron import CronJob, CronView


class SettingsOps:
    """Queue settings and cron schedules (see the module docstring); expects `self._engine`."""

    # ------------------------------------------------ queue limits (core/limits.py)
    # Canonical for every dialect (docs/mapping.md, "Queue limits (issue 16)"): a reserve,
    # lease or PULL on a queue at its limit waits, and is served longest-waiter first when
    # the limit allows. Each change is stored with the next commit and survives a restart.
    def set_rate_limit(self, queue: str, limit, duration_ms=None, ttl_ms=None) -> None:
        """At most `limit` (int or float; below 1: none) reservations of `queue` per window of
        `duration_ms` ms (None or not > 0: 1000), as a token bucket that starts full;
        `ttl_ms` (> 0): the limit ends by itself that many ms from now."""
        self._engine.set_rate_limit(queue, limit, duration_ms, ttl_ms)

    def clear_rate_limit(self, queue: str) -> None:
        """Remove the rate limit of `queue` (if any)."""
        self._engine.clear_rate_limit(queue)

    def set_concurrency(self, queue: str, limit) -> None:
        """At most `limit` (a number) jobs of `queue` reserved at once, in every dialect."""
        self._engine.set_concurrency(queue, limit)

    def clear_concurrency(self, queue: str) -> None:
        """Remove the concurrency limit of `queue` (if any)."""
        self._engine.clear_concurrency(queue)

    def set_stall_config(self, queue: str, config: dict) -> None:
        """Merge `config` into the stall config of `queue` (bunqueue SetStallConfig); its
        `maxStalls` bounds the lock expiries of the queue's jobs (core/limits.py)."""
        self._engine.set_stall_config(queue, config)

    def stall_config(self, queue: str) -> dict:
        """The stall config of `queue` (defaults: {enabled, stallInterval, maxStalls,
        gracePeriod} = {True, 30000, 3, 5000})."""
        return self._engine.stall_config(queue)

    def queue_limits(self, queue: str, max_jobs=None) -> dict:
        """{rateLimit: {max, duration} | None, rateLimitTtl (ms; -2: no rate limit),
        concurrencyLimit, maxed} of `queue` (bunqueue GetQueueLimits)."""
        return self._engine.limit_status(queue, max_jobs)

    def queue_settings(self, queue: str) -> dict:
        """Every setting of `queue`: {rateLimit, rateLimitDuration, rateLimitExpiresAt (wall
        ms), concurrencyLimit, stallConfig}, None where unset."""
        return self._engine.settings_of(queue)

    def clear_queue_settings(self, queue: str) -> None:
        """Forget the limits and stall config of `queue` (bunqueue Obliterate)."""
        self._engine.clear_queue_settings(queue)

    # ------------------------------------------------------------- cron (core/cron.py)
    def cron_set(self, queue: str, name: str, job: CronJob, schedule: str | None = None,
                 repeat_every_ms: int | None = None, timezone: str | None = None,
                 max_limit: int | None = None, immediately: bool = False,
                 skip_missed_on_restart: bool = True, info: dict | None = None):
        """Create or replace cron schedule `name` firing `job` (a CronJob) into `queue` at
        each due time of `schedule` (5 or 6 fields, in IANA zone `timezone`) or every
        `repeat_every_ms` ms; stored with the next commit. Returns (CronView, existed).
        Raises CronError for invalid timing (nothing changes)."""
        return self._engine.cron.set(queue, name, job, schedule, repeat_every_ms, timezone,
                                     max_limit, immediately, skip_missed_on_restart, info)

    def cron_get(self, name: str) -> CronView | None:
        """Schedule `name`, or None."""
        return self._engine.cron.get(name)

    def cron_delete(self, name: str) -> bool:
        """Delete schedule `name` (stored with the next commit); False when there is none."""
        return self._engine.cron.delete(name)

    def cron_list(self) -> list:
        """Every schedule (CronView), in creation order."""
        return self._engine.cron.list()

    # Across nodes (shared mode, docs/scaling.md): the stored schedules are every node's (the
    # leader fires them from the database); these read and delete them there, once this
    # node's changes so far are committed. On a single server they answer at once from the
    # engine. On a database error `callback` gets the Exception.
    def cron_list_global(self, callback) -> None:
        """`callback(list of CronView)`: cron_list(); in shared mode every node's schedules,
        as stored (next run and executions as the leader moved them)."""
        e = self._engine
        if e.shared is None:
            callback(self.cron_list())
            return
        from .shared_cron import schedules
        e.shared.query_settled(schedules, (), callback)

    def cron_get_global(self, name: str, callback) -> None:
        """`callback(CronView | None)`: cron_get(name); in shared mode from the database."""
        e = self._engine
        if e.shared is None:
            callback(self.cron_get(name))
            return
        from .shared_cron import schedules

        def one(views):
            callback(views if isinstance(views, Exception) else (views[0] if views else None))
        e.shared.query_settled(schedules, (name,), one)

    def cron_delete_global(self, name: str, callback, allows=None) -> None:
        """`callback(bool)`: cron_delete(name); in shared mode the stored schedule whichever
        node set it (and this engine's copy). `allows(queue)` (optional): a schedule of a
        queue it refuses is not found (False)."""
        e = self._engine
        if e.shared is None:
            v = self.cron_get(name)
            callback(v is not None and (allows is None or allows(v.queue))
                     and self.cron_delete(name))
            return
        from .shared_cron import delete_schedule
        mine = e.cron.get(name)
        if mine is not None and (allows is None or allows(mine.queue)):
            e.cron.delete(name)   # its row goes with the next commit, before the statement

        def done(found):
            callback(found if isinstance(found, Exception) else (found or mine is not None))
        e.shared.query_settled(delete_schedule, (name, allows), done)
