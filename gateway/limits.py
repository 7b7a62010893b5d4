"""Connection-level resource limits (issue 15, item 2; docs/operations.md "Resource limits").

- `raise_nofile()` / `connection_cap()`: at start the soft RLIMIT_NOFILE is raised to the hard
  limit, and `limits.max_connections` is capped at that limit minus HEADROOM descriptors kept
  for everything that is not a client (database, WAL, listeners, logs, the loop itself, the
  one descriptor a refused connection needs), with a warning when the configured value was
  higher. Accept errors are handled in gateway/accept.py.
- `Limits`: the per-dialect idle, half-sent and authentication timeouts, checked by ONE sweep
  every SWEEP_S seconds against the server's clock (no timer per connection: the byte path
  stays free of timer work), and the server-wide budget of bytes buffered from clients.

Input: a session's optional `partial_input()` (protocols/contract.py) gives the bytes of an
unfinished command or frame its parser holds; after each read the runner (gateway/runner.py)
reports a changed value to `Limits.account`, and the sweep reads it again.

Buffer budget (`limits.max_buffered_bytes`): when the sum of every connection's partial input
passes it, a connection whose read added to an unfinished input of at least PAUSE_MIN bytes is
paused (reading stops: the rest waits in the kernel's socket buffers and TCP flow control
stops the client), except one, the first to pass the budget, which may go on so that one big
command always completes (no deadlock: when that command completes, seen as its unfinished
input shrinking, or the connection closes, every paused connection resumes). Memory held for unfinished input is so bounded by the
budget plus one dialect's largest command (bunqueue: max_frame) plus one read per paused
connection. Paused connections are neither idle nor half-sent while paused (the server stopped
them); the one allowed to go on is, so a stalled one is closed by the half-sent timeout.
"""
from __future__ import annotations

import logging

from .logs import event

log = logging.getLogger("jobgate")

#: descriptors kept free below RLIMIT_NOFILE for what is not a client connection (listeners,
#: SQLite database + WAL + shm, PostgreSQL connections, the event loop's epoll/eventfd/signal
#: pipe, stdio, log files, modules imported lazily, a refused connection's socket); when the
#: limit is small (under 4 * HEADROOM) a quarter of it is kept instead.
HEADROOM = 64
#: seconds between two sweeps of the timeouts
SWEEP_S = 1.0
#: a connection is paused by the buffer budget only when its unfinished input is this big
PAUSE_MIN = 64 * 1024
#: default of limits.max_buffered_bytes
MAX_BUFFERED_BYTES = 256 * 1024 * 1024


def raise_nofile() -> tuple:
    """Raise the soft RLIMIT_NOFILE to the hard limit (capped at /proc/sys/fs/nr_open when the
    hard limit is unlimited). Returns (soft, hard) as they are afterwards; never raises (a
    platform without `resource` returns (None, None))."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None, None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard
    if want == resource.RLIM_INFINITY:
        try:
            with open("/proc/sys/fs/nr_open") as f:
                want = int(f.read())
        except (OSError, ValueError):
            want = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError) as e:
            event(log, "cannot raise the open-files limit", level=logging.WARNING, soft=soft,
                  hard=hard, error=str(e))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def connection_cap(configured: int, soft) -> int:
    """The usable max_connections: `configured`, at most `soft` (the open-files limit) minus
    the headroom (HEADROOM, or soft // 4 when soft < 4 * HEADROOM), at least 1; logs a warning
    when it lowers `configured`. `soft` None or unlimited: `configured`."""
    if soft is None or soft < 0:
        return configured
    keep = HEADROOM if soft >= 4 * HEADROOM else soft // 4
    cap = max(1, soft - keep)
    if configured > cap:
        event(log, "max_connections lowered to fit the open-files limit", level=logging.WARNING,
              configured=configured, effective=cap, nofile=soft, headroom=keep,
              hint="raise the hard limit (ulimit -Hn, LimitNOFILE= in systemd)")
        return cap
    return configured


class _Timeouts:
    __slots__ = ("idle_ms", "half_ms", "auth_ms")

    def __init__(self, options: dict) -> None:
        self.idle_ms = int(options.get("idle_timeout_s", 0) or 0) * 1000
        self.half_ms = int(options.get("half_sent_timeout_s", 0) or 0) * 1000
        self.auth_ms = int(options.get("auth_timeout_s", 0) or 0) * 1000


class Limits:
    """The limits of one server: `Limits(runtime)` reads `runtime.config` (per-dialect options
    idle_timeout_s / half_sent_timeout_s / auth_timeout_s, 0 = off; `max_buffered_bytes`) and
    `runtime.clock`. `buffered`: the sum of partial input now held; `closed`: reason ->
    connections closed by a timeout so far ("idle", "half-sent", "auth")."""

    def __init__(self, runtime) -> None:
        self.rt = runtime
        self.clock = runtime.clock
        self.budget = getattr(runtime.config, "max_buffered_bytes", MAX_BUFFERED_BYTES)
        self.timeouts = {name: _Timeouts(opts) for name, opts in runtime.config.options.items()}
        self.buffered = 0
        self.exempt = None         # the one runner allowed to grow past the budget
        self.paused: list = []     # runners paused by the budget, in pause order
        self.closed = {"idle": 0, "half-sent": 0, "auth": 0}
        self._over_logged = False

    # --------------------------------------------------------------- budget
    def account(self, r, p: int) -> None:
        """Runner `r`'s unfinished input is now `p` bytes (was r.partial)."""
        old = r.partial
        self.buffered += p - old
        r.partial = p
        if r is self.exempt and p < old:   # its big command completed (or it is gone)
            self.exempt = None
            self._release()
        elif self.buffered <= self.budget:
            if self.paused:
                self._release()
        elif p > old and p >= PAUSE_MIN and r is not self.exempt:
            if not self._over_logged:
                self._over_logged = True
                event(log, "buffer budget reached: pausing the largest senders",
                      level=logging.WARNING, buffered=self.buffered, budget=self.budget)
            if self.exempt is None:
                self.exempt = r
            else:
                r.budget_pause(True)
                self.paused.append(r)

    def forget(self, r) -> None:
        """Runner `r` is gone: its bytes leave the budget."""
        if r.partial:
            self.buffered -= r.partial
            r.partial = 0
        if r in self.paused:
            self.paused.remove(r)
        if r is self.exempt:
            self.exempt = None
            self._release()
        elif self.paused and self.buffered <= self.budget:
            self._release()

    def _release(self) -> None:
        if self.paused:
            paused, self.paused = self.paused, []
            for r in paused:
                r.budget_pause(False)
        if self.buffered <= self.budget:
            self._over_logged = False

    # --------------------------------------------------------------- sweep
    async def run(self) -> None:
        """Sweep every SWEEP_S seconds until cancelled."""
        import anyio
        while True:
            await anyio.sleep(SWEEP_S)
            try:
                self.sweep()
            except Exception:  # a bug here must not stop the server; the next sweep retries
                log.exception("limits sweep failed")

    def sweep(self, now_ms: int | None = None) -> dict:
        """Close the connections past a timeout, at `now_ms` (default: the server clock's
        monotonic ms). Returns reason -> connections closed by this sweep (logged as one line
        when any)."""
        now = self.clock.monotonic_ms() if now_ms is None else now_ms
        out = {}
        timeouts = self.timeouts
        for r in list(self.rt.live):
            t = timeouts.get(r.reg.name)
            if t is None or r.session is None:
                continue
            why = self._check(r, t, now)
            if why is not None:
                out[why] = out.get(why, 0) + 1
                self.closed[why] += 1
                r.abort()
        if out:
            event(log, "connections closed by timeout", **out)
        return out

    def _check(self, r, t: _Timeouts, now: int):
        s = r.session
        if t.auth_ms and now - r.born >= t.auth_ms:
            pending = getattr(s, "handshake_pending", None)
            if pending is not None and pending():
                return "auth"
        if r.paused_by_server():       # we stopped reading it: neither idle nor half-sent
            r.idle_mark = r.half_mark = None
            return None
        if t.idle_ms:
            if r.idle_mark != r.rx:
                r.idle_mark = r.rx
                r.idle_since = now
            elif now - r.idle_since >= t.idle_ms:
                return "idle"
        if t.half_ms:
            f = getattr(s, "partial_input", None)
            p = f() if f is not None else 0
            if p != r.partial:         # changed outside a read (a deferred run)
                self.account(r, p)
            if not p:
                r.half_mark = None
            else:
                start = r.rx - p       # where the unfinished input began in the byte stream
                if r.half_mark != start:
                    r.half_mark = start
                    r.half_since = now
                elif now - r.half_since >= t.half_ms:
                    return "half-sent"
        return None
