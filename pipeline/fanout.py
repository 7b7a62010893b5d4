"""Fan-out: each row of a Spark DataFrame becomes exactly one job, pushed through jobgate's own
wire protocol (bunqueue PUSHB batches, pipelined) from every partition (`foreachPartition`).

Exactly one job per row, even when Spark retries a task: every row gets a deterministic job id,
a UUIDv5 of (run_id, queue, the row's key), and the server deduplicates pushes by jobId. The row's
key is the value of `id_column` when given, else (partition index, position in the partition),
which is stable across retries as long as the DataFrame's partitions are (files, or any
deterministic plan; after a non-deterministic shuffle, pass `id_column`). Deduplication holds while
the job exists, so rerunning the same run_id before its jobs are consumed adds nothing; a new
run_id enqueues the rows again.

Counts come from Spark accumulators updated in the action, which Spark applies once per
successful task: a retried task's first attempt does not count twice.
"""
from __future__ import annotations

import datetime
import decimal
import json
import uuid
from dataclasses import dataclass, field

#: The namespace of the row ids (uuid5).
NAMESPACE = uuid.UUID("6a0b7f3e-9d1c-4c53-8a50-2f6c3b1e9d47")


class FanoutError(RuntimeError):
    """Some rows did not become jobs; `result` says how many and why."""

    def __init__(self, result: "FanoutResult") -> None:
        super().__init__(f"{result.errors} of {result.rows} rows were refused: "
                         + "; ".join(result.samples))
        self.result = result


@dataclass
class FanoutResult:
    """rows: rows read; pushed: rows the server accepted as jobs (a row whose job already
    existed counts as accepted); errors: rows refused; reconnects: connection losses
    survived; samples: up to 5 error replies."""
    rows: int
    pushed: int
    errors: int
    reconnects: int
    samples: list = field(default_factory=list)


def row_id(run_id: str, queue: str, key: str) -> str:
    """The job id of a row: str(uuid5(NAMESPACE, run_id NUL queue NUL key))."""
    return str(uuid.uuid5(NAMESPACE, f"{run_id}\x00{queue}\x00{key}"))


def _jsonable(v):
    if isinstance(v, (datetime.datetime, datetime.date)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8", "replace")
    raise TypeError(f"cannot encode {type(v).__name__}")


def row_body(row, body_column: str | None):
    """The job data of a row: the `body_column` value as is (str, or bytes), else the whole
    row as a JSON object text (dates in ISO 8601, decimals as strings)."""
    if body_column is not None:
        v = row[body_column]
        return bytes(v) if isinstance(v, bytearray) else v
    return json.dumps(row.asDict(recursive=True), default=_jsonable, separators=(",", ":"))


def _push_partition(rows, cfg: dict, acc: dict) -> None:
    """The foreachPartition body: push the partition's rows in batches of cfg["batch"]."""
    from pyspark import TaskContext

    from .wire import PushClient
    part = TaskContext.get().partitionId()
    c = PushClient(cfg["host"], cfg["port"], cfg["token"], cfg["window"])
    n = 0
    batch: list = []
    try:
        for i, row in enumerate(rows):
            key = str(row[cfg["id_column"]]) if cfg["id_column"] else f"{part}:{i}"
            job = dict(cfg["options"])
            job["data"] = row_body(row, cfg["body_column"])
            job["jobId"] = row_id(cfg["run_id"], cfg["queue"], key)
            batch.append(job)
            n += 1
            if len(batch) >= cfg["batch"]:
                c.push(cfg["queue"], batch)
                batch = []
        if batch:
            c.push(cfg["queue"], batch)
        c.flush()
    finally:
        c.close()
    acc["rows"].add(n)
    acc["pushed"].add(c.pushed)
    acc["errors"].add(c.errors)
    acc["reconnects"].add(c.reconnects)
    if c.samples:
        acc["samples"].add(c.samples)


def enqueue(df, queue: str, server: str = "127.0.0.1:6789", token: str | None = None,
            id_column: str | None = None, body_column: str | None = None, run_id: str = "",
            options: dict | None = None, batch: int = 500, window: int = 8,
            raise_on_error: bool = True) -> FanoutResult:
    """Push one job per row of `df` to `queue` on the bunqueue endpoint `server` (HOST:PORT).
    `df`: a Spark DataFrame, or an RDD of Rows (`pyspark.sql.Row`).

    token: bunqueue Auth token, when the server wants one. id_column / run_id: see the module
    docstring. body_column: the column holding the job data (default: the row as JSON).
    options: bunqueue job options for every job (e.g. {"priority": 5, "delay": 1000 (ms),
    "maxAttempts": 3}). batch: jobs per PUSHB; window: PUSHB batches in flight per partition.
    A lost connection is reconnected (5 attempts) and its unanswered batches resent; a
    partition that cannot reconnect fails its Spark task, which Spark retries.
    Returns a FanoutResult; raises FanoutError when rows were refused (raise_on_error), a
    Spark error when a task failed on every attempt."""
    from pyspark import AccumulatorParam

    class _Samples(AccumulatorParam):
        def zero(self, v):
            return []

        def addInPlace(self, a, b):
            return (a + b)[:5]

    host, _, port = server.rpartition(":")
    cfg = {"host": host or "127.0.0.1", "port": int(port), "token": token, "queue": queue,
           "id_column": id_column, "body_column": body_column, "run_id": run_id,
           "options": dict(options or {}), "batch": batch, "window": window}
    rdd = df.rdd if hasattr(df, "sparkSession") else df
    sc = rdd.context
    acc = {k: sc.accumulator(0) for k in ("rows", "pushed", "errors", "reconnects")}
    acc["samples"] = sc.accumulator([], _Samples())
    rdd.foreachPartition(lambda rows: _push_partition(rows, cfg, acc))
    res = FanoutResult(acc["rows"].value, acc["pushed"].value, acc["errors"].value,
                       acc["reconnects"].value, list(acc["samples"].value))
    if res.errors and raise_on_error:
        raise FanoutError(res)
    return res
