"""Start-up time, side by side: exec to listening and exec to the first reply, for
jobgate-beanstalkd (memory and -b), `jobgate serve` (SQLite, all three dialects) and the real
beanstalkd (memory and -b). Standard library only; 127.0.0.1 only.

    .venv/bin/python benchmarks/startup.py [--runs 10] [--json FILE]

Each run starts a fresh process on a free port and measures from just before exec:
- listening: the first successful TCP connect (polled every 0.2 ms);
- first reply: that connection sends `list-tubes` (beanstalk) and gets the whole reply.
The repository's packages are byte-compiled first (compileall), as an installed package is.
Then the process is stopped (SIGTERM, SIGKILL after 10 s, by PID). "empty": a new data
directory per run; "current": the directory of a previous run (schema already migrated, no
jobs). Medians and the slowest run are printed; every run is in the JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def targets(py: str, beanstalkd: str) -> dict:
    return {
        "beanstalkd": [beanstalkd, "-l", "127.0.0.1", "-p", "{PORT}"],
        "beanstalkd -b": [beanstalkd, "-l", "127.0.0.1", "-p", "{PORT}", "-b", "{DIR}"],
        "jobgate-beanstalkd": [py, "-m", "gateway.beanstalkd_cli", "-l", "127.0.0.1",
                               "-p", "{PORT}"],
        "jobgate-beanstalkd -b": [py, "-m", "gateway.beanstalkd_cli", "-l", "127.0.0.1",
                                  "-p", "{PORT}", "-b", "{DIR}"],
        "jobgate serve (sqlite, 3 dialects)": [
            py, "-m", "gateway.cli", "serve", "--database", "sqlite:///{DIR}/jobgate.db",
            "--listen", "beanstalk=127.0.0.1:{PORT}", "--listen", "workq=127.0.0.1:{PORT2}",
            "--listen", "bunqueue=127.0.0.1:{PORT3}", "--log-level", "warning"],
    }


def one(argv: list, workdir: str, timeout: float = 20.0) -> tuple[float, float]:
    """(ms to listening, ms to the first reply) of one start."""
    port = free_port()
    subst = {"{PORT}": str(port), "{PORT2}": str(free_port()), "{PORT3}": str(free_port()),
             "{DIR}": workdir}
    cmd = []
    for a in argv:
        for k, v in subst.items():
            a = a.replace(k, v)
        cmd.append(a)
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = t0 + timeout
        while True:
            s = socket.socket()
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
            s.close()
            if time.perf_counter() > deadline or p.poll() is not None:
                raise RuntimeError(f"{cmd} did not listen")
            time.sleep(0.0002)
        t_listen = time.perf_counter()
        s.settimeout(timeout)
        s.sendall(b"list-tubes\r\n")
        buf = b""
        while not (buf.startswith(b"OK ") and buf.endswith(b"\r\n") and buf.count(b"\r\n") >= 2):
            d = s.recv(4096)
            if not d:
                raise RuntimeError(f"{cmd} closed the connection")
            buf += d
        t_reply = time.perf_counter()
        s.close()
        return (t_listen - t0) * 1000, (t_reply - t0) * 1000
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--beanstalkd", default=shutil.which("beanstalkd") or "/usr/bin/beanstalkd")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    # An installed package has its bytecode compiled (pip does it); a checkout run with
    # PYTHONDONTWRITEBYTECODE=1 (as on these machines) would compile ~50 modules from source
    # at every start (~65 ms) and measure that instead.
    subprocess.run([args.python, "-m", "compileall", "-q", "core", "gateway", "protocols",
                    "migrations"], cwd=ROOT, check=True)
    results = []
    for name, cmd in targets(args.python, args.beanstalkd).items():
        if not os.path.exists(cmd[0]):
            print(f"skip {name}: {cmd[0]} not found")
            continue
        durable = "{DIR}" in " ".join(cmd)
        for db in (("empty", "current") if durable else ("-",)):
            keep = tempfile.mkdtemp(prefix="jg-start-")
            if db == "current":
                one(cmd, keep)    # creates and migrates; later runs find it current
            runs = []
            for _ in range(args.runs):
                d = keep if db == "current" else tempfile.mkdtemp(prefix="jg-start-")
                runs.append(one(cmd, d))
                if d != keep:
                    shutil.rmtree(d, ignore_errors=True)
            shutil.rmtree(keep, ignore_errors=True)
            lis = [r[0] for r in runs]
            rep = [r[1] for r in runs]
            row = {"target": name, "database": db, "listening_ms": lis, "first_reply_ms": rep,
                   "listening_median_ms": statistics.median(lis),
                   "first_reply_median_ms": statistics.median(rep)}
            results.append(row)
            print(f"{name:36} {db:8} listening p50 {row['listening_median_ms']:7.1f} ms "
                  f"(max {max(lis):7.1f})   first reply p50 {row['first_reply_median_ms']:7.1f}"
                  f" ms (max {max(rep):7.1f})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": args.runs, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
