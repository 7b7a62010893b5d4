"""The human side of `jobgate analyze`: report.html with PNG plots drawn by matplotlib.

Input: the metrics and summary rows (dicts with the columns of pipeline.analyze.MEASURES),
already collected on the driver; they are small (one row per queue, dialect and window).
Plots: depth.png (jobs waiting or running over time, per queue), throughput.png (completed jobs
per second, per queue), latency.png (wait and run time p50/p90/p99 per queue).
"""
from __future__ import annotations

import datetime
import html
import os
from collections import defaultdict

#: Queues drawn in the line plots (the busiest); the tables list every queue.
MAX_QUEUES = 8


def _ts(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)


def _busiest(summary: list[dict]) -> list[str]:
    load = defaultdict(int)
    for r in summary:
        load[r["queue"]] += r["enqueued"] + r["started"]
    return sorted(load, key=lambda q: (-load[q], q))[:MAX_QUEUES]


def depth_series(metrics: list[dict]) -> dict[str, list[tuple[int, int]]]:
    """Per queue, [(window_start_ms, depth)] over the queue's windows: each dialect's depth
    carried forward to windows where it had no event, summed over dialects."""
    by_queue = defaultdict(lambda: defaultdict(dict))
    for r in metrics:
        by_queue[r["queue"]][r["dialect"]][r["window_start_ms"]] = r["depth"]
    out = {}
    for q, dialects in by_queue.items():
        windows = sorted({w for d in dialects.values() for w in d})
        last = {d: 0 for d in dialects}
        series = []
        for w in windows:
            for d, points in dialects.items():
                if w in points:
                    last[d] = points[w]
            series.append((w, sum(last.values())))
        out[q] = series
    return out


def throughput_series(metrics: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """Per queue, [(window_start_ms, completed per second)] summed over dialects."""
    acc = defaultdict(lambda: defaultdict(float))
    for r in metrics:
        acc[r["queue"]][r["window_start_ms"]] += r["throughput_per_s"] or 0.0
    return {q: sorted(v.items()) for q, v in acc.items()}


def _label(q: str) -> str:
    """A queue name as a matplotlib label: `$` would start mathtext."""
    return q.replace("$", r"\$")


def _plot_lines(path, series, queues, ylabel, title, window_ms):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 4), dpi=100)
    for q in queues:
        pts = series.get(q) or []
        if pts:   # each value holds for its window: a step, closed at the last window's end
            xs = [_ts(w) for w, _ in pts] + [_ts(pts[-1][0] + window_ms)]
            ys = [v for _, v in pts] + [pts[-1][1]]
            ax.step(xs, ys, where="post", label=_label(q),
                    marker="o" if len(pts) <= 60 else None, markersize=3)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if queues:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _plot_latency(path, summary, queues):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    per_q = defaultdict(lambda: {"wait": [0, 0, 0], "run": [0, 0, 0]})
    for r in summary:   # the slowest dialect of each queue (the summary is per dialect)
        for kind in ("wait", "run"):
            for i, p in enumerate((50, 90, 99)):
                v = r[f"{kind}_p{p}_ms"] or 0
                per_q[r["queue"]][kind][i] = max(per_q[r["queue"]][kind][i], v)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=100)
    width = 0.27
    for ax, kind in zip(axes, ("wait", "run")):
        xs = range(len(queues))
        for i, p in enumerate((50, 90, 99)):
            ax.bar([x + (i - 1) * width for x in xs], [per_q[q][kind][i] for q in queues],
                   width, label=f"p{p}")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([_label(q) for q in queues], rotation=30, ha="right", fontsize="small")
        ax.set_ylabel("ms")
        ax.set_title(f"{kind} time per queue")
        ax.legend(fontsize="small")
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _fmt(v, pct=False):
    if v is None:
        return "–"
    if pct:
        return f"{100 * v:.1f} %"
    if isinstance(v, float):
        return f"{v:.3g}"
    return f"{v:,}"


SUMMARY_COLS = (("queue", "queue"), ("dialect", "dialect"), ("enqueued", "enqueued"),
                ("started", "started"), ("completed", "completed"), ("failed", "failed"),
                ("timed_out", "timed out"), ("buried", "buried / DLQ"),
                ("failure_rate", "failure rate"), ("timeout_rate", "timeout rate"),
                ("retry_rate", "retry rate"), ("wait_p50_ms", "wait p50 ms"),
                ("wait_p99_ms", "wait p99 ms"), ("run_p50_ms", "run p50 ms"),
                ("run_p99_ms", "run p99 ms"), ("sla_breaches", "SLA breaches"),
                ("depth", "depth now"))


def write_report(out_dir: str, metrics: list[dict], summary: list[dict], info: dict) -> str:
    """Write out_dir/report.html and its PNG plots; returns the report's path.

    info: what the run was (source, window, sla_wait_ms, events, first_ms, last_ms), shown at
    the top."""
    os.makedirs(out_dir, exist_ok=True)
    queues = _busiest(summary)
    window_ms = metrics[0]["window_ms"] if metrics else 60_000
    _plot_lines(os.path.join(out_dir, "depth.png"), depth_series(metrics), queues,
                "jobs (ready, delayed, reserved)", "Queue depth at the end of each window",
                window_ms)
    _plot_lines(os.path.join(out_dir, "throughput.png"), throughput_series(metrics), queues,
                "completed jobs / s", "Throughput", window_ms)
    _plot_latency(os.path.join(out_dir, "latency.png"), summary, queues)
    rows = sorted(summary, key=lambda r: (r["queue"], r["dialect"]))
    total = {k: sum(r[k] for r in summary) for k in
             ("enqueued", "started", "completed", "failed", "timed_out", "buried", "sla_breaches")}
    worst = sorted((r for r in summary if r["failure_rate"]),
                   key=lambda r: -r["failure_rate"])[:3]
    e = html.escape
    span = ("no events" if not info.get("events") else
            f"{_ts(info['first_ms']):%Y-%m-%d %H:%M:%S} to {_ts(info['last_ms']):%Y-%m-%d %H:%M:%S} UTC")
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>jobgate: job history</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
        "padding:3px 6px;text-align:right}td:first-child,td:nth-child(2),th{text-align:left}"
        "img{max-width:100%}.k{font-size:1.3em;margin-right:1.5em}</style></head><body>",
        "<h1>How the queues are doing</h1>",
        f"<p>{e(span)} · {info.get('events', 0):,} events from {e(str(info.get('source')))} · "
        f"windows of {e(str(info.get('window')))} · SLA: first reserve within "
        f"{info.get('sla_wait_ms', 0):,} ms</p>",
        "<p>" + "".join(f"<span class='k'><b>{total[k]:,}</b> {e(label)}</span>" for k, label in
                        (("enqueued", "enqueued"), ("completed", "completed"),
                         ("failed", "failed"), ("timed_out", "timed out"),
                         ("buried", "buried / dead-lettered"),
                         ("sla_breaches", "SLA breaches"))) + "</p>",
    ]
    if worst:
        parts.append("<p>Highest failure rates: " + ", ".join(
            f"{e(r['queue'])} ({e(r['dialect'])}) {_fmt(r['failure_rate'], True)}"
            for r in worst) + ".</p>")
    parts += ["<h2>Depth over time</h2><img src='depth.png' alt='queue depth'>",
              "<h2>Throughput</h2><img src='throughput.png' alt='throughput'>",
              "<h2>Latency</h2><img src='latency.png' alt='latency percentiles'>",
              "<h2>Per queue and dialect</h2><table><tr>"
              + "".join(f"<th>{e(label)}</th>" for _, label in SUMMARY_COLS) + "</tr>"]
    for r in rows:
        parts.append("<tr>" + "".join(
            f"<td>{e(r[k]) if k in ('queue', 'dialect') else _fmt(r[k], k.endswith('_rate'))}</td>"
            for k, _ in SUMMARY_COLS) + "</tr>")
    parts.append("</table><p>Definitions: docs/pipeline.md. Tables: <code>metrics/</code> "
                 "(per window) and <code>summary/</code> (Parquet) beside this file.</p>"
                 "</body></html>")
    path = os.path.join(out_dir, "report.html")
    with open(path, "w") as f:
        f.write("\n".join(parts))
    return path
