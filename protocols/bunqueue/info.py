"""Server-wide bunqueue state shared by every connection: registered workers, auth tokens,
counters (bunqueue-tcp-protocol.txt "Authentication", "PULL", "Worker Commands"; reference:
bunqueue 2.9.5).

Lock tokens, stall detection and failure records are canonical (core/leases.py,
core/failures.py): the engine issues a token for every reservation and applies the stall
policy set here (BUNQUEUE_POLICY). Events come from the engine's event feed (core/events.py).
Workers are per process as in the reference.
"""
from __future__ import annotations

import hmac

from core.api import JobPolicy, Port, Principal

from .workers import WorkerRegistry
from .handlers_outcome import backoff_ms
from .telemetry import QueueTelemetry

#: What Hello announces (reference 2.9.5 answers protocol 3 with these capabilities).
PROTOCOL_VERSIONS = (1, 2, 3)
CAPABILITIES = ["pipelining", "separate-job-name"]
#: The bunqueue server version whose protocol jobgate speaks (Hello's `version`).
SPEAKS_VERSION = "2.9.5"
#: The Bun version of that bunqueue build (Prometheus `bunqueue_build_info`, as SPEAKS_VERSION).
BUN_VERSION = "1.4.5"
DEFAULT_LOCK_TTL_MS = 30_000
#: Lock expiries after which a job goes to the DLQ with reason "stalled" (reference maxStalls).
MAX_STALLS = 3

#: bunqueue's jobs (reference lockManager): a lock expiry counts an attempt; at maxAttempts, or
#: after MAX_STALLS expiries, the job goes to the DLQ; a ttl spares an active job.
#: A job's own `timeout` (core/extras.py) fails it with the reference's text and retries it
#: after its backoff (application/background/timeouts.js).
BUNQUEUE_POLICY = JobPolicy(stall_counts_attempt=True, max_stalls=MAX_STALLS,
                            ttl_spares_reserved=True, timeout_error="Job timeout exceeded",
                            backoff=backoff_ms)


_EVERY_QUEUE = Principal("token", "token", ("*",))


class BunqueueInfo:
    """State of the bunqueue dialect for one server process.

    `port`: core.api.Port (an engine is wrapped with Port.of); `auth_tokens`: accepted tokens
    (empty: no auth); `rate_limit`: commands per second per connection (0: unlimited);
    `max_frame`: largest frame body in bytes; `pre_auth_max_frame`: the same before Auth (when
    tokens are configured); `auth_timeout_s`: seconds a connection may take to Auth (0: no
    limit; the gateway enforces it through Connection.handshake_pending); `db_path`: the SQLite file (Metrics'
    sqliteSizeMb); `workers`: the registered workers (workers.WorkerRegistry); `subscribers`: sessions that sent
    SubscribeEvents; counters for Stats / Metrics. Uptime counts on the port's clock.
    `access`: the server's core.api.Access (None: only `auth_tokens`, each allowed every queue).
    """

    def __init__(self, engine, auth_tokens=(), rate_limit: float = 0,
                 db_path: str | None = None, max_frame: int = 64 * 1024 * 1024,
                 pre_auth_max_frame: int = 64 * 1024, auth_timeout_s: float = 10,
                 access=None) -> None:
        self.port = Port.of(engine)
        self.access = access
        if self.port.shared:   # commands other nodes forward to the jobs held here
            from .forward import server
            self.port.serve_forwarded("bunqueue", server(self))
        self.auth_tokens = [t.encode("utf-8") for t in auth_tokens]
        #: clients not identified otherwise must Auth (tokens are configured)
        self.requires_auth = bool(auth_tokens) or (access is not None and access.has_tokens)
        self.rate_limit = rate_limit
        self.max_frame = max_frame
        self.pre_auth_max_frame = min(pre_auth_max_frame, max_frame)
        self.auth_timeout_s = auth_timeout_s
        self.db_path = db_path
        self.workers = WorkerRegistry()
        self.subscribers: set = set()
        self.connections = 0
        self.started = self.port.clock.monotonic_ms()
        self.started_wall = self.port.clock.wall_ms()   # the rates of Stats across nodes
        self.total_pushed = 0
        self.total_pulled = 0
        self.total_completed = 0
        self.total_failed = 0
        self.ops: dict = {}   # command name -> times run (known commands only)
        #: per-queue events and completed / failed series (TrimEvents, Metrics per queue)
        self.telemetry = QueueTelemetry()
        #: Prometheus gauges of other features: name -> fn() -> int (every queue's, through
        #: the unscoped port, as the reference counts them)
        port = self.port
        self.gauges: dict = {
            "cron_jobs": lambda: len(port.cron_list()),
            "webhooks_registered": lambda: len(port.webhooks()),
            "webhooks_enabled": lambda: sum(1 for h in port.webhooks() if h.enabled)}
        self.port.set_policy("bunqueue", BUNQUEUE_POLICY)

    def operations(self) -> dict:
        """{command: times run} since start (protocols/contract.py; /metrics)."""
        return dict(self.ops)

    def figures(self, node_wide: bool = True) -> dict:
        """This process's counters that Metrics and Stats add up over the nodes in shared mode
        (Port.share_figures): {pushed, pulled, completed, failed, connections, started (wall
        ms of this server's start)}; `failed` counts the engine's stall failures too. With
        `node_wide` False (a second BunqueueInfo of the node: the HTTP API's) its own FAILs
        only and no `connections`: the stall failures and the connections are the TCP
        listener's (the API's sessions are kept per principal, not per connection)."""
        out = {"pushed": self.total_pushed, "pulled": self.total_pulled,
               "completed": self.total_completed, "failed": self.total_failed,
               "started": self.started_wall}
        if node_wide:
            out["failed"] = self.failed_total()
            out["connections"] = self.connections
        return out

    def failed_total(self) -> int:
        """Jobs failed for good: by FAIL, and by the stall policy (lock expiries)."""
        return self.total_failed + self.port.stats().stall_failures

    def token_principal(self, token) -> Principal | None:
        """The core.api.Principal that Auth with `token` binds, or None for a wrong token.
        With `access`, its token principals (bunqueue.auth_tokens are among them, allowed
        every queue); else a principal allowed every queue for one of `auth_tokens`."""
        if self.access is not None:
            return self.access.for_token(token)
        return _EVERY_QUEUE if self.check_token(token) else None

    def check_token(self, token) -> bool:
        """True when `token` is one of the configured tokens (constant-time compare)."""
        if token.__class__ is not str:
            return False
        t = token.encode("utf-8")
        ok = False
        for good in self.auth_tokens:
            ok |= hmac.compare_digest(t, good)
        return ok
