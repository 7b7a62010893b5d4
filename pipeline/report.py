"""The human side of `jobgate analyze`: report.html with PNG plots drawn by matplotlib.

Input: the metrics and summary rows (dicts with the columns of pipeline.analyze.MEASURES),
already collected on the driver; they are small (one row per queue, dialect and window).
Plots, one set per producer dialect (the report's rows are per queue and dialect, so are its
plots: a beanstalk queue's line is never summed with a workq queue's of the same name):
depth-<dialect>.png (jobs waiting or running over time, one line per queue),
throughput-<dialect>.png (completed jobs per second, per queue), latency-<dialect>.png (wait
and run time p50/p90/p99 per queue).
"""
from __future__ import annotations

import datetime
import html
import os
import re
from collections import defaultdict

#: Queues drawn in each dialect's line plots (its busiest); the tables list every queue.
MAX_QUEUES = 8
#: The plots drawn for each dialect, in order; each kind is its files' prefix (plot_file).
PLOTS = ("depth", "throughput", "latency")


def _ts(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)


def _load(summary: list[dict]) -> dict[tuple[str, str], int]:
    load = defaultdict(int)
    for r in summary:
        load[(r["queue"], r["dialect"])] += r["enqueued"] + r["started"]
    return load


def dialects(summary: list[dict]) -> list[str]:
    """The dialects of the summary rows, busiest first (enqueued + started), then by name."""
    load = defaultdict(int)
    for (_, d), n in _load(summary).items():
        load[d] += n
    return sorted(load, key=lambda d: (-load[d], d))


def busiest(summary: list[dict], dialect: str) -> list[str]:
    """The up to MAX_QUEUES queues drawn in `dialect`'s plots: its busiest, then by name."""
    load = {q: n for (q, d), n in _load(summary).items() if d == dialect}
    return sorted(load, key=lambda q: (-load[q], q))[:MAX_QUEUES]


def plot_file(kind: str, dialect: str) -> str:
    """The file name of plot `kind` (one of PLOTS) of `dialect`: `depth-beanstalk.png`; a
    character outside [A-Za-z0-9_-] in the dialect's name becomes `_`."""
    return f"{kind}-{re.sub(r'[^A-Za-z0-9_-]', '_', dialect)}.png"


def depth_series(metrics: list[dict]) -> dict[tuple[str, str], list[tuple[int, int]]]:
    """Per (queue, dialect), [(window_start_ms, depth)] over that key's windows, in time order:
    the jobs of that producer dialect still waiting or running at each window's end (a value
    holds until the key's next window)."""
    out = defaultdict(list)
    for r in sorted(metrics, key=lambda r: r["window_start_ms"]):
        out[(r["queue"], r["dialect"])].append((r["window_start_ms"], r["depth"]))
    return dict(out)


def throughput_series(metrics: list[dict]) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """Per (queue, dialect), [(window_start_ms, completed jobs per second)] over that key's
    windows, in time order; after a window that the key's next one does not follow at once, a
    point of 0.0 at the following window (no events there: nothing completed), so a step line
    does not carry a rate across the gap."""
    out = defaultdict(list)
    for r in sorted(metrics, key=lambda r: r["window_start_ms"]):
        pts = out[(r["queue"], r["dialect"])]
        w = r["window_start_ms"]
        if pts and w > pts[-1][0] + r["window_ms"] and pts[-1][1]:
            pts.append((pts[-1][0] + r["window_ms"], 0.0))
        pts.append((w, r["throughput_per_s"] or 0.0))
    return dict(out)


def latency_series(summary: list[dict]) -> dict[tuple[str, str], dict[str, list[int]]]:
    """Per (queue, dialect), {"wait": [p50, p90, p99], "run": [p50, p90, p99]} in ms from the
    summary (0 where there is no value)."""
    return {(r["queue"], r["dialect"]): {k: [r[f"{k}_p{p}_ms"] or 0 for p in (50, 90, 99)]
                                         for k in ("wait", "run")} for r in summary}


def _label(q: str) -> str:
    """A queue name as a matplotlib label: `$` would start mathtext."""
    return q.replace("$", r"\$")


def _plot_lines(path, series, dialect, queues, ylabel, title, window_ms, until_ms):
    """One line per queue of `dialect`: series[(queue, dialect)] as steps; each value holds
    for its window, and a depth (`until_ms` not None) holds until until_ms."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 4), dpi=100)
    for q in queues:
        pts = series.get((q, dialect)) or []
        if pts:
            end = max(pts[-1][0] + window_ms, until_ms or 0)
            xs = [_ts(w) for w, _ in pts] + [_ts(end)]
            ys = [v for _, v in pts] + [pts[-1][1]]
            ax.step(xs, ys, where="post", label=_label(q),
                    marker="o" if len(pts) <= 60 else None, markersize=3)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title}: jobs produced by {dialect}")
    ax.grid(alpha=0.3)
    if queues:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _plot_latency(path, latency, dialect, queues):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=100)
    width = 0.27
    for ax, kind in zip(axes, ("wait", "run")):
        xs = range(len(queues))
        for i, p in enumerate((50, 90, 99)):
            ax.bar([x + (i - 1) * width for x in xs],
                   [latency[(q, dialect)][kind][i] for q in queues], width, label=f"p{p}")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([_label(q) for q in queues], rotation=30, ha="right", fontsize="small")
        ax.set_ylabel("ms")
        ax.set_title(f"{kind} time per queue ({dialect})")
        ax.legend(fontsize="small")
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_plots(out_dir: str, metrics: list[dict], summary: list[dict]) -> dict[str, list[str]]:
    """Draw the PLOTS of every dialect of `summary` into out_dir; returns {dialect: [file
    names, in PLOTS order]} (dialects busiest first)."""
    window_ms = metrics[0]["window_ms"] if metrics else 60_000
    last = max((r["window_start_ms"] for r in metrics), default=0) + window_ms
    depth, tput, lat = depth_series(metrics), throughput_series(metrics), latency_series(summary)
    out = {}
    for d in dialects(summary):
        queues = busiest(summary, d)
        files = [plot_file(k, d) for k in PLOTS]
        _plot_lines(os.path.join(out_dir, files[0]), depth, d, queues,
                    "jobs (ready, delayed, reserved)", "Queue depth at the end of each window",
                    window_ms, last)
        _plot_lines(os.path.join(out_dir, files[1]), tput, d, queues, "completed jobs / s",
                    "Throughput", window_ms, None)
        _plot_latency(os.path.join(out_dir, files[2]), lat, d, queues)
        out[d] = files
    return out


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
    plots = write_plots(out_dir, metrics, summary)
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
    if not plots:
        parts.append("<p>No jobs, no plots.</p>")
    for d, files in plots.items():   # one section per producer dialect
        parts.append(f"<h2>Jobs produced by {e(d)}</h2>" + "".join(
            f"<img src='{f}' alt='{kind} ({e(d)})'>" for kind, f in zip(
                ("queue depth", "throughput", "latency percentiles"), files)))
    parts += ["<h2>Per queue and dialect</h2><table><tr>"
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
