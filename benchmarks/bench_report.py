"""Benchmark results: percentiles, the median of repeated runs, and the printed tables."""
from __future__ import annotations

import math
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


def print_tables(results: list[dict], targets: list[str], ratios, out=sys.stdout) -> None:
    cells = []
    for r in results:
        key = (r["workload"], r["mode"], r["connections"])
        if key not in cells:
            cells.append(key)
    by = {(r["workload"], r["mode"], r["connections"], r["target"]): r for r in results}

    batch = next((r["batch"] for r in results if r["mode"] == "pipelined"), 100)

    def wlabel(w, m):
        return f"{w} / {'pipe' + str(batch) if m == 'pipelined' else 'nopipe'}"

    wl = max([len(wlabel(*c[:2])) for c in cells] + [8])
    tl = max([len(t) for t in targets] + [6])
    print("\nPer target (latency: per batch when pipelined, per command when unpipelined):", file=out)
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
            note = ", ".join(notes)
            srv = r.get("server_cpu_pct")
            oth = r.get("other_cpu_pct")
            print(f"{wlabel(w, m):<{wl}} {c:>5}  {t:<{tl}} {fmt_rate(r['jobs_per_s']):>10} "
                  f"{fmt_ms(lat['p50']):>8} {fmt_ms(lat['p99']):>8} "
                  f"{('-' if srv is None else f'{srv:.0f}%'):>7} "
                  f"{r['client_cpu_pct_per_conn']:>6.0f}% {r['client_cpu_us_per_job'] or 0:>10.2f} "
                  f"{('-' if oth is None else f'{oth:.0f}%'):>6}  {note}",
                  file=out)

    present = [(a, b) for a, b in ratios if a in targets and b in targets]
    print("\njobs/s side by side" + (" with ratios" if present else "") + ":", file=out)
    cols = [t for t in targets] + [f"{a}/{b}" for a, b in present]
    widths = [max(10, len(cn)) for cn in cols]
    hdr = f"{'workload':<{wl}} {'conns':>5}  " + " ".join(f"{cn:>{w}}" for cn, w in zip(cols, widths))
    print(hdr, file=out)
    print("-" * len(hdr), file=out)
    for (w, m, c) in cells:
        vals = []
        for t in targets:
            r = by.get((w, m, c, t))
            vals.append("ERROR" if r and r.get("error") else fmt_rate(r and r.get("jobs_per_s")))
        for a, b in present:
            ra, rb = by.get((w, m, c, a)), by.get((w, m, c, b))
            x, y = ra and ra.get("jobs_per_s"), rb and rb.get("jobs_per_s")
            vals.append(f"{x / y:.2f}" if x and y else "-")
        print(f"{wlabel(w, m):<{wl}} {c:>5}  " + " ".join(f"{v:>{wd}}" for v, wd in zip(vals, widths)),
              file=out)


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
