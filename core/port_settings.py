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
