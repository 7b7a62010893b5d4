"""Benchmark targets: starting and stopping server processes (fresh port and temp dir each),
/proc readings of their CPU and memory, the target options, and the `null` target (a canned-reply
server run as `beanstalk_load.py --serve-null PORT`). Standard library only."""
from __future__ import annotations

import argparse
import os
import selectors
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import re
import tempfile
import time

from bench_common import BODY, BODY_SIZE, CRLF, HOST, RECV_MODES, REPO_ROOT, SCRIPT, BenchError

# Server command templates. Placeholders, substituted per token after shell-style splitting:
#   {PORT} a free port on 127.0.0.1, {DIR} a fresh empty directory, {PYTHON} --python,
#   {BEANSTALKD} --beanstalkd, {SCRIPT} beanstalk_load.py; any other {NAME_PORT} (e.g.
#   {WORKQ_PORT}) is one more free port (Server.ports).
DEFAULT_TARGETS = {
    "beanstalkd": "{BEANSTALKD} -l 127.0.0.1 -p {PORT}",
    "beanstalkd-b": "{BEANSTALKD} -l 127.0.0.1 -p {PORT} -b {DIR}",
    "jobgate": "{PYTHON} -m gateway.cli serve --listen beanstalk=127.0.0.1:{PORT}"
               " --database sqlite:///{DIR}/jobgate.db",
    "jobgate-buffered": "{PYTHON} -m gateway.cli serve --listen beanstalk=127.0.0.1:{PORT}"
                        " --database sqlite:///{DIR}/jobgate.db --durability buffered",
    "jobgate-memory": "{PYTHON} -m gateway.beanstalkd_cli -l 127.0.0.1 -p {PORT}",
    "null": "{PYTHON} {SCRIPT} --serve-null {PORT}",
    "null-c": "{PYTHON} {SCRIPT} --serve-null-c {PORT}",   # execs nullserver.c's binary
}


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


_EXTRA_PORT = re.compile(r"\{([A-Z][A-Z0-9]*_PORT)\}")


class Server:
    """One server process on a free port with a fresh temp dir; stop() kills it by PID and
    removes the dir. `port` is {PORT}; `ports` maps every port placeholder (PORT and any
    {NAME_PORT} in the template) to its port, and start() waits until all of them listen."""

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
        self.ports: dict[str, int] = {}
        self.argv: list[str] = []
        self._log = None

    def start(self) -> "Server":
        self.base = tempfile.mkdtemp(prefix=f"jobgate-bench-{self.name}-")
        data_dir = os.path.join(self.base, "data")
        os.mkdir(data_dir)
        self.port = free_port()
        self.ports = {"PORT": self.port}
        for name in _EXTRA_PORT.findall(self.template):
            while name not in self.ports or list(self.ports.values()).count(self.ports[name]) > 1:
                self.ports[name] = free_port()   # distinct ports
        subst = dict(self.subst, DIR=data_dir, **{k: str(v) for k, v in self.ports.items()})
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
        waiting = sorted(set(self.ports.values()))
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"{self.name}: server exited with {self.proc.returncode} "
                                 f"before listening; argv={self.argv!r}\n{self.log_tail()}")
            try:
                with socket.create_connection((HOST, waiting[0]), timeout=0.5):
                    waiting.pop(0)
                    if not waiting:
                        return
            except OSError:
                time.sleep(0.05)
        raise BenchError(f"{self.name}: not listening on {HOST}:{waiting[0]} after "
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


def run_guarded(body) -> None:
    """body(), then stop every server still running; Ctrl-C or SIGTERM (see
    install_signal_cleanup) ends body early and keeps what it measured."""
    try:
        body()
    except KeyboardInterrupt:
        print("interrupted; stopping servers", file=sys.stderr)
    finally:
        stop_all_servers()


def add_server_args(ap: argparse.ArgumentParser, default_targets: str,
                    known: dict[str, str] | None = None) -> None:
    known = DEFAULT_TARGETS if known is None else known
    ap.add_argument("--targets", default=default_targets,
                    help="comma-separated targets, run in this order within each cell. Known: "
                         + ", ".join(known) + " (default: %(default)s)")
    ap.add_argument("--target", action="append", default=[], metavar="NAME=CMD",
                    help="define or override a target's command (placeholders {PORT} {DIR} "
                         "{PYTHON} {BEANSTALKD} {SCRIPT}); repeatable")
    ap.add_argument("--jobgate-cmd", default=None, metavar="CMD",
                    help="command of the `jobgate` target (durability commit). Default: "
                         + known["jobgate"])
    ap.add_argument("--jobgate-buffered-cmd", default=None, metavar="CMD",
                    help="command of the `jobgate-buffered` target")
    ap.add_argument("--jobgate-memory-cmd", default=None, metavar="CMD",
                    help="command of the `jobgate-memory` target. Default: "
                         + known["jobgate-memory"])
    ap.add_argument("--beanstalkd", default=shutil.which("beanstalkd") or "/usr/bin/beanstalkd",
                    help="beanstalkd binary (default: %(default)s)")
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter substituted for {PYTHON} (default: this one, %(default)s)")
    ap.add_argument("--ready-timeout", type=float, default=30.0,
                    help="seconds to wait for a server to accept connections")


def add_run_args(ap: argparse.ArgumentParser, repeat: int,
                 batch_help: str = "commands per write when pipelined") -> None:
    """The run options every load benchmark shares: --max-seconds, --repeat, --connections,
    --batch, --prefill-timeout, --recv, --io-timeout, --json, --wait-quiet, --quiet-threshold."""
    ap.add_argument("--max-seconds", type=float, default=120.0,
                    help="time cap of one cell in --jobs mode")
    ap.add_argument("--repeat", type=int, default=repeat,
                    help="runs per cell and target (fresh server each, targets interleaved); the "
                         "median run is reported, every rate is kept in the JSON "
                         "(default %(default)s)")
    ap.add_argument("--connections", default="1,4",
                    help="comma-separated (default %(default)s)")
    ap.add_argument("--batch", type=int, default=100, help=batch_help)
    ap.add_argument("--prefill-timeout", type=float, default=90.0,
                    help="seconds allowed for pre-filling")
    ap.add_argument("--recv", choices=RECV_MODES, default="plain",
                    help="how the client waits for a batch's replies (default %(default)s; "
                         "see README)")
    ap.add_argument("--io-timeout", type=float, default=30.0, help="socket timeout")
    ap.add_argument("--json", default=None, metavar="FILE", help="also write results as JSON")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                    help="before each run, wait up to SECONDS for the machine to be idle "
                         "(other CPU use <= --quiet-threshold); default: don't wait")
    ap.add_argument("--quiet-threshold", type=float, default=15.0, metavar="PCT",
                    help="percent of one core counted as idle by --wait-quiet (default %(default)s)")


def connection_counts(text: str, most: int = 64) -> list[int]:
    """--connections "1,4" -> [1, 4] (each 1..most)."""
    counts = [int(x) for x in text.split(",") if x.strip()]
    if not counts or any(c < 1 or c > most for c in counts):
        raise SystemExit(f"--connections: comma-separated counts, each 1..{most}")
    return counts


def comma_list(text: str, known, what: str = "workload") -> list[str]:
    """A comma-separated choice ("put,reserve-delete"), each item one of `known`."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    for x in items:
        if x not in known:
            raise SystemExit(f"unknown {what} {x!r}; known: {', '.join(known)}")
    return items


def resolve_targets(args, defaults: dict[str, str] | None = None
                    ) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """(selected names, name -> command template, substitutions) from the target options;
    `defaults` replaces DEFAULT_TARGETS (another benchmark's own targets)."""
    templates = dict(DEFAULT_TARGETS if defaults is None else defaults)
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
