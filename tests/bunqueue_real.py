"""The REAL bunqueue server (npm `bunqueue`, run by the `bun` npm package) as a subprocess, for tests,
conformance runs and benchmarks that compare jobgate with the reference.

Install once (CI does this):  cd tests/bunqueue_client && npm install --no-audit --no-fund
That gives  tests/bunqueue_client/node_modules/.bin/bun  (Bun 1.4.5, put there by the `bun`
package's postinstall script, so not with --ignore-scripts) and node_modules/bunqueue (2.9.5).
The versions are pinned in package.json and package-lock.json; `npm install` keeps the lock as it
is. `npm ci` is not usable: the registry this was built against answers 404 for the darwin, win32
and linux-arm 3.0.7 builds of msgpackr-extract (optional dependencies of msgpackr), so the lock
cannot list them and `npm ci` rejects it as out of sync with package.json.

    with BunqueueServer() as bq:                     # in memory
        ... connect to 127.0.0.1:bq.port ...
    BunqueueServer(data_path=tmp / "bq.db")           # SQLite file (bunqueue's --data-path)
    BunqueueServer(token="s3cret")                    # clients must send {cmd: Auth, token}

The server is `bun node_modules/bunqueue/dist/cli/index.js start --host 127.0.0.1 --tcp-port P
--http-port H [--data-path F] [--auth-tokens T]`, run in a fresh temporary directory (bunqueue loads
`bunqueue.config.ts` and Bun loads `.env` from the working directory) with an environment cleared of
the variables bunqueue reads (TCP_PORT, DATA_PATH, AUTH_TOKENS, BUNQUEUE_*, S3_*, ...). TCP and HTTP
ports are distinct free ports. Stopped by PID: SIGTERM, then SIGKILL after `timeout`; `kill()` is
SIGKILL at once (for crash tests).

The reference limits every connection to RATE_LIMIT_MAX_REQUESTS (10,000) commands per
RATE_LIMIT_WINDOW_MS (60 s) and then answers {ok:false, error:'Rate limit exceeded'}; benchmarks
that push more through one connection pass `rate_limit=10**9` (the default keeps the reference's).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time

from conformance.servers import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT_DIR = os.path.join(HERE, "bunqueue_client")
BUN = os.environ.get("JOBGATE_BUN") or os.path.join(CLIENT_DIR, "node_modules", ".bin", "bun")
BUNQUEUE_CLI = os.path.join(CLIENT_DIR, "node_modules", "bunqueue", "dist", "cli", "index.js")

# Environment variables passed through to Bun; everything else is dropped so that nothing in the
# caller's environment (DATA_PATH, AUTH_TOKENS, TCP_PORT, BUNQUEUE_EMBEDDED, S3_*, ...) changes
# how the reference server runs.
_ENV_KEEP = ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TZ")


def bun_missing_reason() -> str | None:
    """None when bun and the bunqueue package are installed, else why not (for pytest.skip)."""
    if not (os.path.isfile(BUN) and os.access(BUN, os.X_OK)):
        return (f"bun not installed at {BUN}: run `npm install` in tests/bunqueue_client "
                "(CI does; see tests/bunqueue_real.py)")
    if not os.path.isfile(BUNQUEUE_CLI):
        return f"bunqueue not installed at {BUNQUEUE_CLI}: run `npm install` in tests/bunqueue_client"
    if os.path.getsize(BUN) < 1_000_000:
        # the `bun` npm package ships a placeholder that its postinstall script replaces
        return (f"{BUN} is the npm placeholder (install scripts did not run): "
                "run `npm install` without --ignore-scripts in tests/bunqueue_client, "
                "or `node install.js` in node_modules/bun")
    return None


def bun_env(extra: dict | None = None) -> dict:
    """A minimal environment for running bun (scripts or the server)."""
    env = {k: os.environ[k] for k in _ENV_KEEP if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["NO_COLOR"] = "1"
    env.update(extra or {})
    return env


def run_script(script: str, port: int, *extra: str, timeout: float = 90.0) -> dict:
    """Run the TypeScript client script `script` (a file in tests/bunqueue_client) with Bun
    against 127.0.0.1:`port` (plus `extra` arguments); returns the JSON object it prints last.
    Fails the calling test (AssertionError, with the script's output) when it exits != 0;
    subprocess.TimeoutExpired after `timeout` s."""
    r = subprocess.run([BUN, os.path.join(CLIENT_DIR, script), "--host", "127.0.0.1",
                        "--port", str(port), *extra], cwd=CLIENT_DIR, env=bun_env(),
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, (f"{script} exited {r.returncode}\nstdout: {r.stdout[-4000:]}\n"
                               f"stderr: {r.stderr[-4000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (conformance.servers.free_port, outside the ephemeral range)."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


# {"cmd": "Ping"} in MessagePack, framed with its 4-byte big-endian length
_PING = b"\x81\xa3cmd\xa4Ping"
_PING_FRAME = struct.pack(">I", len(_PING)) + _PING


def ping(port: int, host: str = "127.0.0.1", timeout: float = 1.0) -> bytes:
    """Send one Ping frame, return the reply frame's MessagePack bytes (raises OSError on failure)."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(_PING_FRAME)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
            d = s.recv(65536)
            if not d:
                raise OSError("connection closed before the Ping reply")
            buf += d
        return buf[4:4 + struct.unpack(">I", buf[:4])[0]]


class BunqueueServer:
    """A running reference bunqueue server on 127.0.0.1.

    Attributes: port (= bunqueue_port, TCP), http_port, data_path, token, proc, pid, workdir.
    """

    def __init__(self, data_path: str | os.PathLike | None = None, token: str | None = None,
                 start: bool = True, timeout: float = 30.0, extra_env: dict | None = None,
                 rate_limit: int | None = None) -> None:
        self.data_path = os.fspath(data_path) if data_path is not None else None
        self.token = token
        self.extra_env = dict(extra_env or {})
        if rate_limit is not None:
            self.extra_env["RATE_LIMIT_MAX_REQUESTS"] = str(rate_limit)
        self.proc: subprocess.Popen | None = None
        self.port = self.http_port = 0
        self.workdir: str | None = None
        self._log = None
        if start:
            self.start(timeout)

    @property
    def bunqueue_port(self) -> int:
        return self.port

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def argv(self) -> list[str]:
        a = [BUN, BUNQUEUE_CLI, "start", "--host", "127.0.0.1", "--tcp-port", str(self.port),
             "--http-port", str(self.http_port)]
        if self.data_path:
            a += ["--data-path", self.data_path]
        if self.token:
            a += ["--auth-tokens", self.token]
        return a

    def start(self, timeout: float = 30.0) -> "BunqueueServer":
        reason = bun_missing_reason()
        if reason:
            raise RuntimeError(reason)
        last = ""
        for _ in range(3):  # a free port can be taken between bind(0) and the server's bind
            self.port, self.http_port = _free_ports(2)
            self.workdir = tempfile.mkdtemp(prefix="bunqueue-ref-")
            self._log = open(os.path.join(self.workdir, "server.log"), "w+b")
            env = bun_env({"SHUTDOWN_TIMEOUT_MS": "5000", **self.extra_env})
            self.proc = subprocess.Popen(self.argv(), cwd=self.workdir, env=env, stdin=subprocess.DEVNULL,
                                         stdout=self._log, stderr=subprocess.STDOUT)
            try:
                self._wait_ready(timeout)
                return self
            except RuntimeError as e:
                last = str(e)
                self.kill()
                if "EADDRINUSE" not in last and "in use" not in last:
                    break
        raise RuntimeError(f"bunqueue did not start: {last}")

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exited with {self.proc.returncode}: {self.log()[-2000:]}")
            try:
                ping(self.port)  # with auth on, the reply is {ok:false, error:'Not authenticated'}
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"no Ping reply on 127.0.0.1:{self.port} after {timeout}s: {self.log()[-2000:]}")

    def log(self) -> str:
        """Everything the server printed so far."""
        if not self._log:
            return ""
        self._log.flush()
        self._log.seek(0)
        data = self._log.read()
        self._log.seek(0, os.SEEK_END)
        return data.decode(errors="replace")

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM by PID, wait up to `timeout`, then SIGKILL. Returns the exit code."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self._cleanup()

    def kill(self) -> int | None:
        """SIGKILL by PID now (no shutdown, no flush) and reap."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        return self._cleanup()

    def _cleanup(self) -> int | None:
        code = self.proc.returncode if self.proc else None
        if self._log:
            self._log.close()
            self._log = None
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        return code

    def __enter__(self) -> "BunqueueServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def run_bun_script(script: str, *args: str, timeout: float = 60.0, env: dict | None = None
                   ) -> subprocess.CompletedProcess:
    """Run tests/bunqueue_client/<script> with bun; returns the CompletedProcess (text mode)."""
    return subprocess.run([BUN, os.path.join(CLIENT_DIR, script), *args], cwd=CLIENT_DIR,
                          env=bun_env(env), capture_output=True, text=True, timeout=timeout)


if __name__ == "__main__":  # manual use: python tests/bunqueue_real.py [--data-path F] [--token T]
    import argparse
    p = argparse.ArgumentParser(description="run the reference bunqueue server until Ctrl-C")
    p.add_argument("--data-path")
    p.add_argument("--token")
    a = p.parse_args()
    srv = BunqueueServer(data_path=a.data_path, token=a.token)
    print(f"bunqueue pid {srv.pid} tcp 127.0.0.1:{srv.port} http 127.0.0.1:{srv.http_port}", flush=True)
    try:
        srv.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()
