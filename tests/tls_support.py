"""Helpers for the TLS and access tests: a throw-away PKI made at test time with the `openssl`
command (a CA, a server certificate for 127.0.0.1, client certificates by subject CN, and a
second, untrusted CA), client ssl contexts, and a real `jobgate serve` subprocess started from a
YAML config. Keys live in the test's tmp_path only; nothing here is committed.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time

from .support import ROOT, free_port, stop_process, wait_port

OPENSSL = shutil.which("openssl")


def _openssl(*args: str, cwd: str) -> None:
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: str, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)


def _signed(d: str, name: str, cn: str, ca: str, ext: str) -> None:
    with open(os.path.join(d, f"{name}.ext"), "w") as f:
        f.write(ext)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext",
             cwd=d)


def make_pki(d, clients=("worker-1",)) -> dict:
    """Certificates in directory `d`: {"ca", "server", "server_key", "rogue_ca", and per
    client CN: (cert, key)} as paths. `rogue-<cn>` client certificates are signed by an
    untrusted CA."""
    d = str(d)
    _ca(d, "ca")
    _ca(d, "rogue")
    _signed(d, "server", "jobgate-test", "ca",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    out = {"ca": os.path.join(d, "ca.pem"), "server": os.path.join(d, "server.pem"),
           "server_key": os.path.join(d, "server.key"), "rogue_ca": os.path.join(d, "rogue.pem")}
    for cn in clients:
        for ca, name in (("ca", cn), ("rogue", f"rogue-{cn}")):
            _signed(d, name, cn, ca, "extendedKeyUsage=clientAuth\n")
            out[name] = (os.path.join(d, f"{name}.pem"), os.path.join(d, f"{name}.key"))
    return out


def client_context(pki: dict, client: str | None = None) -> ssl.SSLContext:
    """A client context trusting the test CA, presenting certificate `client` (a key of
    make_pki's result) when given."""
    ctx = ssl.create_default_context(cafile=pki["ca"])
    if client is not None:
        ctx.load_cert_chain(*pki[client])
    return ctx


def tls_socket(port: int, ctx: ssl.SSLContext, timeout: float = 5.0) -> ssl.SSLSocket:
    """A TLS connection to 127.0.0.1:`port` (handshake done, server name 127.0.0.1 checked)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return ctx.wrap_socket(s, server_hostname="127.0.0.1")


def wrap(client, ctx: ssl.SSLContext):
    """A test client object whose `sock` (a connected socket) is replaced by a TLS socket over
    it (tests/workq_support.WorkqRaw, tests/bunqueue_support.BQ, tests/support.Raw)."""
    timeout = client.sock.gettimeout()
    client.sock = ctx.wrap_socket(client.sock, server_hostname="127.0.0.1")
    client.sock.settimeout(timeout)
    return client


def tls_yaml(pki: dict, client_ca: bool = False) -> str:
    """The flow mapping of a listener's `tls` key for `pki`."""
    s = f"{{cert: {pki['server']}, key: {pki['server_key']}"
    return s + (f", client_ca: {pki['ca']}}}" if client_ca else "}")


class ConfServer:
    """`jobgate serve --config FILE --durability memory` with the YAML text `config`, in which
    `{beanstalk}`, `{workq}`, `{bunqueue}` are replaced by free ports (`ports[dialect]`).
    Waits until every TCP listener accepts (and `wait_unix` paths exist). `stop()`: SIGTERM,
    wait, return (stdout, stderr)."""

    def __init__(self, tmp, config: str, wait_unix=()) -> None:
        self.ports = {d: free_port() for d in ("beanstalk", "workq", "bunqueue")}
        text = config
        for d, p in self.ports.items():
            text = text.replace("{" + d + "}", str(p))
        path = os.path.join(str(tmp), f"jobgate-{time.monotonic_ns()}.yaml")
        with open(path, "w") as f:
            f.write(text)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--config", path,
             "--durability", "memory", "--log-level", "warning"],
            cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            for d, p in self.ports.items():
                if f"port: {p}" in text:
                    wait_port(p, self.proc)
            deadline = time.monotonic() + 15
            for u in wait_unix:
                while not os.path.exists(u):
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"no unix socket {u}")
                    time.sleep(0.01)
        except RuntimeError:
            _, err = self.stop()
            raise RuntimeError(f"server did not start: {err.decode(errors='replace')}")

    def stop(self, timeout: float = 20):
        return stop_process(self.proc, timeout)


def serve_refused(tmp, config: str, timeout: float = 30) -> tuple:
    """Run `jobgate serve` on YAML `config` expecting it to refuse to start: (exit status,
    stderr text). A server that does start is stopped (SIGTERM) after `timeout` s."""
    path = os.path.join(str(tmp), f"refused-{time.monotonic_ns()}.yaml")
    with open(path, "w") as f:
        f.write(config)
    p = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--config", path,
                          "--durability", "memory"], cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=ROOT),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate()
    return p.returncode, err.decode(errors="replace")
