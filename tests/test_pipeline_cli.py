"""The pipeline's commands end to end, as an operator runs them (issue 5 "Done when"): after
driving load, `jobgate analyze` produces the report with its plots from the live SQLite database
(the server still running), the same command works from exported Parquet and against
PostgreSQL, and `jobgate enqueue` fans a CSV out as jobs. Each command is a real process with
its own Spark.
"""
from __future__ import annotations

import os
import subprocess
import sys

import greenstalk
import pyarrow.parquet as pq
import pytest

from pipeline.report import PLOTS, plot_file

from .pipeline_history import QUEUES, drive_history
from .pipeline_oracle import read_events
from .pipeline_support import fresh_db
from .support import ROOT, Server, make_pg_database, pg_admin_url

ENQUEUE = {"put", "add", "schedule", "run", "push"}


def jobgate(*args, check=True, env=None):
    p = subprocess.run([sys.executable, "-m", "gateway.cli", *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})))
    if check:
        assert p.returncode == 0, p.stderr[-3000:]
    return p


def check_report(out: str, rows: list[dict]) -> None:
    """The report, its three plots per producer dialect and both tables exist and hold this
    history."""
    html = open(os.path.join(out, "report.html")).read()
    for q in QUEUES:
        assert f"<td>{q}</td>" in html
    summary = pq.read_table(os.path.join(out, "summary")).to_pylist()
    assert {"beanstalk", "workq", "bunqueue"} <= {r["dialect"] for r in summary}
    for d in {r["dialect"] for r in summary}:
        for kind in PLOTS:
            png = plot_file(kind, d)
            data = open(os.path.join(out, png), "rb").read()
            assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000
            assert f"src='{png}'" in html
    assert sum(r["enqueued"] for r in summary) == sum(r["event"] in ENQUEUE for r in rows)
    assert {r["queue"] for r in summary} == set(QUEUES)
    metrics = pq.read_table(os.path.join(out, "metrics")).to_pylist()
    assert sum(r["enqueued"] for r in metrics) == sum(r["enqueued"] for r in summary)


def test_report_from_the_live_sqlite_database_and_from_parquet(tmp_path):
    url = f"sqlite:///{tmp_path}/jobgate.db"
    s = Server(url, workq=True, bunqueue=True)
    try:
        drive_history(s)
        rows = read_events(url)
        p = jobgate("analyze", "--database", url, "--out", str(tmp_path / "live"),
                    "--master", "local[2]", "--window", "1m")
        assert "report:" in p.stdout
    finally:
        s.stop()
    check_report(str(tmp_path / "live"), rows)
    rows = read_events(url)   # the stop may add abandons
    jobgate("export", "events", "--database", url, "--out", str(tmp_path / "exp"))
    jobgate("analyze", "--source", "parquet", "--parquet", str(tmp_path / "exp"),
            "--out", str(tmp_path / "pq"), "--master", "local[2]", "--window", "1h",
            "--sla-wait", "500ms")
    check_report(str(tmp_path / "pq"), rows)


def test_report_from_postgresql(tmp_path):
    admin = pg_admin_url()
    if not admin:
        pytest.skip("PostgreSQL tests need JOBGATE_TEST_PG_URL; .ci/run sets it")
    url, drop = make_pg_database(admin)
    try:
        s = Server(url, workq=True, bunqueue=True)
        try:
            drive_history(s)
        finally:
            s.stop()
        jobgate("analyze", "--database", url, "--out", str(tmp_path / "pg"),
                "--master", "local[2]")
        check_report(str(tmp_path / "pg"), read_events(url))
    finally:
        drop()


def test_enqueue_a_csv(tmp_path):
    csv = tmp_path / "rows.csv"
    csv.write_text("id,path\n" + "".join(f"{i},img-{i}.png\n" for i in range(1000)))
    s = Server(f"sqlite:///{tmp_path}/j.db", bunqueue=True)
    try:
        args = ["enqueue", "--from", str(csv), "--queue", "thumbs", "--server",
                f"127.0.0.1:{s.bunqueue_port}", "--id-column", "id", "--master", "local[2]"]
        p = jobgate(*args)
        assert "1000 rows -> 1000 jobs on thumbs, 0 errors" in p.stdout
        jobgate(*args)   # the same run again: deduplicated by the row ids
        g = greenstalk.Client(("127.0.0.1", s.port))
        assert g.stats_tube("thumbs")["current-jobs-ready"] == 1000
        g.close()
    finally:
        s.stop()


def test_bad_arguments_and_missing_pieces(tmp_path):
    p = jobgate("analyze", "--out", str(tmp_path / "r"), "--window", "5m", check=False)
    assert p.returncode == 2 and "--window must be one of 1m, 1h, 1d" in p.stderr
    p = jobgate("analyze", "--database", f"sqlite:///{tmp_path}/none.db", "--out",
                str(tmp_path / "r"), check=False)
    assert p.returncode == 1 and "no SQLite database at" in p.stderr
    p = jobgate("analyze", "--source", "parquet", "--parquet", str(tmp_path), "--out",
                str(tmp_path / "r"), check=False)
    assert p.returncode == 1 and "run `jobgate export events" in p.stderr
    fresh_db(f"sqlite:///{tmp_path}/x.db")
    p = jobgate("analyze", "--database", f"sqlite:///{tmp_path}/x.db", "--out",
                str(tmp_path / "r"), check=False, env={"JOBGATE_JDBC_JARS": "/nonexistent.jar"})
    assert p.returncode == 1 and "libxerial-sqlite-jdbc-java" in p.stderr


def test_without_the_extra_the_commands_say_how_to_install_it(tmp_path):
    # pyspark, pyarrow and matplotlib made unimportable, as on a server-only install
    code = ("import sys\nfor m in ('pyspark', 'pyarrow', 'matplotlib'): sys.modules[m] = None\n"
            "from gateway.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    for args in (["analyze", "--out", str(tmp_path)], ["export", "events", "--out", str(tmp_path)],
                 ["enqueue", "--from", "x.csv", "--queue", "q"]):
        p = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True,
                           text=True, env=dict(os.environ, PYTHONPATH=ROOT), timeout=60)
        assert p.returncode == 2
        assert "pip install 'jobgate[pipeline]'" in p.stderr
