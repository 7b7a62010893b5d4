"""Shared helpers of the pipeline tests: events written straight into a migrated database (for
export, pruning and unit checks), and reading an export tree back with pyarrow."""
from __future__ import annotations

import pyarrow.dataset as ds
import sqlalchemy as sa

from core import schema
from core.storage import Store
from migrations import upgrade

DAY = 86_400_000


def fresh_db(url: str) -> None:
    """Create (migrate) the schema at `url`."""
    st = Store(url, "normal")
    upgrade(st.engine)
    st.close()


def add_events(url: str, rows: list[dict]) -> None:
    """Append job_events rows (dicts with job_id, queue, event, at_ms; other columns default)."""
    full = [{"dialect": "beanstalk", "attempt": 0, "uid": None, "priority": 0,
             "payload_size": 1, "worker": None, "error": None, **r} for r in rows]
    eng = sa.create_engine(url)
    with eng.begin() as c:
        c.execute(sa.insert(schema.job_events), full)
    eng.dispose()


def db_ids(url: str) -> list[int]:
    """Every job_events id, ascending."""
    eng = sa.create_engine(url)
    with eng.connect() as c:
        out = [r[0] for r in c.execute(sa.select(schema.job_events.c.id)
                                       .order_by(schema.job_events.c.id))]
    eng.dispose()
    return out


def exported(out_dir: str) -> list[dict]:
    """Every exported row (dicts, queue and date from the path), sorted by id."""
    d = ds.dataset(f"{out_dir}/events", format="parquet", partitioning="hive")
    return sorted(d.to_table().to_pylist(), key=lambda r: r["id"])
