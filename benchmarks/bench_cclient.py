"""The compiled client (`beanstalk_load.py --client c`): builds loadgen.c (and nullserver.c, the
`null-c` target) with `cc` into benchmarks/.build/ when the binary is missing or older than its
source, and runs one cell with loadgen (one process, all connections), returning the same result
dict as run_cell."""
from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import time

from bench_common import BENCH_DIR, COMMANDS_PER_JOB, BenchError
from bench_report import _ms
from bench_servers import machine_busy_seconds, proc_cpu_seconds

BUILD_DIR = os.path.join(BENCH_DIR, ".build")
CFLAGS = ["-O2", "-pthread"]


def build(name: str = "loadgen") -> str:
    """Path of benchmarks/.build/NAME, (re)built from benchmarks/NAME.c with $CC or cc when
    missing or older than the source."""
    source, binary = os.path.join(BENCH_DIR, name + ".c"), os.path.join(BUILD_DIR, name)
    if os.path.exists(binary) and os.path.getmtime(binary) >= os.path.getmtime(source):
        return binary
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise BenchError("no C compiler found (cc, gcc or clang; or set CC): install one, e.g. "
                         "`apt-get install gcc`, or use --client python")
    os.makedirs(BUILD_DIR, exist_ok=True)
    tmp = f"{binary}.{os.getpid()}.tmp"   # then renamed: a concurrent run never sees half a file
    cmd = [cc, *CFLAGS, "-o", tmp, source]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BenchError(f"{' '.join(cmd)}: {e}") from e
    if r.returncode != 0:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise BenchError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    os.replace(tmp, binary)
    print(f"# built {binary} ({' '.join(cmd[:-3])} {name}.c)", file=sys.stderr)
    return binary


def resolve_client(choice: str | None) -> tuple[str, str | None]:
    """("c", binary) or ("python", None). choice None: c when it builds, else python."""
    if choice == "python":
        return "python", None
    try:
        return "c", build()
    except BenchError as e:
        if choice == "c":
            raise SystemExit(f"--client c: {e}")
        print(f"note: cannot build the C client ({e}); using --client python", file=sys.stderr)
        return "python", None


def _read_until(fd: int, buf: bytearray, done, deadline: float) -> None:
    """Read fd into buf until done(buf), EOF or the monotonic deadline."""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while not done(buf):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if not sel.select(min(left, 1.0)):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            buf += chunk


def run_cell_c(binary: str, server, workload: str, pipelined: bool, conns: int, args,
               prefill_per_conn: int) -> dict:
    """One timed cell driven by loadgen (see run_cell for the result's fields)."""
    duration = args.duration if args.jobs is None else args.max_seconds
    result = {"target": server.name, "workload": workload,
              "mode": "pipelined" if pipelined else "unpipelined", "connections": conns,
              "batch": args.batch if pipelined else 1, "client": "c"}
    argv = [binary, "--port", str(server.port), "--conns", str(conns), "--workload", workload,
            "--batch", str(args.batch), "--duration", str(duration),
            "--prefill", str(prefill_per_conn), "--prefill-timeout", str(args.prefill_timeout),
            "--io-timeout", str(args.io_timeout),
            "--tube", f"bench-{os.getpid()}-{time.monotonic_ns() % 10**9}"]
    argv += ["--unpipelined"] if not pipelined else []
    argv += ["--shared-tube"] if args.shared_tube else []
    argv += ["--jobs", str(args.jobs)] if args.jobs is not None else []
    argv += ["--threads", str(args.c_threads)] if args.c_threads else []
    out = bytearray()
    srv_cpu0 = wall0 = busy0 = None
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=err)
        try:
            fd = proc.stdout.fileno()
            setup_deadline = time.monotonic() + args.prefill_timeout + 30 + args.io_timeout
            _read_until(fd, out, lambda b: b"\n" in b, setup_deadline)
            if out.startswith(b"started\n"):   # the barrier has passed: the timed part runs
                srv_cpu0, wall0 = proc_cpu_seconds(server.pid), time.monotonic()
                busy0 = machine_busy_seconds()
                _read_until(fd, out, lambda b: b.endswith(b"}\n"),
                            time.monotonic() + duration + args.io_timeout + 30)
            srv_cpu1, wall1 = proc_cpu_seconds(server.pid), time.monotonic()
            busy1 = machine_busy_seconds()
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if proc.poll() is None:   # our own child, by its PID
                proc.kill()
                proc.wait()
            proc.stdout.close()
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace").strip()
    lines = bytes(out).decode("utf-8", "replace").splitlines()
    try:
        o = json.loads(lines[-1])
    except (IndexError, ValueError):
        o = {"ok": False, "error": f"loadgen exited with {proc.returncode} without a result"
                                   + (f": {stderr[-300:]}" if stderr else "")}
    if not o.get("ok"):
        result["error"] = f"BenchError: {o.get('error')}"[:500]
        result["server_log_tail"] = server.log_tail(800)
        return result
    jobs, secs, cpu = o["jobs"], max(o["elapsed"], 1e-9), o["cpu"]
    lat = o["lat_ns"]
    result.update({
        "jobs": jobs,
        "seconds": round(secs, 4),
        "jobs_per_s": round(jobs / secs, 1),
        "commands_per_s": round(jobs * COMMANDS_PER_JOB[workload] / secs, 1),
        "latency_unit": "batch" if pipelined else "command",
        "latency_ms": {"n": lat["n"], **{k: _ms(lat[k] / 1e9 if lat["n"] else None)
                                          for k in ("p50", "p90", "p99", "max")}},
        "client_cpu_pct_per_conn": round(100.0 * cpu / conns / secs, 1),
        "client_cpu_pct_per_proc": round(100.0 * cpu / secs, 1),
        "client_cpu_us_per_job": round(1e6 * cpu / jobs, 2) if jobs else None,
        "client_threads": o["threads"],
        "drained_early": o["drained"],
        "prefilled": o["prefilled"],
        "conn_jobs": o["conn_jobs"],
    })
    if srv_cpu0 is not None and srv_cpu1 is not None:
        wall = max(wall1 - wall0, 1e-9)
        srv_pct = 100.0 * (srv_cpu1 - srv_cpu0) / wall
        result["server_cpu_pct"] = round(srv_pct, 1)
        if busy0 is not None and busy1 is not None:
            other = 100.0 * (busy1 - busy0) / wall - srv_pct - 100.0 * cpu / secs
            result["other_cpu_pct"] = round(max(other, 0.0), 1)
    return result
