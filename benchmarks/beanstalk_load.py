#!/usr/bin/env python3
"""Side-by-side beanstalk-protocol load generator: jobgate against the real beanstalkd.

Standard library only, raw sockets, 127.0.0.1 only. Never part of the test run.

Workloads (100-byte bodies, `put 1024 0 60 100`, one tube per connection unless --shared-tube):

  put                 pipelined batch = one write of 100 puts, then read the 100 INSERTED replies.
  reserve-delete      the tube is pre-filled first (pipelined puts, not timed). Pipelined batch =
                      one write of 100 `reserve-with-timeout 0`, read the 100 RESERVED replies,
                      then one write of the 100 `delete <id>`, read the 100 DELETED replies
                      (two round trips per batch).
  put-reserve-delete  pipelined batch = the put batch, then the reserve batch, then the delete
                      batch (three round trips, 100 jobs per batch).

  Unpipelined: the same, one command per write, each reply awaited before the next command
  (put = 1 round trip per job, reserve-delete = 2, put-reserve-delete = 3).

Latency: per batch (all round trips of the batch) when pipelined; per command (one round trip)
when unpipelined. jobs/s counts jobs, not commands (reserve-delete is 2 commands per job,
put-reserve-delete 3).

Each connection is its own client process (multiprocessing), so 4 connections are 4 processes;
every process waits at a barrier, then runs for --duration seconds (or --jobs jobs). Each
(workload, mode, connections, target) cell gets a freshly started server and a fresh temp dir,
which are stopped (by PID) and removed afterwards.

The `null` target is a trivial canned-reply server in this file (`--serve-null`); running against
it shows the client's own ceiling. Every row also carries the client's CPU use, so a client-bound
row is visible as cli% near 100.

Run it with the project's virtualenv so jobgate's modules import:
    .venv/bin/python benchmarks/beanstalk_load.py --targets beanstalkd,beanstalkd-b,jobgate
See benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import multiprocessing as mp
import os
import platform
import selectors
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HOST = "127.0.0.1"
BODY_SIZE = 100
BODY = (b"0123456789" * ((BODY_SIZE + 9) // 10))[:BODY_SIZE]
PUT_PRI, PUT_DELAY, PUT_TTR = 1024, 0, 60
PUT_ONE = b"put %d %d %d %d\r\n" % (PUT_PRI, PUT_DELAY, PUT_TTR, BODY_SIZE) + BODY + b"\r\n"
RESERVE_ONE = b"reserve-with-timeout 0\r\n"
CRLF = b"\r\n"
# Lower bounds on reply lengths (bytes), used to wait for a whole batch of replies in few recvs.
# Any reply to put is >= 10 ("BURIED 1\r\n", "DRAINING\r\n"); to delete >= 9 ("DELETED\r\n");
# to reserve-with-timeout >= 11 ("TIMED_OUT\r\n"), and a RESERVED of a BODY_SIZE job is
# >= len("RESERVED 1 100\r\n") + BODY_SIZE + 2.
MIN_PUT_REPLY = 10
# How the client collects a pipelined batch's replies:
#   plain:   recv whatever has arrived. beanstalkd writes each reply with its own write() on a
#            TCP_NODELAY socket, so this costs about one wakeup + recv per reply.
#   waitall: recv(lower bound of what the batch still owes, MSG_WAITALL): far less client CPU,
#            but beanstalkd measured slower with it on this machine (see README).
# (SO_RCVLOWAT was tried and stalls for 40-200 ms with beanstalkd's one-segment-per-reply
# stream, so it is not offered.)
RECV_MODES = ("plain", "waitall")
RBUF_SIZE = 262144
MIN_DELETE_REPLY = 9
MIN_RESERVE_REPLY = 11
MIN_RESERVED_REPLY = len(b"RESERVED 1 %d\r\n" % BODY_SIZE) + BODY_SIZE + 2

SCRIPT = os.path.abspath(__file__)
BENCH_DIR = os.path.dirname(SCRIPT)
REPO_ROOT = os.path.dirname(BENCH_DIR)

WORKLOADS = ("put", "reserve-delete", "put-reserve-delete")
MODES = ("pipelined", "unpipelined")
COMMANDS_PER_JOB = {"put": 1, "reserve-delete": 2, "put-reserve-delete": 3}

# Server command templates. Placeholders, substituted per token after shell-style splitting:
#   {PORT} a free port on 127.0.0.1, {DIR} a fresh empty directory, {PYTHON} --python,
#   {BEANSTALKD} --beanstalkd, {SCRIPT} this file.
DEFAULT_TARGETS = {
    "beanstalkd": "{BEANSTALKD} -l 127.0.0.1 -p {PORT}",
    "beanstalkd-b": "{BEANSTALKD} -l 127.0.0.1 -p {PORT} -b {DIR}",
    "jobgate": "{PYTHON} -m gateway.cli serve --listen beanstalk=127.0.0.1:{PORT}"
               " --database sqlite:///{DIR}/jobgate.db",
    "jobgate-buffered": "{PYTHON} -m gateway.cli serve --listen beanstalk=127.0.0.1:{PORT}"
                        " --database sqlite:///{DIR}/jobgate.db --durability buffered",
    "jobgate-memory": "{PYTHON} -m gateway.beanstalkd_cli -l 127.0.0.1 -p {PORT}",
    "null": "{PYTHON} {SCRIPT} --serve-null {PORT}",
}
# Ratio columns printed when both targets ran: (numerator, denominator).
DEFAULT_RATIOS = (
    ("jobgate-memory", "beanstalkd"),
    ("jobgate-buffered", "beanstalkd"),
    ("jobgate", "beanstalkd"),
    ("jobgate", "beanstalkd-b"),
)


class BenchError(Exception):
    pass


# --------------------------------------------------------------------------------------------
# Server processes
# --------------------------------------------------------------------------------------------

_LIVE_SERVERS: list["Server"] = []


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process, in seconds, from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()
    ticks = int(fields[11]) + int(fields[12])  # fields 14 and 15 of stat(5)
    return ticks / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float | None:
    """CPU-seconds spent busy by the whole machine so far (all CPUs), from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            parts = f.readline().split()
    except OSError:
        return None
    vals = [int(x) for x in parts[1:9]]  # user nice system idle iowait irq softirq steal
    busy = sum(vals) - vals[3] - vals[4] - vals[7]
    return busy / os.sysconf("SC_CLK_TCK")


def proc_status_kb(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, ... (kB) from /proc/PID/status."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Vm") or line.startswith("Rss"):
                    key, _, rest = line.partition(":")
                    parts = rest.split()
                    if parts and parts[0].isdigit():
                        out[key] = int(parts[0])
    except OSError:
        pass
    return out


def child_pids(pid: int) -> list[int]:
    """Direct children of pid (a server that forks workers)."""
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2:].split()
        if int(fields[1]) == pid:
            kids.append(int(entry))
    return kids


class Server:
    """One server process on a free port with a fresh temp dir; stop() kills it by PID and
    removes the dir."""

    def __init__(self, name: str, template: str, subst: dict[str, str], ready_timeout: float,
                 cwd: str = REPO_ROOT):
        self.name = name
        self.template = template
        self.subst = dict(subst)
        self.ready_timeout = ready_timeout
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self.base: str | None = None
        self.port = 0
        self.argv: list[str] = []
        self._log = None

    def start(self) -> "Server":
        self.base = tempfile.mkdtemp(prefix=f"jobgate-bench-{self.name}-")
        data_dir = os.path.join(self.base, "data")
        os.mkdir(data_dir)
        self.port = free_port()
        subst = dict(self.subst, PORT=str(self.port), DIR=data_dir)
        argv = []
        for tok in shlex.split(self.template):
            for key, val in subst.items():
                tok = tok.replace("{" + key + "}", val)
            argv.append(tok)
        self.argv = argv
        self._log = open(os.path.join(self.base, "server.log"), "wb")
        _LIVE_SERVERS.append(self)
        try:
            self.proc = subprocess.Popen(argv, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                         stdout=self._log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        except OSError as e:
            self.stop()
            raise BenchError(f"{self.name}: cannot start {argv!r}: {e}") from e
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"{self.name}: server exited with {self.proc.returncode} "
                                 f"before listening; argv={self.argv!r}\n{self.log_tail()}")
            try:
                with socket.create_connection((HOST, self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise BenchError(f"{self.name}: not listening on {HOST}:{self.port} after "
                         f"{self.ready_timeout}s; argv={self.argv!r}\n{self.log_tail()}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, n: int = 2000) -> str:
        if not self.base:
            return ""
        try:
            if self._log:
                self._log.flush()
            with open(os.path.join(self.base, "server.log"), "rb") as f:
                data = f.read()
        except OSError:
            return ""
        return data[-n:].decode("utf-8", "replace")

    def stop(self) -> None:
        p = self.proc
        if p is not None and p.poll() is None:
            try:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            except ProcessLookupError:
                pass
        if self._log:
            self._log.close()
            self._log = None
        if self.base:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = None
        if self in _LIVE_SERVERS:
            _LIVE_SERVERS.remove(self)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def stop_all_servers() -> None:
    for s in list(_LIVE_SERVERS):
        s.stop()


def add_server_args(ap: argparse.ArgumentParser, default_targets: str) -> None:
    ap.add_argument("--targets", default=default_targets,
                    help="comma-separated targets, run in this order within each cell. Known: "
                         + ", ".join(DEFAULT_TARGETS) + " (default: %(default)s)")
    ap.add_argument("--target", action="append", default=[], metavar="NAME=CMD",
                    help="define or override a target's command (placeholders {PORT} {DIR} "
                         "{PYTHON} {BEANSTALKD} {SCRIPT}); repeatable")
    ap.add_argument("--jobgate-cmd", default=None, metavar="CMD",
                    help="command of the `jobgate` target (durability commit). Default: "
                         + DEFAULT_TARGETS["jobgate"])
    ap.add_argument("--jobgate-buffered-cmd", default=None, metavar="CMD",
                    help="command of the `jobgate-buffered` target")
    ap.add_argument("--jobgate-memory-cmd", default=None, metavar="CMD",
                    help="command of the `jobgate-memory` target. Default: "
                         + DEFAULT_TARGETS["jobgate-memory"])
    ap.add_argument("--beanstalkd", default=shutil.which("beanstalkd") or "/usr/bin/beanstalkd",
                    help="beanstalkd binary (default: %(default)s)")
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter substituted for {PYTHON} (default: this one, %(default)s)")
    ap.add_argument("--ready-timeout", type=float, default=30.0,
                    help="seconds to wait for a server to accept connections")


def resolve_targets(args) -> tuple[list[str], dict[str, str], dict[str, str]]:
    templates = dict(DEFAULT_TARGETS)
    if args.jobgate_cmd:
        templates["jobgate"] = args.jobgate_cmd
    if args.jobgate_buffered_cmd:
        templates["jobgate-buffered"] = args.jobgate_buffered_cmd
    if args.jobgate_memory_cmd:
        templates["jobgate-memory"] = args.jobgate_memory_cmd
    for spec in args.target:
        name, sep, cmd = spec.partition("=")
        if not sep or not name or not cmd:
            raise SystemExit(f"--target wants NAME=CMD, got {spec!r}")
        templates[name.strip()] = cmd
    names = [t.strip() for t in args.targets.split(",") if t.strip()]
    for n in names:
        if n not in templates:
            raise SystemExit(f"unknown target {n!r}; known: {', '.join(templates)}")
    subst = {"PYTHON": args.python, "BEANSTALKD": args.beanstalkd, "SCRIPT": SCRIPT}
    return names, templates, subst


# --------------------------------------------------------------------------------------------
# Client
# --------------------------------------------------------------------------------------------

class Client:
    """A blocking beanstalk client on one socket, tuned for batches: replies are parsed from a
    bytearray with find/count (C speed), never one recv per reply."""

    def __init__(self, port: int, timeout: float, recv_mode: str = "plain"):
        sock = socket.create_connection((HOST, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # A Python-level timeout makes every recv a poll()+recv pair. Use a plain blocking
        # socket bounded by the kernel's SO_RCVTIMEO/SO_SNDTIMEO instead: one syscall per recv.
        sock.settimeout(None)
        tv = struct.pack("ll", int(timeout), int((timeout % 1) * 1e6))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
        self.sock = sock
        self.recv_mode = recv_mode
        self._rbuf = bytearray(RBUF_SIZE)   # recv_into: no allocation per recv
        self._rmv = memoryview(self._rbuf)
        self.buf = bytearray()
        self._batches: dict[int, tuple[bytes, bytes]] = {}

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def _fill(self, need: int = 0) -> None:
        """Receive more bytes. need > 0 is a lower bound on the bytes the server still owes for
        the current batch; in recv mode "waitall" the client waits for them in the kernel
        (MSG_WAITALL), otherwise it takes whatever has arrived (see RECV_MODES)."""
        try:
            if need > 1 and self.recv_mode == "waitall":
                k = self.sock.recv_into(self._rbuf, min(need, RBUF_SIZE), socket.MSG_WAITALL)
            else:
                k = self.sock.recv_into(self._rbuf)
        except BlockingIOError as e:  # SO_RCVTIMEO expired
            raise BenchError(f"timed out waiting for the server; have {bytes(self.buf[-120:])!r}") from e
        if not k:
            raise BenchError("server closed the connection")
        self.buf += self._rmv[:k]

    def line(self) -> bytes:
        while True:
            i = self.buf.find(CRLF)
            if i >= 0:
                out = bytes(self.buf[:i])
                del self.buf[:i + 2]
                return out
            if len(self.buf) > 65536:
                raise BenchError(f"reply line too long: {bytes(self.buf[:80])!r}...")
            self._fill()

    def take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def command(self, cmd: bytes) -> bytes:
        self.sock.sendall(cmd)
        return self.line()

    def setup_tube(self, tube: str) -> None:
        t = tube.encode()
        r = self.command(b"use " + t + CRLF)
        if r != b"USING " + t:
            raise BenchError(f"use {tube}: {r!r}")
        r = self.command(b"watch " + t + CRLF)
        if not r.startswith(b"WATCHING "):
            raise BenchError(f"watch {tube}: {r!r}")
        if tube != "default":
            r = self.command(b"ignore default\r\n")
            if r != b"WATCHING 1":
                raise BenchError(f"ignore default: {r!r}")

    def batch_bytes(self, n: int) -> tuple[bytes, bytes]:
        b = self._batches.get(n)
        if b is None:
            b = self._batches[n] = (PUT_ONE * n, RESERVE_ONE * n)
        return b

    # --- pipelined primitives: send n commands in one write, read exactly n replies ---------

    def expect_lines(self, n: int, token: bytes, min_len: int) -> None:
        """Read exactly n one-line replies, each containing token (e.g. b"INSERTED ").
        min_len: a lower bound on the length of any reply the server may send here."""
        buf = self.buf
        have = buf.count(CRLF)
        while have < n:
            scanned = len(buf)
            last = buf.rfind(CRLF)
            partial = scanned - (last + 2 if last >= 0 else 0)
            self._fill((n - have) * min_len - partial)
            buf = self.buf
            # count only the new bytes (from scanned-1: a CRLF split across two recvs)
            have += buf.count(CRLF, scanned - 1 if scanned else 0)
        if have != n or buf.count(token) != n:
            for ln in bytes(buf).split(CRLF)[:-1]:
                if token not in ln + CRLF:
                    raise BenchError(f"expected {token!r}..., got {ln!r}")
            raise BenchError(f"expected {n} replies, got {have}")
        del buf[:]

    def put_batch(self, n: int) -> None:
        self.sock.sendall(self.batch_bytes(n)[0])
        self.expect_lines(n, b"INSERTED ", MIN_PUT_REPLY)

    def reserve_batch(self, n: int, all_ready: bool) -> tuple[list[bytes], int]:
        """n pipelined `reserve-with-timeout 0`; returns (job ids, TIMED_OUT count).
        all_ready: this connection knows at least n of our jobs are ready in its tube, so every
        reply is a RESERVED with a BODY_SIZE body (a larger lower bound, fewer recvs)."""
        self.sock.sendall(self.batch_bytes(n)[1])
        min_len = MIN_RESERVED_REPLY if all_ready else MIN_RESERVE_REPLY
        ids: list[bytes] = []
        timed_out = 0
        pos = 0
        got = 0
        buf = self.buf
        while got < n:
            j = buf.find(CRLF, pos)
            if j < 0:
                self._fill((n - got) * min_len - (len(buf) - pos))
                buf = self.buf
                continue
            if buf.startswith(b"RESERVED ", pos):
                parts = buf[pos + 9:j].split()
                if len(parts) != 2:
                    raise BenchError(f"bad reply {bytes(buf[pos:j])!r}")
                end = j + 2 + int(parts[1]) + 2
                if len(buf) < end:
                    self._fill(end - len(buf) + (n - got - 1) * min_len)
                    buf = self.buf
                    while len(buf) < end:
                        self._fill(end - len(buf))
                if buf[end - 2:end] != CRLF:
                    raise BenchError("RESERVED body not followed by CRLF")
                ids.append(bytes(parts[0]))
                pos = end
            elif buf.startswith(b"TIMED_OUT\r\n", pos):
                timed_out += 1
                pos = j + 2
            else:
                raise BenchError(f"reserve: unexpected reply {bytes(buf[pos:j])!r}")
            got += 1
        if pos != len(buf):
            raise BenchError(f"reserve: {len(buf) - pos} unexpected trailing bytes")
        del buf[:]
        return ids, timed_out

    def delete_batch(self, ids: list[bytes]) -> None:
        self.sock.sendall(b"delete " + b"\r\ndelete ".join(ids) + CRLF)
        self.expect_lines(len(ids), b"DELETED\r\n", MIN_DELETE_REPLY)

    # --- unpipelined primitives ---------------------------------------------------------------

    def put_one(self) -> None:
        self.sock.sendall(PUT_ONE)
        r = self.line()
        if not r.startswith(b"INSERTED "):
            raise BenchError(f"put: {r!r}")

    def reserve_one(self) -> bytes | None:
        self.sock.sendall(RESERVE_ONE)
        r = self.line()
        if r.startswith(b"RESERVED "):
            parts = r.split()
            if len(parts) != 3:
                raise BenchError(f"bad reply {r!r}")
            body = self.take(int(parts[2]) + 2)
            if body[-2:] != CRLF:
                raise BenchError("RESERVED body not followed by CRLF")
            return parts[1]
        if r == b"TIMED_OUT":
            return None
        raise BenchError(f"reserve: {r!r}")

    def delete_one(self, jid: bytes) -> None:
        self.sock.sendall(b"delete " + jid + CRLF)
        r = self.line()
        if r != b"DELETED":
            raise BenchError(f"delete {jid!r}: {r!r}")

    def prefill(self, n: int, batch: int, time_limit: float) -> int:
        """Pipelined puts of n jobs into the used tube; stops early at time_limit seconds."""
        done = 0
        deadline = time.monotonic() + time_limit
        while done < n and time.monotonic() < deadline:
            k = min(batch, n - done)
            self.put_batch(k)
            done += k
        return done


def run_workload(c: Client, workload: str, pipelined: bool, batch: int, deadline: float,
                 job_limit: int, lat: list[float], available: int = 0,
                 shared_tube: bool = False) -> tuple[int, bool]:
    """Run until deadline (monotonic) or job_limit jobs. Returns (jobs done, drained early).
    Appends latencies in seconds to lat: per batch when pipelined, per command otherwise."""
    now = time.perf_counter
    mono = time.monotonic
    jobs = 0
    if pipelined:
        if workload == "put":
            while jobs < job_limit and mono() < deadline:
                k = min(batch, job_limit - jobs)
                t = now()
                c.put_batch(k)
                lat.append(now() - t)
                jobs += k
        elif workload == "reserve-delete":
            while jobs < job_limit and mono() < deadline:
                k = min(batch, job_limit - jobs)
                if not shared_tube:
                    k = min(k, available - jobs)   # own tube: we know how many are left
                    if k <= 0:
                        return jobs, True
                t = now()
                ids, timed_out = c.reserve_batch(k, not shared_tube)
                if ids:
                    c.delete_batch(ids)
                    jobs += len(ids)
                if timed_out:
                    return jobs, True   # tube empty: a partial last batch is not a sample
                lat.append(now() - t)
        elif workload == "put-reserve-delete":
            while jobs < job_limit and mono() < deadline:
                k = min(batch, job_limit - jobs)
                t = now()
                c.put_batch(k)
                # every reserve finds a job: a connection reserves only after its own puts
                ids, timed_out = c.reserve_batch(k, True)
                if ids:
                    c.delete_batch(ids)
                if timed_out:
                    raise BenchError(f"reserve timed out {timed_out}x right after put")
                lat.append(now() - t)
                jobs += k
        else:
            raise BenchError(f"unknown workload {workload}")
    else:
        if workload == "put":
            while jobs < job_limit and mono() < deadline:
                t = now()
                c.put_one()
                lat.append(now() - t)
                jobs += 1
        elif workload == "reserve-delete":
            while jobs < job_limit and mono() < deadline:
                t = now()
                jid = c.reserve_one()
                t2 = now()
                if jid is None:
                    return jobs, True
                lat.append(t2 - t)
                c.delete_one(jid)
                lat.append(now() - t2)
                jobs += 1
        elif workload == "put-reserve-delete":
            while jobs < job_limit and mono() < deadline:
                t = now()
                c.put_one()
                t2 = now()
                jid = c.reserve_one()
                t3 = now()
                if jid is None:
                    raise BenchError("reserve timed out right after put")
                c.delete_one(jid)
                t4 = now()
                lat.append(t2 - t)
                lat.append(t3 - t2)
                lat.append(t4 - t3)
                jobs += 1
        else:
            raise BenchError(f"unknown workload {workload}")
    return jobs, False


def client_proc(idx: int, spec: dict, barrier, pipe) -> None:
    """One connection in its own process. Sends one result dict through pipe."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    c = None
    try:
        c = Client(spec["port"], spec["io_timeout"], spec["recv_mode"])
        c.setup_tube(spec["tube"])
        prefilled = 0
        if spec["prefill"]:
            prefilled = c.prefill(spec["prefill"], spec["batch"], spec["prefill_timeout"])
        barrier.wait(spec["barrier_timeout"])
        lat: list[float] = []
        cpu0 = os.times()
        t0 = time.monotonic()
        jobs, drained = run_workload(c, spec["workload"], spec["pipelined"], spec["batch"],
                                     t0 + spec["duration"], spec["job_limit"], lat,
                                     prefilled, spec["shared_tube"])
        t1 = time.monotonic()
        cpu1 = os.times()
        cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
        pipe.send({"ok": True, "idx": idx, "jobs": jobs, "t0": t0, "t1": t1, "cpu": cpu,
                   "drained": drained, "prefilled": prefilled, "lat": lat})
    except BaseException as e:  # report, never hang the parent
        try:
            barrier.abort()
        except Exception:
            pass
        try:
            pipe.send({"ok": False, "idx": idx, "error": f"{type(e).__name__}: {e}"})
        except Exception:
            pass
    finally:
        if c is not None:
            c.close()
        pipe.close()


# --------------------------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------------------------

def percentile(sorted_vals: list[float], q: float) -> float | None:
    if not sorted_vals:
        return None
    k = max(0, min(len(sorted_vals) - 1, math.ceil(q / 100.0 * len(sorted_vals)) - 1))
    return sorted_vals[k]


def run_cell(server: Server, workload: str, pipelined: bool, conns: int, args,
             prefill_per_conn: int) -> dict:
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(conns + 1)
    duration = args.duration if args.jobs is None else args.max_seconds
    job_limit = args.jobs if args.jobs is not None else 1 << 62
    procs, pipes = [], []
    result = {"target": server.name, "workload": workload,
              "mode": "pipelined" if pipelined else "unpipelined", "connections": conns,
              "batch": args.batch if pipelined else 1}
    run_id = f"{os.getpid()}-{time.monotonic_ns() % 10**9}"
    try:
        for i in range(conns):
            tube = (f"bench-{run_id}" if args.shared_tube else f"bench-{run_id}-{i}")
            spec = {"port": server.port, "tube": tube, "workload": workload,
                    "pipelined": pipelined, "batch": args.batch, "duration": duration,
                    "job_limit": job_limit, "prefill": prefill_per_conn,
                    "prefill_timeout": args.prefill_timeout, "io_timeout": args.io_timeout,
                    "barrier_timeout": args.prefill_timeout + 30,
                    "shared_tube": args.shared_tube, "recv_mode": args.recv}
            parent_end, child_end = ctx.Pipe(duplex=False)
            p = ctx.Process(target=client_proc, args=(i, spec, barrier, child_end), daemon=True)
            p.start()
            child_end.close()
            procs.append(p)
            pipes.append(parent_end)
        srv_cpu0 = wall0 = busy0 = None
        try:
            barrier.wait(args.prefill_timeout + 30)
            srv_cpu0, wall0 = proc_cpu_seconds(server.pid), time.monotonic()
            busy0 = machine_busy_seconds()
        except threading.BrokenBarrierError:
            pass   # a client failed before the start; its error arrives through its pipe
        outs = []
        hard_deadline = time.monotonic() + duration + args.prefill_timeout + 60
        for pe in pipes:
            left = max(0.1, hard_deadline - time.monotonic())
            if pe.poll(left):
                try:
                    outs.append(pe.recv())
                except EOFError:
                    outs.append({"ok": False, "error": "client process died"})
            else:
                outs.append({"ok": False, "error": "client timed out"})
        srv_cpu1, wall1 = proc_cpu_seconds(server.pid), time.monotonic()
        busy1 = machine_busy_seconds()
    except BaseException:   # interrupted: do not wait for the clients
        for p in procs:
            if p.is_alive():
                p.terminate()
        raise
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()   # our own child, by its PID
                p.join(timeout=5)
        for pe in pipes:
            pe.close()
    errors = [o["error"] for o in outs if not o.get("ok")]
    if errors:
        result["error"] = "; ".join(sorted(set(errors)))[:500]
        result["server_log_tail"] = server.log_tail(800)
        return result
    jobs = sum(o["jobs"] for o in outs)
    t0 = min(o["t0"] for o in outs)
    t1 = max(o["t1"] for o in outs)
    secs = max(t1 - t0, 1e-9)
    lat = sorted(x for o in outs for x in o["lat"])
    result.update({
        "jobs": jobs,
        "seconds": round(secs, 4),
        "jobs_per_s": round(jobs / secs, 1),
        "commands_per_s": round(jobs * COMMANDS_PER_JOB[workload] / secs, 1),
        "latency_unit": "batch" if pipelined else "command",
        "latency_ms": {
            "n": len(lat),
            "p50": _ms(percentile(lat, 50)), "p90": _ms(percentile(lat, 90)),
            "p99": _ms(percentile(lat, 99)), "max": _ms(lat[-1] if lat else None),
        },
        "client_cpu_pct_per_conn": round(100.0 * sum(o["cpu"] for o in outs) / conns / secs, 1),
        "client_cpu_us_per_job": round(1e6 * sum(o["cpu"] for o in outs) / jobs, 2) if jobs else None,
        "drained_early": any(o["drained"] for o in outs),
        "prefilled": sum(o["prefilled"] for o in outs),
    })
    if srv_cpu0 is not None and srv_cpu1 is not None and wall0 is not None:
        wall = max(wall1 - wall0, 1e-9)
        srv_pct = 100.0 * (srv_cpu1 - srv_cpu0) / wall
        result["server_cpu_pct"] = round(srv_pct, 1)
        if busy0 is not None and busy1 is not None:
            # CPU used by everything else on the machine (other processes, interrupts), in % of
            # one core: a noisy neighbour shows up here. Steal time is not counted as busy.
            other = (100.0 * (busy1 - busy0) / wall - srv_pct
                     - 100.0 * sum(o["cpu"] for o in outs) / secs)
            result["other_cpu_pct"] = round(max(other, 0.0), 1)
    return result


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000.0, 3)


def prefill_count(args, target: str, mode: str, conns: int, results: list[dict]) -> int:
    """Jobs to pre-load per connection for reserve-delete."""
    if args.jobs is not None:
        return args.jobs
    est = None
    for r in results:
        if (r["target"] == target and r["workload"] == "put" and r["mode"] == mode
                and r["connections"] == conns and r.get("jobs_per_s")):
            est = max(r.get("runs_jobs_per_s") or [r["jobs_per_s"]])
    # Floor: reserve-delete can outrun put (unpipelined rates swing with the VM's wake-up cost),
    # and a pipelined fill is cheap.
    est = max(est or 0.0, args.prefill_rate / 2)
    total = min(args.max_prefill, math.ceil(est * args.duration * 1.3) + args.batch * conns)
    per = max(args.batch, math.ceil(total / conns))
    return int(math.ceil(per / args.batch) * args.batch)


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


def run_one(t: str, template: str, subst: dict, w: str, mode: str, conns: int, args,
            results: list[dict], failed_start: dict[str, str]) -> dict:
    """One measurement: fresh server, one cell, server stopped and its dir removed."""
    pre = prefill_count(args, t, mode, conns, results) if w == "reserve-delete" else 0
    quiet = wait_quiet(args.wait_quiet, args.quiet_threshold) if args.wait_quiet > 0 else None
    srv = None
    for attempt in (1, 2):   # one retry: a server that fails twice is skipped from then on
        srv = Server(t, template, subst, args.ready_timeout)
        try:
            srv.start()
            break
        except BenchError as e:
            msg = str(e)
            print(f"! start attempt {attempt}: {msg}", file=sys.stderr)
            if attempt == 2:
                failed_start[t] = msg.splitlines()[0][:300]
                return {"target": t, "workload": w, "mode": mode, "connections": conns,
                        "error": failed_start[t], "server_log_tail": msg[-1500:]}
            time.sleep(1.0)
    try:
        r = run_cell(srv, w, mode == "pipelined", conns, args, pre)
    finally:
        srv.stop()
    if quiet is not None:
        r["machine_busy_before_pct"] = quiet
    if r.get("error"):
        print(f"! {t} {w} {mode} c={conns}: {r['error']}", file=sys.stderr)
    else:
        print(f"  {t:<16} {w:<19} {mode:<11} c={conns}  "
              f"{r['jobs_per_s']:>10,.0f} jobs/s  p50 {r['latency_ms']['p50']} ms"
              f"  p99 {r['latency_ms']['p99']} ms  srv {r.get('server_cpu_pct')}%"
              f"  cli {r['client_cpu_pct_per_conn']}%"
              + ("  (drained early)" if r.get("drained_early") else ""), file=sys.stderr)
    return r


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


def beanstalkd_version(path: str) -> str | None:
    try:
        out = subprocess.run([path, "-v"], capture_output=True, timeout=5, text=True)
        return (out.stdout or out.stderr).strip()
    except (OSError, subprocess.TimeoutExpired):
        return None


def wait_quiet(max_wait: float, threshold_pct: float, window: float = 0.5) -> float | None:
    """Wait (at most max_wait seconds) until the whole machine used at most threshold_pct of one
    core over a window. Returns the last window's figure."""
    deadline = time.monotonic() + max_wait
    busy = None
    while True:
        b0, t0 = machine_busy_seconds(), time.monotonic()
        if b0 is None:
            return None
        time.sleep(window)
        b1, t1 = machine_busy_seconds(), time.monotonic()
        busy = 100.0 * (b1 - b0) / (t1 - t0)
        if busy <= threshold_pct or time.monotonic() >= deadline:
            return round(busy, 1)


def install_signal_cleanup() -> None:
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, handler)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See benchmarks/README.md for the workload definitions.")
    add_server_args(ap, "beanstalkd,beanstalkd-b")
    ap.add_argument("--duration", type=float, default=3.0,
                    help="seconds per workload cell (default %(default)s)")
    ap.add_argument("--jobs", type=int, default=None,
                    help="instead of --duration: jobs per connection per cell (bounded by "
                         "--max-seconds)")
    ap.add_argument("--max-seconds", type=float, default=120.0,
                    help="time cap of one cell in --jobs mode")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per cell and target (fresh server each, targets interleaved); the "
                         "median run is reported, every rate is kept in the JSON")
    ap.add_argument("--connections", default="1,4", help="comma-separated (default %(default)s)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help="comma-separated subset of " + ", ".join(WORKLOADS))
    ap.add_argument("--modes", default=",".join(MODES), help="pipelined,unpipelined")
    ap.add_argument("--batch", type=int, default=100, help="commands per write when pipelined")
    ap.add_argument("--shared-tube", action="store_true",
                    help="all connections of a cell use one tube (default: one tube each)")
    ap.add_argument("--prefill-rate", type=float, default=100000.0,
                    help="reserve-delete pre-fill is sized for max(the put rate measured just "
                         "before, half this rate) jobs/s (default %(default)s)")
    ap.add_argument("--max-prefill", type=int, default=400000,
                    help="cap on pre-filled jobs per cell, all connections (default %(default)s)")
    ap.add_argument("--prefill-timeout", type=float, default=90.0,
                    help="seconds allowed for pre-filling")
    ap.add_argument("--recv", choices=RECV_MODES, default="plain",
                    help="how the client waits for a batch's replies (default %(default)s; "
                         "see README)")
    ap.add_argument("--io-timeout", type=float, default=30.0, help="socket timeout")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 0.5 s cells, pre-fill capped at 50k")
    ap.add_argument("--json", default=None, metavar="FILE", help="also write results as JSON")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                    help="before each run, wait up to SECONDS for the machine to be idle "
                         "(other CPU use <= --quiet-threshold); default: don't wait")
    ap.add_argument("--quiet-threshold", type=float, default=15.0, metavar="PCT",
                    help="percent of one core counted as idle by --wait-quiet (default %(default)s)")
    ap.add_argument("--serve-null", type=int, default=None, metavar="PORT",
                    help=argparse.SUPPRESS)

    args = ap.parse_args(argv)

    if args.serve_null is not None:
        return serve_null(args.serve_null)

    if args.quick:
        args.duration = min(args.duration, 0.5)
        args.max_prefill = min(args.max_prefill, 50000)
    if args.jobs is not None and args.jobs <= 0:
        raise SystemExit("--jobs must be positive")
    if args.repeat < 1 or args.batch < 1 or args.duration <= 0 or args.max_prefill < 1:
        raise SystemExit("--repeat, --batch, --duration and --max-prefill must be positive")
    names, templates, subst = resolve_targets(args)
    conn_list = [int(x) for x in args.connections.split(",") if x.strip()]
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for w in workloads:
        if w not in WORKLOADS:
            raise SystemExit(f"unknown workload {w!r}")
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"unknown mode {m!r}")
    if any(c < 1 or c > 64 for c in conn_list):
        raise SystemExit("--connections: 1..64")
    # put first, so its measured rate sizes the reserve-delete pre-fill
    workloads.sort(key=WORKLOADS.index)

    install_signal_cleanup()
    meta = {
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "argv": sys.argv,
        "host": platform.node(), "cpus": os.cpu_count(), "platform": platform.platform(),
        "python": sys.version.split()[0], "beanstalkd": beanstalkd_version(args.beanstalkd),
        "body_bytes": BODY_SIZE, "batch": args.batch, "duration": args.duration,
        "jobs_per_connection": args.jobs, "shared_tube": args.shared_tube,
        "repeat": args.repeat, "recv_mode": args.recv,
        "wait_quiet": args.wait_quiet, "loadavg_start": os.getloadavg(),
        "commands": {n: templates[n] for n in names},
    }
    print(f"# {meta['started']}  cpus={meta['cpus']}  beanstalkd={meta['beanstalkd']}  "
          f"python={meta['python']}", file=sys.stderr)
    for n in names:
        print(f"# {n}: {templates[n]}", file=sys.stderr)

    results: list[dict] = []
    failed_start: dict[str, str] = {}
    try:
        for conns in conn_list:
            for mode in modes:
                for w in workloads:
                    runs: dict[str, list[dict]] = {t: [] for t in names}
                    for rep in range(args.repeat):
                        for t in names:   # targets interleaved within a cell: same conditions
                            if t in failed_start:
                                continue
                            r = run_one(t, templates[t], subst, w, mode, conns, args, results,
                                        failed_start)
                            runs[t].append(r)
                    for t in names:
                        if t in failed_start and not runs[t]:
                            results.append({"target": t, "workload": w, "mode": mode,
                                            "connections": conns, "error": failed_start[t]})
                        elif runs[t]:
                            results.append(pick_median(runs[t]))
    except KeyboardInterrupt:
        print("interrupted; stopping servers", file=sys.stderr)
    finally:
        stop_all_servers()

    meta["loadavg_end"] = os.getloadavg()
    print_tables(results, names, DEFAULT_RATIOS)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=2)
        print(f"\nwrote {args.json}")
    return 1 if any(r.get("error") for r in results) else 0


# --------------------------------------------------------------------------------------------
# The `null` target: a trivial canned-reply beanstalk server, to measure the client's ceiling.
# --------------------------------------------------------------------------------------------

def serve_null(port: int, max_seconds: float = 3600.0) -> int:
    """Answers put/reserve*/delete/use/watch/ignore with canned replies, no state. Assumes
    bodies without CRLF (true for this client). Exits on SIGTERM or after max_seconds."""
    inserted = b"INSERTED 1000000\r\n"
    reserved = b"RESERVED 1000000 %d\r\n" % BODY_SIZE + BODY + CRLF
    deleted = b"DELETED\r\n"
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((HOST, port))
    lsock.listen(128)
    lsock.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(lsock, selectors.EVENT_READ, None)
    rest: dict[socket.socket, bytes] = {}
    deadline = time.monotonic() + max_seconds
    while not stop and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            if key.data is None:
                try:
                    s, _ = lsock.accept()
                except BlockingIOError:
                    continue
                s.setblocking(True)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sel.register(s, selectors.EVENT_READ, 1)
                rest[s] = b""
                continue
            s = key.fileobj
            try:
                data = s.recv(262144)
            except OSError:
                data = b""
            if not data:
                sel.unregister(s)
                rest.pop(s, None)
                s.close()
                continue
            lines = (rest[s] + data).split(CRLF)
            tail = lines.pop()
            out = []
            i, n = 0, len(lines)
            closing = False
            while i < n:
                ln = lines[i]
                if ln.startswith(b"put "):
                    if i + 1 >= n:
                        tail = ln + CRLF + tail
                        break
                    out.append(inserted)
                    i += 2
                    continue
                if ln.startswith(b"reserve"):
                    out.append(reserved)
                elif ln.startswith(b"delete "):
                    out.append(deleted)
                elif ln.startswith(b"use "):
                    out.append(b"USING " + ln[4:] + CRLF)
                elif ln.startswith(b"watch "):
                    out.append(b"WATCHING 2\r\n")
                elif ln.startswith(b"ignore "):
                    out.append(b"WATCHING 1\r\n")
                elif ln == b"quit":
                    closing = True
                    break
                else:
                    out.append(b"UNKNOWN_COMMAND\r\n")
                i += 1
            rest[s] = tail
            try:
                if out:
                    s.sendall(b"".join(out))
            except OSError:
                closing = True
            if closing:
                sel.unregister(s)
                rest.pop(s, None)
                s.close()
    for s in list(rest):
        s.close()
    lsock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
