"""Building the SparkSession the pipeline runs on: local by default, any cluster with `master`.

JDBC drivers come from Debian's packages (`libxerial-sqlite-jdbc-java` installs
/usr/share/java/sqlite-jdbc.jar, `libpostgresql-jdbc-java` /usr/share/java/postgresql.jar) or from
the comma-separated paths in JOBGATE_JDBC_JARS.
"""
from __future__ import annotations

import os
import sys

from .deps import require

#: The JDBC driver jars the pipeline looks for, by driver class.
DEFAULT_JARS = {
    "org.sqlite.JDBC": "/usr/share/java/sqlite-jdbc.jar",
    "org.postgresql.Driver": "/usr/share/java/postgresql.jar",
}
#: Debian package that provides each driver, for error messages.
JAR_PACKAGES = {"org.sqlite.JDBC": "libxerial-sqlite-jdbc-java",
                "org.postgresql.Driver": "libpostgresql-jdbc-java"}


def jdbc_jars() -> list[str]:
    """The driver jars to put on Spark's classpath: JOBGATE_JDBC_JARS when set, else those of
    DEFAULT_JARS that exist."""
    env = os.environ.get("JOBGATE_JDBC_JARS")
    if env:
        return [p for p in env.split(",") if p]
    return [p for p in DEFAULT_JARS.values() if os.path.exists(p)]


def session(master: str | None = None, app_name: str = "jobgate-pipeline",
            shuffle_partitions: int | None = None, conf: dict | None = None):
    """A SparkSession (created, or the active one reused) with the JDBC jars, UTC time and no UI.

    master: a Spark master URL; None means `local[*]`. shuffle_partitions: rows are shuffled
    by job id into this many partitions (default: 4 per local core, Spark's own default of 200
    on a cluster). Raises MissingExtra without pyspark."""
    require("pyspark")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    master = master or "local[*]"
    b = SparkSession.builder.appName(app_name).master(master)
    jars = jdbc_jars()
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        # an exported queue=123 directory is the queue "123", not a number
        "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
        "spark.driver.extraJavaOptions": "-Dlog4j2.level=ERROR",
        "spark.sql.execution.pythonUDF.arrow.enabled": "false",   # no pandas in the extra
    }
    if master.startswith("local"):   # a local run listens on loopback only
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    if jars:
        settings["spark.jars"] = ",".join(jars)
        settings["spark.driver.extraClassPath"] = ":".join(jars)
    if shuffle_partitions is None and master.startswith("local"):
        shuffle_partitions = 4 * _local_cores(master)
    if shuffle_partitions:
        settings["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    settings.update(conf or {})
    for k, v in settings.items():
        b = b.config(k, v)
    s = b.getOrCreate()
    s.sparkContext.setLogLevel("ERROR")
    return s


def _local_cores(master: str) -> int:
    """Cores of a `local`, `local[N]`, `local[*]` or `local[N,F]` master."""
    inner = master[6:-1] if master.startswith("local[") else "1"
    n = inner.split(",")[0].strip()
    return (os.cpu_count() or 1) if n == "*" else max(1, int(n))
