"""The report's plots are per dialect (issue 18 item 5): the series that pipeline.report draws
keep each (queue, dialect) apart, a queue used by several dialects included, and report.html
shows one set of plots per producer dialect. Rows come from tests/pipeline_oracle.py over a
hand-written history (the Spark side is checked against the same oracle in
test_pipeline_metrics.py), so no Spark runs here.
"""
from __future__ import annotations

import os

from pipeline.report import (PLOTS, busiest, depth_series, dialects, latency_series, plot_file,
                             throughput_series, write_report)

from .pipeline_oracle import oracle_metrics, oracle_summary
from .test_pipeline_oracle import History, T

W = 1_000     # 1 s windows, ms


def _tables(rows):
    """(metrics rows, summary rows) as pipeline.analyze writes them (dicts with the keys)."""
    metrics = [{"queue": q, "dialect": d, "window_start_ms": w, "window_ms": W, **v}
               for (q, d, w), v in oracle_metrics(rows, W).items()]
    summary = [{"queue": q, "dialect": d, **v} for (q, d), v in oracle_summary(rows).items()]
    return metrics, summary


def _shared_history() -> History:
    """Queue `shared` used by beanstalk (3 jobs, 2 done in window 1) and workq (1 job, left
    leased), and a beanstalk-only queue `solo`."""
    h = History()
    for j in (1, 2, 3):
        h(j, "put", 0, queue="shared")
    h(4, "add", 10, "workq", "shared"), h(4, "reserve", 20, "workq", "shared", 1)
    for j in (1, 2):
        h(j, "reserve", W + 100 * j, queue="shared", attempt=1)
        h(j, "delete", W + 100 * j + 50, queue="shared", attempt=1)
    h(5, "put", 2 * W, queue="solo")
    return h


def test_series_keep_each_dialect_of_a_shared_queue_apart():
    metrics, summary = _tables(_shared_history().rows)
    depth = depth_series(metrics)
    assert depth[("shared", "beanstalk")] == [(T, 3), (T + W, 1)]
    assert depth[("shared", "workq")] == [(T, 1)]
    assert depth[("solo", "beanstalk")] == [(T + 2 * W, 1)]
    tput = throughput_series(metrics)
    assert tput[("shared", "beanstalk")] == [(T, 0.0), (T + W, 2.0)]
    assert tput[("shared", "workq")] == [(T, 0.0)]
    h = _shared_history()
    h(7, "put", 4 * W, queue="shared"), h(7, "reserve", 4 * W, queue="shared", attempt=1)
    h(7, "delete", 4 * W, queue="shared", attempt=1)
    gap = throughput_series(_tables(h.rows)[0])[("shared", "beanstalk")]
    assert gap == [(T, 0.0), (T + W, 2.0), (T + 2 * W, 0.0), (T + 4 * W, 1.0)]   # not 2.0 on
    lat = latency_series(summary)
    assert lat[("shared", "beanstalk")] == {"wait": [1100, 1200, 1200], "run": [50, 50, 50]}
    assert lat[("shared", "workq")] == {"wait": [10, 10, 10], "run": [0, 0, 0]}
    assert dialects(summary) == ["beanstalk", "workq"]                # busiest first
    assert busiest(summary, "beanstalk") == ["shared", "solo"]
    assert busiest(summary, "workq") == ["shared"]


def test_report_html_shows_one_set_of_plots_per_dialect(tmp_path):
    h = _shared_history()
    h(6, "push", 5, "bunqueue", "shared"), h(6, "reserve", 6, "bunqueue", "shared", 1)
    h(6, "complete", 9, "bunqueue", "shared", 1)
    metrics, summary = _tables(h.rows)
    out = str(tmp_path / "r")
    page = open(write_report(out, metrics, summary, {"source": "jdbc", "window": "1s",
                                                     "sla_wait_ms": 1, "events": len(h.rows),
                                                     "first_ms": T, "last_ms": T + 2 * W})).read()
    for d in ("beanstalk", "workq", "bunqueue"):
        assert f"<h2>Jobs produced by {d}</h2>" in page
        for kind in PLOTS:
            f = plot_file(kind, d)
            assert f"src='{f}'" in page
            data = open(os.path.join(out, f), "rb").read()
            assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5_000
    assert not os.path.exists(os.path.join(out, "depth.png"))       # no merged plot
    assert sorted(f for f in os.listdir(out) if f.endswith(".png")) == sorted(
        plot_file(k, d) for k in PLOTS for d in ("beanstalk", "workq", "bunqueue"))
    # the table: one row per queue and dialect
    assert page.count("<tr><td>shared</td>") == 3
    assert "<td>shared</td><td>workq</td>" in page


def test_plot_file_names_are_safe():
    assert plot_file("depth", "beanstalk") == "depth-beanstalk.png"
    assert plot_file("latency", "glide mq/../x") == "latency-glide_mq____x.png"


def test_an_empty_history_has_no_plots(tmp_path):
    path = write_report(str(tmp_path), [], [], {"source": "jdbc", "window": "1m",
                                                "sla_wait_ms": 1, "events": 0})
    page = open(path).read()
    assert "no events" in page and "No jobs, no plots." in page
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".png")]
