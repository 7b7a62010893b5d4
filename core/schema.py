"""The SQL schema, defined once (SQLAlchemy 2 Core). Tables are created only by Alembic
migrations (migrations/versions); this module is what the code and the migrations agree on.

Units: *_ms columns are milliseconds; created_ms / ready_at_ms / expires_at_ms / sched_ms / at_ms
are wall-clock ms since the Unix epoch; priority is the canonical rank (lower first).
"""
from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL wants BIGINT.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

jobs = sa.Table(
    "jobs", metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=False),
    sa.Column("uid", sa.String(64), nullable=True),
    sa.Column("queue", sa.String(256), nullable=False),
    sa.Column("payload", sa.LargeBinary, nullable=False),
    sa.Column("priority", sa.BigInteger, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    sa.Column("ready_at_ms", sa.BigInteger, nullable=True),
    sa.Column("delay_ms", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("ttr_ms", sa.BigInteger, nullable=False),
    sa.Column("reserves", sa.Integer, nullable=False, server_default="0"),
    sa.Column("timeouts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("releases", sa.Integer, nullable=False, server_default="0"),
    sa.Column("buries", sa.Integer, nullable=False, server_default="0"),
    sa.Column("kicks", sa.Integer, nullable=False, server_default="0"),
    sa.Column("dialect", sa.String(16), nullable=False),
    # finishing (migration 0002): TTL, attempts and fails limits, result, workq schedule time
    sa.Column("ttl_ms", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("expires_at_ms", sa.BigInteger, nullable=True),
    sa.Column("max_attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("max_fails", sa.Integer, nullable=False, server_default="0"),
    sa.Column("sched_ms", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("fails", sa.Integer, nullable=False, server_default="0"),
    sa.Column("result", sa.LargeBinary, nullable=True),
    sa.Column("result_ok", sa.SmallInteger, nullable=False, server_default="0"),
    # bunqueue (migration 0003): how the payload is encoded (0 raw bytes, 1 MessagePack) and
    # the dialect extras (name, backoff, tags, progress, logs, ...) as one MessagePack map
    sa.Column("payload_fmt", sa.SmallInteger, nullable=False, server_default="0"),
    sa.Column("extras", sa.LargeBinary, nullable=True),
    # leases kept across a restart (migration 0005, core/leases.py): token, worker, deadline
    sa.Column("lease_token", sa.String(64), nullable=True),
    sa.Column("lease_owner", sa.String(128), nullable=True),
    sa.Column("lease_until_ms", sa.BigInteger, nullable=True),
    # several nodes on one PostgreSQL (migration 0009, core/shared_store.py): the node whose
    # client holds a reserved job, and the claim order (FIFO across nodes; PostgreSQL fills
    # it from sequence jobgate_job_seq at insert, SQLite leaves it NULL)
    sa.Column("node", sa.String(128), nullable=True),
    sa.Column("seq", sa.BigInteger, nullable=True),
    # a bunqueue uniqueKey (migration 0011, core.journal.dedup_text): shared mode asks whether
    # an unfinished job (result IS NULL) of the queue holds it, whichever node put it
    sa.Column("dedup_key", sa.Text, nullable=True),
    # No index on uid: the engine keeps uids unique (one writer, every live job in memory), and
    # a unique index over random UUIDs costs a random index page per insert (migration 0002).
)

queues = sa.Table(
    "queues", metadata,
    sa.Column("name", sa.String(256), primary_key=True),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
)

job_events = sa.Table(
    "job_events", metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.BigInteger, nullable=False),
    sa.Column("queue", sa.String(256), nullable=False),
    sa.Column("dialect", sa.String(16), nullable=False),
    sa.Column("event", sa.String(16), nullable=False),
    sa.Column("at_ms", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    # migration 0004: who and what, for the pipeline (docs/mapping.md "History")
    sa.Column("uid", sa.String(64), nullable=True),
    sa.Column("priority", sa.BigInteger, nullable=True),
    sa.Column("payload_size", sa.Integer, nullable=True),
    sa.Column("worker", sa.String(128), nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    # No secondary index: rows are appended in time order (id follows at_ms), the pipeline scans,
    # and retention prunes by id range. Indexes here would cost a third of each group commit.
)

meta = sa.Table(
    "jobgate_meta", metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.BigInteger, nullable=False),
)

# Engine settings kept across restarts (migration 0007, issue 16): one row per key, the rest of
# the record as one MessagePack map in `spec` (its fields belong to the module that owns the
# table: core/cron.py, core/limits.py, core/webhooks.py). Written with StorePort.write's
# `records` (a whole row replaced, or deleted) and read back with `load_records`.
cron_schedules = sa.Table(
    "cron_schedules", metadata,
    sa.Column("name", sa.String(256), primary_key=True),
    sa.Column("queue", sa.String(256), nullable=False),
    sa.Column("next_run_ms", sa.BigInteger, nullable=True),   # wall ms; NULL: will not fire
    sa.Column("executions", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("spec", sa.LargeBinary, nullable=False),
)

queue_settings = sa.Table(
    "queue_settings", metadata,
    sa.Column("queue", sa.String(256), primary_key=True),
    sa.Column("spec", sa.LargeBinary, nullable=False),   # rate limit, concurrency, stall config
)

webhooks = sa.Table(
    "webhooks", metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    sa.Column("spec", sa.LargeBinary, nullable=False),   # events, queue, secret, enabled
)

# A dialect's own small records (migration 0008, issue 17): what a dialect keeps beside the
# jobs and no other dialect reads (glide-mq's per-queue id counters, dedup entries, ordering
# counters, its function library flag). `key` starts with the dialect's name; `spec` is one
# MessagePack value owned by that dialect (core/port_dialect.py).
dialect_state = sa.Table(
    "dialect_state", metadata,
    sa.Column("key", sa.String(1024), primary_key=True),
    sa.Column("spec", sa.LargeBinary, nullable=False),
)

# Pauses shared by the nodes of one database (migration 0010, issue 19): a row per queue paused
# by a node in shared mode; claims skip the queue until `until_ms` (wall ms). core/shared_reads.py.
queue_pauses = sa.Table(
    "queue_pauses", metadata,
    sa.Column("queue", sa.String(256), primary_key=True),
    sa.Column("until_ms", sa.BigInteger, nullable=False),
    sa.Column("pause_ms", sa.BigInteger, nullable=False),
)

# Concurrency-limit slots held by the nodes of one database (migration 0012, issue 19): a row per
# queue and node in shared mode; node '' is the queue's lock row. core/shared_slots.py.
queue_slots = sa.Table(
    "queue_slots", metadata,
    sa.Column("queue", sa.String(256), primary_key=True),
    sa.Column("node", sa.String(256), primary_key=True),
    sa.Column("held", sa.Integer, nullable=False),
    sa.Column("until_ms", sa.BigInteger, nullable=False),
)

#: Shared mode: one token bucket per rate-limited queue (migration 0013,
#: core/shared_tokens.py).
queue_tokens = sa.Table(
    "queue_tokens", metadata,
    sa.Column("queue", sa.String(256), primary_key=True),
    sa.Column("tokens", sa.Float, nullable=False),
    sa.Column("rate_max", sa.Float, nullable=False),
    sa.Column("window_ms", sa.Float, nullable=False),
    sa.Column("refilled_ms", sa.BigInteger, nullable=False),
)

#: The keyed record tables, by name: table -> its key column (StorePort.write `records`).
RECORD_TABLES = {"cron_schedules": "name", "queue_settings": "queue", "webhooks": "id",
                 "dialect_state": "key"}

#: Column order of rows for StorePort.insert_jobs (core/storage.py): new jobs whose counters are
#: all zero (the common case).
JOB_NEW_COLUMNS = ("id", "uid", "queue", "payload", "priority", "state", "created_ms",
                   "ready_at_ms", "delay_ms", "ttr_ms", "dialect", "ttl_ms", "expires_at_ms",
                   "max_attempts", "max_fails", "sched_ms", "payload_fmt", "extras",
                   "dedup_key")
#: Column order of rows of new jobs with counters, a result or a stored lease (insert_jobs).
JOB_INSERT_COLUMNS = JOB_NEW_COLUMNS + ("reserves", "timeouts", "releases", "buries", "kicks",
                                        "fails", "result", "result_ok", "lease_token",
                                        "lease_owner", "lease_until_ms")
#: The columns every update writes (move_states, record_reservations, record_results); the
#: operation's own columns follow, the job id comes last.
JOB_UPDATE_COLUMNS = ("state", "priority", "ready_at_ms", "delay_ms", "ttr_ms", "reserves",
                      "timeouts", "releases", "buries", "kicks", "fails", "expires_at_ms",
                      "extras")
#: record_reservations: a reserved job whose lease is kept across a restart.
LEASE_COLUMNS = ("lease_token", "lease_owner", "lease_until_ms")
#: record_results: a finished job (completed, or failed for good).
RESULT_COLUMNS = ("result", "result_ok")
#: Column order of replace_payloads rows (a payload replaced in place: bunqueue Update).
JOB_PAYLOAD_COLUMNS = ("payload", "payload_fmt")
EVENT_COLUMNS = ("job_id", "queue", "dialect", "event", "at_ms", "attempt", "uid", "priority",
                 "payload_size", "worker", "error")
