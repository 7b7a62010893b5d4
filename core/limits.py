"""Queue limits: rate limits, concurrency limits and stall settings (issue 16), canonical for
every dialect (docs/mapping.md, "Queue limits (issue 16)").

One `QueueSettings` per configured queue, in `Engine.queue_settings` (queue name -> settings):

- rate limit: a token bucket of `rate_max` tokens that refills `rate_max` tokens per window of
  `rate_duration_ms` ms (default 1000), full when set; every reservation of the queue takes a
  token; optional `rate_expires_ms` (wall ms): the limit clears itself then (checked lazily and
  by a timer while reserves wait). This is bunqueue 2.9.5's RateLimiter
  (domain/types/queue.js, domain/queue/limiterManager.js): a limit below 1 admits nothing.
- concurrency limit: at most `concurrency` jobs of the queue reserved at once, counted as the
  queue's reserved jobs in every dialect (Queue.n_reserved), not by a separate counter.
- stall config: bunqueue's {enabled, stallInterval, maxStalls, gracePeriod, ...} (defaults
  DEFAULT_STALL_CONFIG); only `maxStalls` acts in the engine: a lock (TTR) expiry dead-letters
  a job of a stall-counting dialect once it has expired that many times (reference
  application/lockManager.js; core/failures.py).

Enforcement (no cost for queues without limits: one `q.limits is not None` test): a Queue with
an active rate or concurrency limit has `q.limits` set to its settings. A waiting reserve
(beanstalk reserve, workq lease, bunqueue PULL) is served only while the queue admits one more
reservation; waiters are served longest-waiter first, and a new reserve does not overtake the
waiters of a limited queue. When a reserved job of a limited queue leaves the reserved state,
or the rate window allows the next token, a limit timer (due at once, or when the token is
there) runs `_serve` for the queue from `tick()`, on the injectable clock.

Storage: table queue_settings (core/schema.py), one row per configured queue, `spec` a
MessagePack map {rateLimit, rateLimitDuration, rateLimitExpiresAt, concurrencyLimit,
stallConfig} written through the journal (`put_record`) in the next commit; `load_settings`
reads them back at start (an expired rate limit is dropped, as the reference's
restoreQueueState does).

Units: ms; `rate_expires_ms` wall ms; timers monotonic ms.
"""
from __future__ import annotations

import math

import msgpack

from .limit_checks import LimitChecks
from .shared_tokens import adopt

#: bunqueue 2.9.5 domain/types/stall.js DEFAULT_STALL_CONFIG (key order kept).
DEFAULT_STALL_CONFIG = {"enabled": True, "stallInterval": 30_000, "maxStalls": 3,
                        "gracePeriod": 5_000}
#: The rate window when none (or a non-positive one) is given, ms.
DEFAULT_WINDOW_MS = 1000


class QueueSettings:
    """The settings of one queue (see the module docstring). Numbers keep the type they were
    given (int or float). `tokens` / `refilled` (monotonic ms): the bucket's state;
    `wake_at`: the monotonic ms of this queue's pending limit timer, or None; `granted`:
    shared mode, the tokens come from the database's bucket (core/shared_tokens.py) and are
    never refilled here."""

    __slots__ = ("queue", "rate_max", "rate_duration_ms", "rate_expires_ms", "tokens",
                 "refilled", "concurrency", "stall", "wake_at", "granted")

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.rate_max = None
        self.rate_duration_ms = None
        self.rate_expires_ms = None
        self.tokens = 0.0
        self.refilled = 0
        self.concurrency = None
        self.stall = None
        self.wake_at = None
        self.granted = False

    @property
    def limited(self) -> bool:
        """True when a rate or concurrency limit is set."""
        return self.rate_max is not None or self.concurrency is not None

    @property
    def empty(self) -> bool:
        """True when nothing is configured."""
        return not self.limited and self.stall is None

    def window_ms(self):
        return self.rate_duration_ms or DEFAULT_WINDOW_MS

    def refill(self, now: int) -> None:
        """Add the tokens earned since the last refill (monotonic `now`, ms), up to rate_max
        (none while `granted`: the database's bucket refills)."""
        if now > self.refilled and not self.granted:
            m = self.rate_max
            self.tokens = min(m, self.tokens + (now - self.refilled) * m / self.window_ms())
            self.refilled = now

    def token_at(self, now: int):
        """Monotonic ms at which the bucket holds a whole token (after refill), or None when it
        never will (a limit below 1) or, `granted`, not before tokens are taken."""
        m = self.rate_max
        if m < 1:
            return None
        if self.tokens >= 1:
            return now
        if self.granted:
            return None
        return now + math.ceil((1 - self.tokens) * self.window_ms() / m)

    def spec(self) -> dict:
        """The stored MessagePack map (see the module docstring)."""
        return {"rateLimit": self.rate_max, "rateLimitDuration": self.rate_duration_ms,
                "rateLimitExpiresAt": self.rate_expires_ms, "concurrencyLimit": self.concurrency,
                "stallConfig": self.stall}


def _positive(x):
    """`x` when it is a finite number > 0, else None (the reference's duration / ttl rule)."""
    if x.__class__ in (int, float) and x > 0 and math.isfinite(x):
        return x
    return None


def _stall_custom(config: dict) -> bool:
    """True when one of the four known keys differs from the default (JavaScript `!==`:
    True is not 1)."""
    for k, v in DEFAULT_STALL_CONFIG.items():
        x = config.get(k)
        if x != v or (x.__class__ is bool) != (v.__class__ is bool):
            return True
    return False


class Limits(LimitChecks):
    """Engine base (core.engine.Engine): queue settings and their status; the checks and
    timers in core.limit_checks.LimitChecks. Expects the Engine attributes (queues, clock,
    journal, _seq, _arm, _serve, queue, shared, slots_held)."""

    # ------------------------------------------------------------ settings
    def _settings(self, queue: str) -> QueueSettings:
        s = self.queue_settings.get(queue)
        if s is None:
            s = self.queue_settings[queue] = QueueSettings(queue)
        return s

    def set_rate_limit(self, queue: str, limit, duration_ms=None, ttl_ms=None) -> None:
        """Limit `queue` to `limit` reservations per window of `duration_ms` ms (None or not
        > 0: 1000) as a token bucket that starts full; `ttl_ms` (> 0): the limit clears itself
        that many ms from now. `limit` is a number (int or float); below 1 admits nothing."""
        s = self._settings(queue)
        s.rate_max = limit
        s.rate_duration_ms = _positive(duration_ms)
        ttl = _positive(ttl_ms)
        s.rate_expires_ms = None if ttl is None else self.clock.wall_ms() + ttl
        if s.granted:   # shared mode: tokens held were the old limit's; the database's
            s.tokens = 0.0   # bucket gives the new one's (core/shared_tokens.py)
        else:
            s.tokens = limit
            s.refilled = self.clock.monotonic_ms()
        self._settings_changed(s)

    def clear_rate_limit(self, queue: str) -> None:
        """Remove the rate limit of `queue` (none: nothing happens)."""
        s = self.queue_settings.get(queue)
        if s is not None and s.rate_max is not None:
            s.rate_max = s.rate_duration_ms = s.rate_expires_ms = None
            self._settings_changed(s)

    def set_concurrency(self, queue: str, limit) -> None:
        """At most `limit` (a number) jobs of `queue` reserved at once."""
        s = self._settings(queue)
        s.concurrency = limit
        self._settings_changed(s)

    def clear_concurrency(self, queue: str) -> None:
        """Remove the concurrency limit of `queue`."""
        s = self.queue_settings.get(queue)
        if s is not None and s.concurrency is not None:
            s.concurrency = None
            self._settings_changed(s)

    def set_stall_config(self, queue: str, config: dict) -> None:
        """Merge `config` (a dict) into the stall config of `queue` (bunqueue SetStallConfig:
        {...current, ...config})."""
        s = self._settings(queue)
        cur = dict(s.stall or DEFAULT_STALL_CONFIG)
        cur.update(config)
        s.stall = cur
        self._settings_changed(s)

    def stall_config(self, queue: str) -> dict:
        """The stall config of `queue` (a new dict; the defaults when none was set)."""
        s = self.queue_settings.get(queue)
        return dict(DEFAULT_STALL_CONFIG if s is None or s.stall is None else s.stall)

    def clear_queue_settings(self, queue: str) -> None:
        """Forget every setting of `queue` (bunqueue Obliterate)."""
        s = self.queue_settings.get(queue)
        if s is not None:
            s.rate_max = s.rate_duration_ms = s.rate_expires_ms = None
            s.concurrency = None
            s.stall = None
            self._settings_changed(s)

    def settings_of(self, queue: str) -> dict:
        """Every setting of `queue`: the stored map (QueueSettings.spec), rate limit expiry
        applied; all None when nothing is set."""
        s = self.queue_settings.get(queue)
        if s is None:
            return QueueSettings(queue).spec()
        self._expire(s)
        return s.spec()

    def _expire(self, s: QueueSettings) -> bool:
        """Clear an elapsed temporary rate limit (lazy, as the reference). True if it did."""
        e = s.rate_expires_ms
        if e is not None and self.clock.wall_ms() >= e:
            s.rate_max = s.rate_duration_ms = s.rate_expires_ms = None
            self._settings_changed(s, serve=False)
            return True
        return False

    def _settings_changed(self, s: QueueSettings, serve: bool = True) -> None:
        """Attach or detach the limits of the queue and store the settings; `serve`: hand
        jobs to waiters the change admits now, and let an empty queue go (False inside a
        dispatch or reserve: a lazy expiry)."""
        name = s.queue
        j = self.journal
        if s.granted and s.rate_max is None:
            s.tokens = 0.0   # shared mode: tokens of a cleared or ended limit are dropped
        if s.empty:
            self.queue_settings.pop(name, None)
        if j is not None:
            spec = _storable(s.spec())
            if spec["stallConfig"] is not None and not _stall_custom(spec["stallConfig"]):
                spec["stallConfig"] = None   # defaults are not stored (persistQueueState)
            if spec["rateLimit"] is None and spec["concurrencyLimit"] is None \
                    and spec["stallConfig"] is None:
                j.put_record("queue_settings", name, None)
            else:
                j.put_record("queue_settings", name, {"queue": name, "spec": msgpack.packb(
                    spec, use_bin_type=True)})
            if self.shared is not None:   # every node installs them after the commit
                self.shared.settings.changed(name)   # (core/shared_settings.py)
        self._attach_limits(s, serve)

    def _attach_limits(self, s: QueueSettings, serve: bool) -> None:
        """Attach settings `s` to their queue (its limits) or detach them; `serve` as in
        _settings_changed."""
        name = s.queue
        if self.shared is not None:
            adopt(s)   # its tokens come from the database's bucket
        if s.limited:
            q = self.queue(name)
            q.limits = s
            if serve:
                self._limits_attached(q)   # shared mode: slots taken under the old limit
                self._serve(q)   # a raised limit may admit waiters now
        else:
            q = self.queues.get(name)
            if q is None and not s.empty:
                self.queue(name)   # a queue with only a stall config is listed, as the reference's
            elif q is not None and q.limits is not None:
                q.limits = None
                if serve:
                    self._limits_attached(q)
                    self._serve(q)
                    self._gc(q)

    def _stored_settings(self, queue: str, spec_bytes: bytes) -> QueueSettings:
        """The QueueSettings of stored `spec_bytes` (a queue_settings row's spec): a rate
        limit whose TTL ended is left out; the token bucket starts full."""
        spec = msgpack.unpackb(spec_bytes, raw=False, strict_map_key=False)
        s = QueueSettings(queue)
        exp = spec.get("rateLimitExpiresAt")
        if spec.get("rateLimit") is not None and (exp is None or exp > self.clock.wall_ms()):
            s.rate_max = spec["rateLimit"]
            s.rate_duration_ms = spec.get("rateLimitDuration")
            s.rate_expires_ms = exp
            s.tokens = s.rate_max
            s.refilled = self.clock.monotonic_ms()
        s.concurrency = spec.get("concurrencyLimit")
        s.stall = spec.get("stallConfig")
        return s

    def load_settings(self, rows) -> int:
        """Install stored settings (rows of store.load_records("queue_settings")) at start;
        returns how many queues have settings."""
        for r in rows:
            s = self._stored_settings(r["queue"], r["spec"])
            if s.empty:
                continue
            self.queue_settings[s.queue] = s
            if self.shared is not None:
                adopt(s)   # its tokens come from the database's bucket
            q = self.queue(s.queue)
            if s.limited:
                q.limits = s
        return len(self.queue_settings)

    def apply_settings(self, queue: str, spec_bytes) -> None:
        """Shared mode: another node changed the settings of `queue`; install its stored
        `spec_bytes` (None: it has none any more) in place of this engine's, without storing
        them again, and serve the waiters a raised limit admits (core/shared_settings.py). A
        rate limit's tokens already taken here stay taken."""
        old = self.queue_settings.get(queue)
        s = QueueSettings(queue) if spec_bytes is None else \
            self._stored_settings(queue, bytes(spec_bytes))
        if old is not None and old.rate_max is not None and s.rate_max == old.rate_max \
                and s.rate_duration_ms == old.rate_duration_ms:
            s.tokens, s.refilled, s.granted = old.tokens, old.refilled, old.granted
        if s.empty:
            self.queue_settings.pop(queue, None)
        else:
            self.queue_settings[queue] = s
        self._attach_limits(s, True)

    # ------------------------------------------------------------ status
    def limit_status(self, queue: str, max_jobs=None) -> dict:
        """bunqueue GetQueueLimits: {rateLimit: {max, duration} | None, rateLimitTtl: ms until
        the bucket admits one (0; -2 without a rate limit; the TTL left of a temporary limit;
        0 while fewer than `max_jobs` tokens were used), concurrencyLimit, maxed} (reference
        getQueueLimitStatus)."""
        s = self.queue_settings.get(queue)
        if s is not None:
            self._expire(s)
        rate = None if s is None else s.rate_max
        out = {"rateLimit": None, "rateLimitTtl": -2, "concurrencyLimit": None, "maxed": False}
        if rate is not None:
            out["rateLimit"] = {"max": rate, "duration": s.window_ms()}
            if s.rate_expires_ms is not None:
                out["rateLimitTtl"] = max(0, s.rate_expires_ms - self.clock.wall_ms())
            else:
                now = self.clock.monotonic_ms()
                s.refill(now)
                used = rate - s.tokens
                if max_jobs is not None and used < max_jobs or s.tokens >= 1 or rate <= 0:
                    out["rateLimitTtl"] = 0
                else:
                    out["rateLimitTtl"] = math.ceil((1 - s.tokens) * s.window_ms() / rate)
        c = None if s is None else s.concurrency
        if c is not None:
            q = self.queues.get(queue)
            out["concurrencyLimit"] = c
            out["maxed"] = (0 if q is None else q.n_reserved) >= c
        return out

    def stall_policy(self, job):
        """The stall policy (core.failures.JobPolicy) for a TTR expiry of `job`: its dialect's,
        with max_stalls from its queue's stall config `maxStalls` when one is set (a number
        > 0; else no stall bound), as the reference's lock expiry reads it."""
        p = self.policy(job)
        s = self.queue_settings.get(job.queue)
        if s is None or s.stall is None:
            return p
        m = s.stall.get("maxStalls")
        n = math.ceil(m) if m.__class__ in (int, float) and m > 0 and math.isfinite(m) else 0
        return p if n == p.max_stalls else p._replace(max_stalls=n)


def _storable(spec: dict) -> dict:
    """`spec` with the stall config cut to its four known keys (the reference stores only
    those: infrastructure/persistence/sqlite/control.js saveQueueState)."""
    st = spec.get("stallConfig")
    if st is not None:
        spec = dict(spec)
        spec["stallConfig"] = {k: st.get(k) for k in DEFAULT_STALL_CONFIG}
    return spec
