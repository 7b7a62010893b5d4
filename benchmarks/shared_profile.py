"""Where a shared-mode node's time goes (issue 19, docs/performance.md "Shared mode: one node
against three"): the jobgate cycle of pg_queues_bench.py (8 producers put, 32 workers
reserve-with-timeout 1 and delete, beanstalk, spread round-robin over the nodes) on N nodes of
one fresh database, and over the timed window, per second:

- per node, from its /metrics (an http listener each): claims, claimed jobs, ready
  notifications, spilled jobs, commits and rows per commit, beanstalk commands;
- per node, each thread's CPU (% of one core, from /proc/PID/task, named through
  `py-spy dump --json` when py-spy is there);
- PostgreSQL: the database's transactions (xact_commit) and the jobs / job_events /
  jobgate_meta / queue_pauses tables' scans and row changes (pg_stat_user_tables), which
  name the statements without pg_stat_statements (a claim is one queue_pauses scan);
- the CPU of PostgreSQL, the nodes and the clients (pg_queues_bench's CpuWindow).

`--pyspy DIR` also records each node with `py-spy record --threads --nonblocking -f raw` (add
`--gil` for samples of the thread holding the GIL only) into DIR/n<N>_node<i>.txt. `--root
DIR` runs the nodes from another checkout (e.g. `git archive` of an older commit).

    .venv/bin/python benchmarks/shared_profile.py --nodes 1
    .venv/bin/python benchmarks/shared_profile.py --nodes 3 --pyspy /tmp/spy --gil

Needs the local PostgreSQL of pg_queues_bench.py (--pg, --admin-db); uses database
`bench_shared_profile` (dropped and created per run). Not part of the test suite.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pg_queues_bench as pgq  # noqa: E402
import pgq_jobgate  # noqa: E402
import pgq_setup  # noqa: E402
from bench_servers import Server  # noqa: E402

NODE_CMD = ("{PYTHON} -m gateway.cli serve --listen beanstalk=127.0.0.1:{PORT} "
            "--listen http=127.0.0.1:{HTTP_PORT} --database {PG_URL} --database-mode shared")
METRIC = re.compile(r"^(jobgate_shared_\w+|jobgate_commit_batch_size_(?:count|sum)|"
                    r"jobgate_operations_total)(\{[^}]*\})? (\S+)$")
TABLES = ("jobs", "job_events", "jobgate_meta", "queue_pauses")
TABLE_COLS = ("seq_scan", "idx_scan", "n_tup_ins", "n_tup_upd", "n_tup_del")


def scrape(port: int) -> dict:
    """The counters of a node's /metrics this script reports: {name: value}."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    out = {}
    for line in text.decode().splitlines():
        m = METRIC.match(line)
        if m:
            name = m.group(1).replace("jobgate_shared_", "").replace("jobgate_", "")
            cmd = re.search(r'command="([^"]+)"', m.group(2) or "")
            out[cmd.group(1) if cmd else name] = float(m.group(3))
    return out


def thread_cpu(pid: int) -> dict:
    """{tid: CPU seconds} of each thread of process `pid`."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            pass
    return out


def thread_names(pyspy: str | None, pid: int) -> dict:
    """{tid: Python thread name} from `py-spy dump --json`, or {} without py-spy."""
    if not pyspy:
        return {}
    try:
        r = subprocess.run([pyspy, "dump", "--json", "--nonblocking", "-p", str(pid)],
                           capture_output=True, text=True, timeout=20)
        return {t["os_thread_id"]: t.get("thread_name") or "?" for t in json.loads(r.stdout)}
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired):
        return {}


def pg_counters(libpq: str) -> dict:
    """The database's transactions and the TABLES' pg_stat_user_tables counters."""
    import psycopg
    with psycopg.connect(libpq) as c:
        out = {"xact_commit": c.execute("SELECT xact_commit FROM pg_stat_database WHERE "
                                        "datname = current_database()").fetchone()[0]}
        for row in c.execute(f"SELECT relname, {', '.join(TABLE_COLS)} FROM "
                             "pg_stat_user_tables WHERE relname = ANY(%s)", (list(TABLES),)):
            for col, v in zip(TABLE_COLS, row[1:]):
                out[f"{row[0]}.{col}"] = v or 0
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--duration", type=float, default=10, help="timed s (default 10)")
    ap.add_argument("--warmup", type=float, default=2, help="untimed s first (default 2)")
    ap.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432")
    ap.add_argument("--admin-db", default="test")
    ap.add_argument("--db", default="bench_shared_profile")
    ap.add_argument("--root", default="", help="run the nodes from this checkout")
    ap.add_argument("--pyspy", default="", help="record each node into this directory")
    ap.add_argument("--gil", action="store_true", help="py-spy: GIL holder samples only")
    ap.add_argument("--rate", type=int, default=100, help="py-spy samples/s (default 100)")
    a = ap.parse_args()
    pyspy = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))
    pgq_setup.reset_database(f"{a.pg}/{a.admin_db}", a.db)
    libpq = f"{a.pg}/{a.db}"
    cmd = NODE_CMD
    if a.root:   # one token for shlex: cd there, its code first on the path
        cmd = f"sh -c 'cd {a.root} && PYTHONPATH={a.root} exec {NODE_CMD}'"
    url = libpq.replace("postgresql://", "postgresql+psycopg://", 1)
    cpu = pgq.CpuWindow()
    servers: list[Server] = []
    got: dict = {}

    def window(start_ns: int, end_ns: int, app_pids=None) -> None:
        cpu.start(start_ns, end_ns, app_pids)

        def run() -> None:
            time.sleep(max(0.0, (start_ns - time.monotonic_ns()) / 1e9))
            names = [thread_names(pyspy, s.pid) for s in servers]
            t0 = time.monotonic()
            m0 = [scrape(s.ports["HTTP_PORT"]) for s in servers]
            c0 = [thread_cpu(s.pid) for s in servers]
            p0 = pg_counters(libpq)
            spies = []
            if a.pyspy and pyspy:
                os.makedirs(a.pyspy, exist_ok=True)
                secs = max(1, int((end_ns - time.monotonic_ns()) / 1e9 - 0.5))
                for i, s in enumerate(servers):
                    argv = [pyspy, "record", "-p", str(s.pid), "-d", str(secs), "-r",
                            str(a.rate), "--nonblocking", "--threads", "-f", "raw", "-o",
                            os.path.join(a.pyspy, f"n{a.nodes}_node{i}.txt")]
                    spies.append(subprocess.Popen(argv + (["--gil"] if a.gil else []),
                                                  stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.DEVNULL))
            time.sleep(max(0.0, (end_ns - time.monotonic_ns()) / 1e9 - 0.3))
            m1 = [scrape(s.ports["HTTP_PORT"]) for s in servers]
            c1 = [thread_cpu(s.pid) for s in servers]
            p1 = pg_counters(libpq)
            got["dt"] = time.monotonic() - t0
            for sp in spies:
                sp.wait()
            got["nodes"] = [{k: v - x.get(k, 0) for k, v in y.items()} for x, y in zip(m0, m1)]
            got["threads"] = [{n.get(t, "main" if t == s.pid else f"tid {t}"): v - x.get(t, 0)
                               for t, v in y.items()}
                              for s, n, x, y in zip(servers, names, c0, c1)]
            got["pg"] = {k: v - p0.get(k, 0) for k, v in p1.items()}
        got["thread"] = threading.Thread(target=run, daemon=True)
        got["thread"].start()

    try:
        for i in range(a.nodes):
            s = Server(f"node{i}", cmd, {"PYTHON": sys.executable, "PG_URL": url,
                                         "NODE": str(i)}, 30).start()
            servers.append(s)
            cpu.server_pids.append(s.pid)
            pgq.wait_answering(s, 30)
        spec = dict(producers=8, workers=32, warmup_s=a.warmup, duration_s=a.duration, cap=64,
                    rate=0, io_timeout=10)
        res = pgq_jobgate.run([s.port for s in servers], spec, on_window=window)
        got["thread"].join(30)
    finally:
        for s in servers:
            s.stop()
    if res.get("errors"):
        print("errors:", res["errors"][:3])
        return 1
    dt, jobs = got["dt"], res["jobs_per_s"]
    pct = cpu.pct()
    print(f"{a.nodes} node(s): {jobs:,.0f} jobs/s; CPU % of a core: " + ", ".join(
        f"{k[:-8]} {v:.0f}" for k, v in pct.items()))
    for i, (n, t) in enumerate(zip(got["nodes"], got["threads"])):
        rate = {k: v / dt for k, v in n.items()}
        commits = rate.get("commit_batch_size_count", 0)
        print(f"node{i}: " + ", ".join(f"{k} {v:,.1f}/s" for k, v in sorted(rate.items())
                                       if v and not k.startswith("commit_"))
              + f", commits {commits:,.1f}/s, rows/commit "
              f"{rate.get('commit_batch_size_sum', 0) / max(commits, 1e-9):.1f}")
        print(f"node{i} threads (% of a core): " + ", ".join(
            f"{k} {100 * v / dt:.0f}" for k, v in sorted(t.items(), key=lambda x: -x[1])
            if v > 0.01 * dt))
    pg = {k: v / dt for k, v in got["pg"].items() if v}
    print("postgres /s: " + ", ".join(f"{k} {v:,.1f}" for k, v in pg.items()))
    print("per job: " + ", ".join(f"{k} {v / jobs:.2f}" for k, v in pg.items()
                                  if k in ("xact_commit", "jobs.seq_scan",
                                           "queue_pauses.seq_scan", "jobgate_meta.n_tup_upd")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
