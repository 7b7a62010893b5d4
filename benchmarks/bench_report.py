"""Benchmark results: percentiles, the median of repeated runs, and the printed tables."""
from __future__ import annotations

import datetime
import json
import math
import os
import platform
import sys

# Ratio columns printed when both targets ran: (numerator, denominator).
DEFAULT_RATIOS = (
    ("jobgate-memory", "beanstalkd"),
    ("jobgate-buffered", "beanstalkd"),
    ("jobgate", "beanstalkd"),
    ("jobgate", "beanstalkd-b"),
)


def percentile(sorted_vals: list[float], q: float) -> float | None:
    if not sorted_vals:
        return None
    k = max(0, min(len(sorted_vals) - 1, math.ceil(q / 100.0 * len(sorted_vals)) - 1))
    return sorted_vals[k]


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000.0, 3)


def fmt_rate(v) -> str:
    return "-" if v is None else f"{v:,.0f}"


def fmt_ms(v) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def _cells(results: list[dict]) -> list[tuple]:
    """(workload, mode, connections) in the order the results first mention them."""
    cells = []
    for r in results:
        key = (r["workload"], r["mode"], r["connections"])
        if key not in cells:
            cells.append(key)
    return cells


def _default_label(results: list[dict]):
    batch = next((r["batch"] for r in results if r["mode"] == "pipelined"), 100)

    def wlabel(w, m):
        return f"{w} / {'pipe' + str(batch) if m == 'pipelined' else 'nopipe'}"
    return wlabel


def side_by_side(results: list[dict], targets: list[str], ratios, label=None
                 ) -> tuple[list[str], list[list[str]]]:
    """The jobs/s of every target side by side, one row per cell, plus a column a/b for each
    (a, b) in ratios where both targets are in `targets`. Returns (header, rows), all
    strings; a row is [workload label, connections, values...]."""
    label = label or _default_label(results)
    by = {(r["workload"], r["mode"], r["connections"], r["target"]): r for r in results}
    present = [(a, b) for a, b in ratios if a in targets and b in targets]
    header = ["workload", "conns"] + list(targets) + [f"{a}/{b}" for a, b in present]
    rows = []
    for (w, m, c) in _cells(results):
        vals = [label(w, m), str(c)]
        for t in targets:
            r = by.get((w, m, c, t))
            vals.append("ERROR" if r and r.get("error") else fmt_rate(r and r.get("jobs_per_s")))
        for a, b in present:
            ra, rb = by.get((w, m, c, a)), by.get((w, m, c, b))
            x, y = ra and ra.get("jobs_per_s"), rb and rb.get("jobs_per_s")
            vals.append(f"{x / y:.2f}" if x and y else "-")
        rows.append(vals)
    return header, rows


def print_markdown_side_by_side(results: list[dict], targets: list[str], ratios, label=None,
                                out=sys.stdout) -> None:
    """side_by_side() as a markdown table (numbers right-aligned)."""
    header, rows = side_by_side(results, targets, ratios, label)
    print("| " + " | ".join(header) + " |", file=out)
    print("| --- | " + " | ".join("---:" for _ in header[1:]) + " |", file=out)
    for row in rows:
        print("| " + " | ".join(row) + " |", file=out)


def print_tables(results: list[dict], targets: list[str], ratios, out=sys.stdout, label=None,
                 latency_note: str = "per batch when pipelined, per command when unpipelined"
                 ) -> None:
    """The per-target table (rate, latency, CPU columns, notes; a result's own "note" is added
    to its notes) and the side-by-side table with ratio columns. label(workload, mode) names a
    row (default: `put / pipe100`)."""
    cells = _cells(results)
    by = {(r["workload"], r["mode"], r["connections"], r["target"]): r for r in results}
    wlabel = label or _default_label(results)

    wl = max([len(wlabel(*c[:2])) for c in cells] + [8])
    tl = max([len(t) for t in targets] + [6])
    print(f"\nPer target (latency: {latency_note}):", file=out)
    hdr = (f"{'workload':<{wl}} {'conns':>5}  {'target':<{tl}} {'jobs/s':>10} {'p50 ms':>8} "
           f"{'p99 ms':>8} {'srv cpu':>7} {'cli cpu':>7} {'cli us/job':>10} {'other':>6}  note")
    print(hdr, file=out)
    print("-" * len(hdr), file=out)
    for (w, m, c) in cells:
        for t in targets:
            r = by.get((w, m, c, t))
            if r is None:
                continue
            if r.get("error"):
                print(f"{wlabel(w, m):<{wl}} {c:>5}  {t:<{tl}} {'ERROR':>10}  {r['error'][:100]}",
                      file=out)
                continue
            lat = r["latency_ms"]
            notes = []
            if r.get("drained_early"):
                notes.append("drained early")
            if r.get("failed_runs"):
                notes.append(f"{r['failed_runs']} run(s) failed")
            rr = r.get("runs_jobs_per_s") or []
            if len(rr) > 1:
                notes.append(f"runs {min(rr) / 1000:.0f}k-{max(rr) / 1000:.0f}k")
            if r.get("note"):
                notes.append(r["note"])
            note = ", ".join(notes)
            srv = r.get("server_cpu_pct")
            oth = r.get("other_cpu_pct")
            print(f"{wlabel(w, m):<{wl}} {c:>5}  {t:<{tl}} {fmt_rate(r['jobs_per_s']):>10} "
                  f"{fmt_ms(lat['p50']):>8} {fmt_ms(lat['p99']):>8} "
                  f"{('-' if srv is None else f'{srv:.0f}%'):>7} "
                  f"{r.get('client_cpu_pct_per_proc', r['client_cpu_pct_per_conn']):>6.0f}% "
                  f"{r['client_cpu_us_per_job'] or 0:>10.2f} "
                  f"{('-' if oth is None else f'{oth:.0f}%'):>6}  {note}",
                  file=out)

    header, rows = side_by_side(results, targets, ratios, wlabel)
    print("\njobs/s side by side" + (" with ratios" if len(header) > 2 + len(targets) else "")
          + ":", file=out)
    widths = [wl, 5] + [max(10, len(h)) for h in header[2:]]
    line = (f"{header[0]:<{wl}} {header[1]:>5}  "
            + " ".join(f"{h:>{w}}" for h, w in zip(header[2:], widths[2:])))
    print(line, file=out)
    print("-" * len(line), file=out)
    for row in rows:
        print(f"{row[0]:<{wl}} {row[1]:>5}  "
              + " ".join(f"{v:>{w}}" for v, w in zip(row[2:], widths[2:])), file=out)


def pick_median(runs: list[dict]) -> dict:
    """The run with the median jobs/s (lower median for an even count); all rates kept."""
    ok = [r for r in runs if not r.get("error")]
    bad = [r for r in runs if r.get("error")]
    if not ok:
        out = dict(bad[0])
        out["failed_runs"] = len(bad)
        return out
    ok.sort(key=lambda r: r["jobs_per_s"])
    out = dict(ok[(len(ok) - 1) // 2])
    out["runs_jobs_per_s"] = [r["jobs_per_s"] for r in runs if not r.get("error")]
    if bad:
        out["failed_runs"] = len(bad)
        out["failed_errors"] = sorted({r["error"] for r in bad})
    return out


def run_meta(args, names: list[str], templates: dict[str, str], **extra) -> dict:
    """The "meta" of a run's JSON: time, machine, the shared run options, `extra`, the target
    commands. Prints a header (time, cpus, python, the extra scalars) and the commands to
    stderr."""
    meta = {
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "argv": sys.argv, "host": platform.node(), "cpus": os.cpu_count(),
        "platform": platform.platform(), "python": sys.version.split()[0], **extra,
        "batch": args.batch, "repeat": args.repeat, "recv_mode": args.recv,
        "wait_quiet": args.wait_quiet, "loadavg_start": os.getloadavg(),
        "commands": {n: templates[n] for n in names},
    }
    shown = "  ".join(f"{k}={v}" for k, v in extra.items()
                      if isinstance(v, (str, int, float)) or v is None)
    print(f"# {meta['started']}  cpus={meta['cpus']}  python={meta['python']}  {shown}",
          file=sys.stderr)
    for n in names:
        print(f"# {n}: {templates[n]}", file=sys.stderr)
    return meta


def finish(json_path: str | None, payload: dict, results: list[dict]) -> int:
    """Writes payload as JSON to json_path (when given); the exit status: 1 when any result
    is an error."""
    if json_path:
        with open(json_path, "w") as f:
            json.dump(payload, f, indent=2)
        print(f"\nwrote {json_path}")
    return 1 if any(r.get("error") for r in results) else 0
