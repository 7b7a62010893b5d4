"""jobgate's job-history pipeline on Spark (PySpark): export, analysis, report and fan-out.

It reads storage (the `job_events` table, or the Parquet that `jobgate export events` wrote), never
the running engine (DESIGN.md). PySpark, pyarrow and matplotlib come with the optional extra
`jobgate[pipeline]`; importing this package needs none of them, each module imports them when used.

Public entry points: `pipeline.enqueue` (fan-out, `pipeline.fanout`), `pipeline.analyze.analyze`,
`pipeline.export.export_events`, and the `jobgate export|analyze|enqueue` commands
(`pipeline.cli`). Definitions of every metric: docs/pipeline.md.
"""
from __future__ import annotations


def enqueue(df, queue: str, *args, **kw):
    """Turn each row of Spark DataFrame `df` into one job on `queue`: see `pipeline.fanout.enqueue`."""
    from .fanout import enqueue as _enqueue
    return _enqueue(df, queue, *args, **kw)
