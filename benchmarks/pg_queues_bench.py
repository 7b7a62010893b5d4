"""jobgate against Procrastinate and pg-boss on one local PostgreSQL (issue 19): every target runs
the same cycle, enqueue -> fetch -> complete, with 100-byte payloads carrying their enqueue time,
P producers and W workers (default 8 and 32) at the same time for --duration seconds after a
--warmup; jobs/s counts the completions inside the timed window. Latencies (ms): end-to-end
(enqueue -> completion acknowledged) and fetch (enqueue -> the job in a worker's hands).

Targets: procrastinate (its worker, concurrency W), pg-boss (work() with localConcurrency W,
batchSize 1), pg-boss-b8 (localConcurrency W/8, batchSize 8: W jobs in hand as well),
jobgate (N node processes from --jobgate-cmd, one row per --jobgate-nodes count; beanstalk
put / reserve / delete, one client process per producer and worker), null / null-c (the
canned-reply servers of bench_servers.py: the beanstalk client's ceiling). See README.md."""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import BENCH_DIR, SCRIPT, BenchError  # noqa: E402
from bench_report import finish, fmt_ms, fmt_rate, percentile, pick_median  # noqa: E402
from bench_servers import (DEFAULT_TARGETS, Server, install_signal_cleanup,  # noqa: E402
                           machine_busy_seconds, proc_cpu_seconds, run_guarded, wait_quiet)
import pgq_jobgate  # noqa: E402
import pgq_setup  # noqa: E402

TARGETS = ("procrastinate", "pg-boss", "pg-boss-b8", "jobgate", "null", "null-c")
JOBGATE_CMD = ("{PYTHON} -m gateway.cli serve --listen beanstalk=127.0.0.1:{PORT}"
               " --database {PG_URL}")
END_MARGIN_S = 0.3   # CPU readings stop this long before the window ends
DB_NAMES = {"procrastinate": "bench_procrastinate", "pg-boss": "bench_pgboss",
            "jobgate": "bench_jobgate", "pg-boss-b8": "bench_pgboss"}
PGBOSS_B8 = 8   # pg-boss-b8: batchSize 8, localConcurrency workers / 8 (as many jobs in hand)


# ---- CPU readings over the timed window ------------------------------------------------------

def proc_table() -> tuple[dict[int, int], list[int]]:
    """One pass over /proc: (pid -> parent pid, the pids named `postgres`)."""
    parent, pg = {}, []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        i = data.rindex(b")")
        parent[int(e)] = int(data[i + 2:].split()[1])
        if data[data.index(b"(") + 1:i] == b"postgres":
            pg.append(int(e))
    return parent, pg


def _tree(roots, parent: dict[int, int]) -> list[int]:
    """roots and all their descendants."""
    out, todo = [], list(roots)
    kids: dict[int, list[int]] = {}
    for pid, pp in parent.items():
        kids.setdefault(pp, []).append(pid)
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


class CpuWindow:
    """CPU between start_ns and end_ns (monotonic) of PostgreSQL (all its processes), of the
    queue servers (jobgate nodes) and of the application side (the benchmark's producer and
    worker processes: for Procrastinate and pg-boss, the driver with the library in it), plus
    the whole machine and what is left of it (other: anything else running, e.g. another
    agent's tests), read by a thread. A process counts when it is there at both readings.
    pct(): % of one core each."""

    GROUPS = ("pg", "srv", "app")

    def __init__(self):
        self.server_pids: list[int] = []
        self.app_pids: list[int] = []
        self.values: dict[str, float] = {}
        self._t: threading.Thread | None = None

    def start(self, start_ns: int, end_ns: int, app_pids=None) -> None:
        if app_pids is not None:
            self.app_pids = list(app_pids)
        self._t = threading.Thread(target=self._run, args=(start_ns, end_ns), daemon=True)
        self._t.start()

    def _snap(self):
        parent, pg = proc_table()
        groups = {"pg": pg, "srv": _tree(self.server_pids, parent),
                  "app": _tree(self.app_pids, parent)}
        cpu = {g: {p: proc_cpu_seconds(p) for p in pids} for g, pids in groups.items()}
        return time.monotonic(), cpu, machine_busy_seconds() or 0.0

    def _run(self, start_ns: int, end_ns: int) -> None:
        time.sleep(max(0.0, (start_ns - time.monotonic_ns()) / 1e9))
        a = self._snap()
        # read before the end: the producer and worker processes exit at end_ns, and a
        # process that has exited takes its CPU time with it
        time.sleep(max(0.0, (end_ns - time.monotonic_ns()) / 1e9 - END_MARGIN_S))
        b = self._snap()
        dt = b[0] - a[0]
        if dt <= 0:
            return
        v = {}
        for g in self.GROUPS:
            both = [p for p, c in b[1][g].items() if c is not None and a[1][g].get(p) is not None]
            v[f"{g}_cpu_pct"] = 100 * sum(b[1][g][p] - a[1][g][p] for p in both) / dt
        v["busy_cpu_pct"] = 100 * (b[2] - a[2]) / dt
        v["other_cpu_pct"] = max(0.0, v["busy_cpu_pct"] - sum(v[f"{g}_cpu_pct"]
                                                              for g in self.GROUPS))
        self.values = v

    def pct(self) -> dict[str, float]:
        if self._t:
            self._t.join(5)
        return self.values


# ---- one run of one target --------------------------------------------------------------------

def spec_of(args, **extra) -> dict:
    return dict(producers=args.producers, workers=args.workers, warmup_s=args.warmup,
                duration_s=args.duration, cap=args.cap, rate=args.rate,
                io_timeout=args.io_timeout, **extra)


def run_external(argv: list[str], cpu: CpuWindow, timeout: float) -> dict:
    """Run a driver program; it prints "window START END", then one JSON line."""
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, cwd=BENCH_DIR,
                             start_new_session=True)
        cpu.app_pids = [p.pid]
        timer = threading.Timer(timeout, p.kill)
        timer.start()
        try:
            result = None
            for line in p.stdout:
                if line.startswith("window "):
                    cpu.start(*map(int, line.split()[1:3]))
                elif line.startswith("{"):
                    result = json.loads(line)
            p.wait()
        finally:
            timer.cancel()
            if p.poll() is None:
                p.kill()
                p.wait()
        if result is None:
            err.seek(0)
            tail = err.read()[-1500:].decode("utf-8", "replace")
            return {"errors": [f"driver exited {p.returncode} without a result: {tail}"]}
        return result


def wait_answering(server: Server, timeout: float) -> None:
    """Wait until the node answers a beanstalk command, not only accepts connections: the next
    node starts only then (a node still migrating a fresh database may listen already).
    Raises BenchError after timeout seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=2) as s:
                s.settimeout(max(0.5, min(5.0, deadline - time.monotonic())))
                s.sendall(b"list-tubes\r\n")
                if s.recv(64):
                    return
        except OSError as e:
            last = e
        time.sleep(0.1)
    raise BenchError(f"{server.name}: accepts connections but answers no command after "
                     f"{timeout:.0f}s ({last}); log: {server.log_tail(300)!r}")


def run_jobgate(args, template: str, nodes: int, pg_url: str, cpu: CpuWindow) -> dict:
    servers: list[Server] = []
    try:
        for i in range(nodes):
            subst = {"PYTHON": args.python, "PG_URL": pg_url, "NODE": str(i), "SCRIPT": SCRIPT}
            servers.append(Server(f"node{i}", template, subst, args.ready_timeout).start())
            cpu.server_pids.append(servers[-1].pid)
            wait_answering(servers[-1], args.ready_timeout)
        ports = [s.port for s in servers]
        res = pgq_jobgate.run(ports, spec_of(args), on_window=cpu.start)
        if res.get("errors"):   # the nodes' own words first (e.g. one refusing to share a db)
            time.sleep(0.5)
            for i, s in reversed(list(enumerate(servers))):
                rc = s.proc.poll()
                state = "running" if rc is None else f"exited with {rc}"
                res["errors"].insert(0, f"node {i} ({state}) log: {s.log_tail(300)!r}")
        return res
    except Exception as e:
        return {"errors": [f"{type(e).__name__}: {e}"]}
    finally:
        for s in servers:
            s.stop()


def run_one(args, target: str, nodes: int, ctx: dict) -> dict:
    """One run: fresh database, the driver, the summary row (errors in "error")."""
    cpu = CpuWindow()
    db = DB_NAMES.get(target)
    if db:
        pgq_setup.reset_database(args.admin_url, db)
    libpq = f"{args.pg}/{db}"
    timeout = args.warmup + args.duration + 120
    if target == "procrastinate":
        spec = spec_of(args, conninfo=libpq, pool=args.procrastinate_pool)
        raw = run_external([ctx["venv_py"], "pgq_procrastinate.py", json.dumps(spec)], cpu, timeout)
    elif target in ("pg-boss", "pg-boss-b8"):
        b8 = target == "pg-boss-b8"
        spec = spec_of(args, module_dir=args.build, url=libpq, pool=args.pgboss_pool,
                       batch_size=PGBOSS_B8 if b8 else args.pgboss_batch,
                       notify=not args.pgboss_no_notify,
                       local_concurrency=(max(1, args.workers // PGBOSS_B8) if b8 else
                                          args.pgboss_local_concurrency or args.workers),
                       polling_s=args.pgboss_polling)
        raw = run_external([ctx["node"], "pgq_pgboss.mjs", json.dumps(spec)], cpu, timeout)
    elif target == "jobgate":
        url = libpq.replace("postgresql://", "postgresql+psycopg://", 1)
        raw = run_jobgate(args, args.jobgate_cmd, nodes, url, cpu)
    else:
        raw = run_jobgate(args, DEFAULT_TARGETS[target], 1, "", cpu)
    return summarize(target, nodes, raw, cpu.pct())


def summarize(target: str, nodes: int, raw: dict, cpu: dict) -> dict:
    if target in ("procrastinate", "pg-boss", "pg-boss-b8"):
        cpu = {k: v for k, v in cpu.items() if k != "srv_cpu_pct"}   # no server process
    e2e = sorted(raw.get("e2e_ms") or [])
    fetch = sorted(raw.get("fetch_ms") or [])
    errors = raw.get("errors") or []
    row = {"target": target, "nodes": nodes, "jobs_per_s": raw.get("jobs_per_s") or 0.0,
           "completed": raw.get("completed", 0), "enqueued": raw.get("enqueued", 0),
           "window_s": raw.get("window_s"),
           "e2e_ms": {"n": len(e2e), "p50": percentile(e2e, 50), "p99": percentile(e2e, 99),
                      "max": e2e[-1] if e2e else None},
           "fetch_ms": {"n": len(fetch), "p50": percentile(fetch, 50),
                        "p99": percentile(fetch, 99), "max": fetch[-1] if fetch else None},
           **{k: round(v, 1) for k, v in cpu.items()}}
    used = sum(row.get(k) or 0.0 for k in ("pg_cpu_pct", "srv_cpu_pct", "app_cpu_pct"))
    if cpu and row["jobs_per_s"]:
        # CPU of the whole stack (PostgreSQL + servers + producers/workers) per job, in us:
        # steadier than jobs/s when a neighbour takes CPU
        row["stack_cpu_us_per_job"] = round(used / 100 / row["jobs_per_s"] * 1e6, 1)
    if errors:
        row["error"] = "; ".join(errors)[:500]
    elif not row["completed"]:
        row["error"] = "no job completed in the window"
    return row


# ---- output -------------------------------------------------------------------------------------

def label(r: dict) -> str:
    return f"{r['target']} x{r['nodes']}" if r["target"] == "jobgate" else r["target"]


def print_table(rows: list[dict], out=sys.stdout) -> None:
    print("\nenqueue -> fetch -> complete (latency ms: e2e = enqueue to completion acknowledged, "
          "fetch = enqueue to the job in a worker's hands; cpu % of one core; us/job: CPU of "
          "pg + srv + app per job):", file=out)
    hdr = (f"{'target':<16} {'nodes':>5} {'jobs/s':>9} {'e2e p50':>8} {'e2e p99':>8} "
           f"{'fetch p50':>9} {'fetch p99':>9} {'pg cpu':>6} {'srv cpu':>7} {'app cpu':>7} "
           f"{'other':>5} {'us/job':>6}  note")
    print(hdr, file=out)
    print("-" * len(hdr), file=out)
    for r in rows:
        if r.get("error") and not r.get("completed"):
            print(f"{r['target']:<16} {r['nodes']:>5} {'ERROR':>9}  {r['error'][:150]}", file=out)
            continue
        rr = r.get("runs_jobs_per_s") or []
        notes = [f"runs {min(rr):,.0f}-{max(rr):,.0f}"] if len(rr) > 1 else []
        pp = r.get("runs_e2e_p99_ms") or []
        if len(pp) > 1:
            notes = [f"runs' e2e p99 {min(pp):.1f}-{max(pp):.1f} ms"]
        if r.get("error"):
            notes.append("error: " + r["error"][:80])
        if r.get("failed_runs"):
            notes.append(f"{r['failed_runs']} run(s) failed")

        us = r.get("stack_cpu_us_per_job")
        us = "-" if us is None else f"{us:.0f}"

        def pc(k):
            return "-" if r.get(k) is None else f"{r[k]:.0f}%"
        print(f"{r['target']:<16} {r['nodes']:>5} {fmt_rate(r['jobs_per_s']):>9} "
              f"{fmt_ms(r['e2e_ms']['p50']):>8} {fmt_ms(r['e2e_ms']['p99']):>8} "
              f"{fmt_ms(r['fetch_ms']['p50']):>9} {fmt_ms(r['fetch_ms']['p99']):>9} "
              f"{pc('pg_cpu_pct'):>6} {pc('srv_cpu_pct'):>7} {pc('app_cpu_pct'):>7} "
              f"{pc('other_cpu_pct'):>5} "
              f"{us:>6}  "
              + ", ".join(notes), file=out)
    rate = {label(r): r["jobs_per_s"] for r in rows if r.get("completed")}
    ratios = []
    for other in ("procrastinate", "pg-boss", "pg-boss-b8"):
        for k in sorted(x for x in rate if x.startswith("jobgate")):
            if other in rate:
                ratios.append(f"{k}/{other} {rate[k] / rate[other]:.2f}")
    for k in sorted(x for x in rate if x.startswith("jobgate x") and x != "jobgate x1"):
        if "jobgate x1" in rate:
            ratios.append(f"{k}/jobgate x1 {rate[k] / rate['jobgate x1']:.2f}")
    if ratios:
        print("\njobs/s ratios: " + "   ".join(ratios), file=out)


def pick_run(rs: list[dict], paced: bool) -> dict:
    """The median run by jobs/s (bench_report.pick_median); with --rate every run makes the
    same jobs/s, so the median by e2e p99 instead (all rates still in runs_jobs_per_s)."""
    row = pick_median(rs)
    ok = [r for r in rs if not r.get("error") and r["e2e_ms"]["p99"] is not None]
    if paced and ok:
        ok.sort(key=lambda r: r["e2e_ms"]["p99"])
        row = dict(ok[(len(ok) - 1) // 2], runs_jobs_per_s=row.get("runs_jobs_per_s"),
                   runs_e2e_p99_ms=[r["e2e_ms"]["p99"] for r in ok])
    return row


# ---- main ---------------------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", default="procrastinate,pg-boss,pg-boss-b8,jobgate",
                    help="comma-separated, run interleaved in this order; known: "
                         + ", ".join(TARGETS) + " (default %(default)s)")
    ap.add_argument("--jobgate-nodes", default="1",
                    help="node counts for the jobgate target, e.g. 1,2,3 (default %(default)s)")
    ap.add_argument("--jobgate-cmd", default=JOBGATE_CMD,
                    help="command of one jobgate node; placeholders {PYTHON} {PORT} {PG_URL} "
                         "(SQLAlchemy URL of the benchmark database) {DIR} (an empty directory "
                         "per node) {NODE} (0..N-1). Default: %(default)s")
    ap.add_argument("--duration", type=float, default=10.0, help="timed seconds (default 10)")
    ap.add_argument("--warmup", type=float, default=2.0, help="untimed seconds first (default 2)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per target; the median run "
                    "(by jobs/s) is shown (default 1)")
    ap.add_argument("--producers", type=int, default=8, help="concurrent producers "
                    "(default 8)")
    ap.add_argument("--workers", type=int, default=32, help="concurrent workers (default 32)")
    ap.add_argument("--cap", type=int, default=64, help="at most this many jobs enqueued and not "
                    "yet completed; producers wait (default 64, 2 per worker)")
    ap.add_argument("--rate", type=float, default=0.0, help="total enqueue rate, jobs/s, spread "
                    "over the producers (open loop, still under --cap); 0 = as fast as the cap "
                    "allows (default)")
    ap.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432",
                    help="libpq URL of the server, without database (default %(default)s)")
    ap.add_argument("--admin-db", default="test", help="database to connect to for DROP/CREATE "
                    "DATABASE (default %(default)s)")
    ap.add_argument("--venv", default=pgq_setup.DEFAULT_VENV,
                    help="venv with Procrastinate (default %(default)s)")
    ap.add_argument("--build", default=pgq_setup.DEFAULT_BUILD,
                    help="npm prefix with pg-boss (default %(default)s)")
    ap.add_argument("--node", default=None, help="Node >= 22.12 (default: the one --setup put "
                    "in --build, else `node` on PATH)")
    ap.add_argument("--setup", action="store_true", help="install Procrastinate into --venv and "
                    "pg-boss + Node 22 into --build first (pinned versions)")
    ap.add_argument("--procrastinate-pool", type=int, default=34,
                    help="psycopg pool max_size of the Procrastinate worker (default 34)")
    ap.add_argument("--pgboss-pool", type=int, default=34,
                    help="pg pool `max` of the pg-boss worker instance (default 34)")
    ap.add_argument("--pgboss-batch", type=int, default=1, help="pg-boss work() batchSize "
                    "(default 1; above 1 also burstWhenBatchFull)")
    ap.add_argument("--pgboss-local-concurrency", type=int, default=0, metavar="N",
                    help="pg-boss work() localConcurrency (default: --workers); with "
                         "--pgboss-batch B, N x B jobs can be in hand at once")
    ap.add_argument("--pgboss-polling", type=float, default=0.5,
                    help="pg-boss pollingIntervalSeconds (>= 0.5; default %(default)s)")
    ap.add_argument("--pgboss-no-notify", action="store_true",
                    help="no LISTEN/NOTIFY (useListenNotify + queue notify are on by default)")
    ap.add_argument("--python", default=sys.executable, help="{PYTHON} (default: this one)")
    ap.add_argument("--ready-timeout", type=float, default=30.0)
    ap.add_argument("--io-timeout", type=float, default=30.0)
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                    help="before each run wait up to SECONDS for the machine to be idle")
    ap.add_argument("--json", default=None, metavar="FILE")
    args = ap.parse_args(argv)
    args.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    for t in args.targets:
        if t not in TARGETS:
            ap.error(f"unknown target {t!r}; known: {', '.join(TARGETS)}")
    args.nodes = [int(x) for x in args.jobgate_nodes.split(",") if x.strip()]
    if not args.nodes or min(args.nodes) < 1:
        ap.error("--jobgate-nodes: counts >= 1")
    args.admin_url = f"{args.pg}/{args.admin_db}"
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    install_signal_cleanup()
    if args.setup:
        pgq_setup.setup(args.venv, args.build)
    ctx = {}
    if "procrastinate" in args.targets:
        ctx["venv_py"] = pgq_setup.venv_python(args.venv)
    if "pg-boss" in args.targets or "pg-boss-b8" in args.targets:
        ctx["node"] = pgq_setup.node_binary(args.build, args.node)
    cells = [(t, n) for t in args.targets for n in (args.nodes if t == "jobgate" else [1])]
    meta = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "argv": sys.argv,
            "cpus": os.cpu_count(), "loadavg_start": os.getloadavg(),
            "postgres": pgq_setup.postgres_server_version(args.admin_url),
            **pgq_setup.versions(ctx.get("venv_py"), args.build),
            "jobgate_cmd": args.jobgate_cmd, "producers": args.producers,
            "workers": args.workers, "cap": args.cap, "rate": args.rate,
            "duration_s": args.duration, "warmup_s": args.warmup, "repeat": args.repeat}
    print("# " + "  ".join(f"{k}={v}" for k, v in meta.items() if k not in ("argv",)),
          file=sys.stderr)
    runs: dict[tuple, list[dict]] = {c: [] for c in cells}

    def body():
        for i in range(args.repeat):
            for (t, n) in cells:
                if args.wait_quiet:
                    wait_quiet(args.wait_quiet, 15.0)
                r = run_one(args, t, n, ctx)
                r["run"] = i
                runs[(t, n)].append(r)
                print(f"# run {i + 1}/{args.repeat} {label(r)}: {fmt_rate(r['jobs_per_s'])} jobs/s"
                      f" e2e p99 {fmt_ms(r['e2e_ms']['p99'])} ms"
                      + (f"  ERROR {r['error'][:200]}" if r.get("error") else ""),
                      file=sys.stderr, flush=True)
    try:
        run_guarded(body)
    finally:   # the runs' databases go with the benchmark (PostgreSQL is left as found)
        for db in sorted({DB_NAMES[t] for t, _ in cells if t in DB_NAMES}):
            try:
                pgq_setup.drop_database(args.admin_url, db)
            except Exception as e:  # report, the results stand
                print(f"# could not drop database {db}: {e}", file=sys.stderr)
    rows = [pick_run(rs, bool(args.rate)) for rs in runs.values() if rs]
    print_table(rows)
    return finish(args.json, {"meta": meta, "results": rows,
                              "runs": [r for rs in runs.values() for r in rs]}, rows)


if __name__ == "__main__":
    sys.exit(main())
