"""Where the pipeline reads `job_events` from: the live database through Spark's JDBC source, or
the Parquet tree that `jobgate export events` writes. Both give the same DataFrame shape:

    id long, job_id long, uid string, queue string, dialect string, event string, at_ms long,
    attempt int, priority long, payload_size int, worker string, error string

(`at_ms`: wall-clock ms since the Unix epoch.)
"""
from __future__ import annotations

import os

import sqlalchemy as sa

from .spark import JAR_PACKAGES, jdbc_jars

#: Column order and Spark types of the events DataFrame.
EVENT_SCHEMA = (("id", "long"), ("job_id", "long"), ("uid", "string"), ("queue", "string"),
                ("dialect", "string"), ("event", "string"), ("at_ms", "long"),
                ("attempt", "int"), ("priority", "long"), ("payload_size", "int"),
                ("worker", "string"), ("error", "string"))
#: Rows per JDBC partition (each partition is one `id` range read by one task).
ROWS_PER_PARTITION = 2_000_000


class SourceError(ValueError):
    """The database URL or the Parquet directory cannot be read; the message says why."""


def jdbc_options(database_url: str) -> dict:
    """Spark JDBC options (url, driver, user, password) for a SQLAlchemy URL.

    sqlite:///relative.db or sqlite:////abs.db -> jdbc:sqlite:/abs.db;
    postgresql[+driver]://user:pw@host:port/db -> jdbc:postgresql://host:port/db.
    Raises SourceError for other databases, an in-memory SQLite, a missing SQLite file or a
    missing driver jar (naming the Debian package)."""
    u = sa.engine.make_url(database_url)
    backend = u.get_backend_name()
    if backend == "sqlite":
        if not u.database or u.database == ":memory:":
            raise SourceError("an in-memory SQLite database has no history to analyse")
        path = os.path.abspath(u.database)
        if not os.path.exists(path):
            raise SourceError(f"no SQLite database at {path}")
        opts = {"url": f"jdbc:sqlite:{path}", "driver": "org.sqlite.JDBC"}
    elif backend == "postgresql":
        host = u.host or "localhost"
        port = f":{u.port}" if u.port else ""
        opts = {"url": f"jdbc:postgresql://{host}{port}/{u.database or ''}",
                "driver": "org.postgresql.Driver"}
        if u.username:
            opts["user"] = u.username
        if u.password:
            opts["password"] = u.password
    else:
        raise SourceError(f"the JDBC source reads SQLite or PostgreSQL, not {backend}")
    jar_ok = any(os.path.basename(j).startswith(("sqlite", "xerial") if backend == "sqlite"
                                                 else ("postgresql",)) for j in jdbc_jars())
    if not jar_ok:
        raise SourceError(f"no JDBC driver jar for {backend}: install Debian's "
                          f"{JAR_PACKAGES[opts['driver']]} or set JOBGATE_JDBC_JARS")
    return opts


def id_range(database_url: str) -> tuple[int, int, int]:
    """(min id, max id, row count) of job_events, read with SQLAlchemy: the bounds of the JDBC
    partitions. (0, 0, 0) for an empty table."""
    from core import schema
    ev = schema.job_events
    eng = sa.create_engine(database_url)
    try:
        with eng.connect() as c:
            lo, hi, n = c.execute(sa.select(sa.func.min(ev.c.id), sa.func.max(ev.c.id),
                                            sa.func.count())).one()
    finally:
        eng.dispose()
    return (lo or 0, hi or 0, n or 0)


def _typed(df):
    from pyspark.sql import functions as F
    return df.select(*[F.col(c).cast(t).alias(c) for c, t in EVENT_SCHEMA])


def _time_filter(df, since_ms, until_ms):
    from pyspark.sql import functions as F
    if since_ms is not None:
        df = df.where(F.col("at_ms") >= since_ms)
    if until_ms is not None:
        df = df.where(F.col("at_ms") < until_ms)
    return df


def read_jdbc(spark, database_url: str, since_ms: int | None = None,
              until_ms: int | None = None):
    """job_events of the database at `database_url` (SQLAlchemy URL) as the events DataFrame,
    read in `id` ranges of about ROWS_PER_PARTITION rows, one task each. `since_ms` /
    `until_ms` keep rows with since <= at_ms < until. Raises SourceError."""
    opts = jdbc_options(database_url)
    lo, hi, n = id_range(database_url)
    cols = ", ".join(c for c, _ in EVENT_SCHEMA)
    r = spark.read.format("jdbc").options(**opts)
    r = r.option("dbtable", f"(SELECT {cols} FROM job_events) AS ev").option("fetchsize", 10_000)
    parts = max(1, min(512, -(-n // ROWS_PER_PARTITION)))
    if parts > 1:
        r = (r.option("partitionColumn", "id").option("lowerBound", lo)
             .option("upperBound", hi + 1).option("numPartitions", parts))
    return _time_filter(_typed(r.load()), since_ms, until_ms)


def read_parquet(spark, export_dir: str, since_ms: int | None = None,
                 until_ms: int | None = None):
    """The events DataFrame from an export tree (`<export_dir>/events/date=D/queue=Q/*.parquet`,
    see pipeline.export). The queue comes from the directory name. Raises SourceError when
    there is no export there."""
    base = os.path.join(export_dir, "events")
    if not os.path.isdir(base):
        raise SourceError(f"no exported events under {export_dir} (run `jobgate export events "
                          f"--out {export_dir}` first)")
    from pyspark.sql import functions as F
    df = spark.read.option("basePath", base).parquet(base)
    # pyarrow writes queue=<the UTF-8 bytes of the name, URI-escaped>; Spark unescapes each %XX
    # to one char (U+0000..U+00FF), so the name is those chars as Latin-1 bytes, read as UTF-8
    df = df.withColumn("queue", F.decode(F.encode("queue", "ISO-8859-1"), "UTF-8"))
    return _time_filter(_typed(df), since_ms, until_ms)
