"""TLS on every TCP listener (issue 15, item 3; docs/operations.md "TLS and access"): a real
`jobgate serve` with `listeners.<dialect>.tls`, real clients over TLS (greenstalk on an
ssl-wrapped socket, the workq and bunqueue test clients on ssl sockets, `openssl s_client`,
and the bunqueue TypeScript client's `tls` option when Bun is installed), mTLS refusals, and
the start-up errors of bad TLS settings. Certificates are made at test time (tests/tls_support.py).
"""
from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess

import greenstalk
import pytest

from .bunqueue_real import BUN, CLIENT_DIR, bun_env, bun_missing_reason
from .bunqueue_support import BQ
from .support import Raw
from .tls_support import (OPENSSL, ConfServer, client_context, make_pki, serve_refused,
                          tls_socket, tls_yaml, wrap)
from .workq_support import WorkqRaw, add_cmd, complete_cmd, new_uid

pytestmark = pytest.mark.skipif(OPENSSL is None, reason="the openssl command is not installed")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), clients=("worker-1", "stranger"))


@pytest.fixture(scope="module")
def tls_server(pki, tmp_path_factory):
    """TLS (no client certificates) on all three dialects; no access control."""
    t = tls_yaml(pki)
    s = ConfServer(tmp_path_factory.mktemp("tls"), f"""listeners:
  beanstalk: {{port: {{beanstalk}}, tls: {t}}}
  workq: {{port: {{workq}}, tls: {t}}}
  bunqueue: {{port: {{bunqueue}}, tls: {t}}}
""")
    yield s
    s.stop()


def test_all_three_dialects_over_tls_with_real_clients(tls_server, pki):
    ctx = client_context(pki)
    ports = tls_server.ports
    # beanstalk: greenstalk over an ssl-wrapped socket
    with greenstalk.Client(tls_socket(ports["beanstalk"], ctx), use="tls-b",
                           watch="tls-b") as c:
        jid = c.put("over tls")
        job = c.reserve(timeout=5)
        assert (job.id, job.body) == (jid, "over tls")
        c.delete(job)
    # workq: add, lease, complete, result over TLS
    w = wrap(WorkqRaw(ports["workq"]), ctx)
    uid = new_uid()
    assert w.cmd(add_cmd(uid, "tls-w", b"payload")) == b"+OK\r\n"
    leased = w.cmd(b"lease tls-w 1000\r\n")
    assert leased == b"+OK 1\r\n%s tls-w 1000 7\r\npayload\r\n" % uid.encode()
    assert w.cmd(complete_cmd(uid, b"done")) == b"+OK\r\n"
    w.close()
    # bunqueue: Hello, PUSH, PULL, ACK over TLS
    b = wrap(BQ(ports["bunqueue"]), ctx)
    assert b.call("Hello", protocolVersion=3)["ok"] is True
    pushed = b.call("PUSH", queue="tls-q", data={"n": 1})
    assert pushed["ok"] is True
    pulled = b.call("PULL", queue="tls-q", timeout=0)
    assert pulled["job"]["id"] == pushed["id"] and pulled["job"]["data"] == {"n": 1}
    assert b.call("ACK", id=pushed["id"])["ok"] is True
    b.sock.close()


def test_openssl_s_client_handshake_and_beanstalk_traffic(tls_server, pki):
    r = subprocess.run([OPENSSL, "s_client", "-connect", f"127.0.0.1:{tls_server.ports['beanstalk']}",
                        "-CAfile", pki["ca"], "-verify_return_error", "-brief", "-ign_eof"],
                       input=b"use s-client\r\nput 0 0 10 5\r\nhello\r\nlist-tube-used\r\nquit\r\n",
                       capture_output=True, timeout=30)
    assert b"Verification: OK" in r.stderr, r.stderr
    assert r.stdout.startswith(b"USING s-client\r\nINSERTED "), r.stdout
    assert r.stdout.endswith(b"USING s-client\r\n"), r.stdout


def test_plaintext_client_on_a_tls_listener_gets_no_reply_and_server_keeps_serving(tls_server,
                                                                                   pki):
    raw = Raw(tls_server.ports["beanstalk"])
    raw.send(b"list-tubes\r\n")
    with pytest.raises((EOFError, ConnectionResetError)):
        raw.reply()
    raw.close()
    with greenstalk.Client(tls_socket(tls_server.ports["beanstalk"], client_context(pki))) as c:
        assert "default" in c.tubes()


def test_tls_client_refuses_a_server_it_does_not_trust(tls_server, pki):
    ctx = ssl.create_default_context(cafile=pki["rogue_ca"])
    with pytest.raises(ssl.SSLCertVerificationError):
        tls_socket(tls_server.ports["workq"], ctx)


# ------------------------------------------------------------------------------ mTLS
@pytest.fixture(scope="module")
def mtls_server(pki, tmp_path_factory):
    """Client certificates required on every listener; every certificate may use `*`."""
    t = tls_yaml(pki, client_ca=True)
    s = ConfServer(tmp_path_factory.mktemp("mtls"), f"""listeners:
  beanstalk: {{port: {{beanstalk}}, tls: {t}}}
  workq: {{port: {{workq}}, tls: {t}}}
  bunqueue: {{port: {{bunqueue}}, tls: {t}}}
access:
  principals:
    - {{cert_cn: worker-1, queues: ["*"]}}
""")
    yield s
    s.stop()


def _refused(port: int, ctx) -> bool:
    """True when the server ends the TLS connection without answering a beanstalk/workq line
    (TLS 1.3 reports a refused client certificate on the first read)."""
    try:
        s = tls_socket(port, ctx)
        s.sendall(b"list-tubes\r\n")
        return s.recv(100) == b""
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return True


@pytest.mark.parametrize("dialect", ["beanstalk", "workq", "bunqueue"])
def test_mtls_refuses_clients_without_a_trusted_certificate(mtls_server, pki, dialect):
    port = mtls_server.ports[dialect]
    assert _refused(port, client_context(pki))                    # no certificate
    assert _refused(port, client_context(pki, "rogue-worker-1"))  # same CN, untrusted CA


def test_mtls_client_with_a_certificate_is_served_as_its_principal(mtls_server, pki):
    ctx = client_context(pki, "worker-1")
    with greenstalk.Client(tls_socket(mtls_server.ports["beanstalk"], ctx), use="m") as c:
        assert c.stats_job(c.put("x"))["tube"] == "m"
    b = wrap(BQ(mtls_server.ports["bunqueue"]), ctx)
    # a certificate principal needs no Auth on bunqueue
    assert b.call("PUSH", queue="m", data=1)["ok"] is True
    b.sock.close()
    # a trusted certificate whose CN names no principal is "nobody": connected, no queue
    with greenstalk.Client(tls_socket(mtls_server.ports["beanstalk"],
                                      client_context(pki, "stranger"))) as c:
        with pytest.raises(greenstalk.NotFoundError):
            c.use("m")
        assert c.tubes() == []


# ------------------------------------------------------------------------------ start-up errors
@pytest.mark.parametrize("tls, key", [
    ("{cert: /nonexistent/server.pem, key: KEY}", "listeners.beanstalk.tls.cert"),
    ("{cert: CERT, key: /nonexistent/server.key}", "listeners.beanstalk.tls.key"),
    ("{cert: CERT, key: CERT}", "listeners.beanstalk.tls.key"),
    ("{cert: KEY, key: KEY}", "listeners.beanstalk.tls.cert"),
    ("{cert: CERT, key: KEY, client_ca: /nonexistent/ca.pem}", "listeners.beanstalk.tls.client_ca"),
    ("{cert: CERT}", "listeners.beanstalk.tls.key"),
    ("{cert: CERT, key: KEY, ca: CERT}", "listeners.beanstalk.tls.ca"),
])
def test_bad_tls_settings_are_config_errors_naming_the_key(tmp_path, pki, tls, key):
    tls = tls.replace("CERT", pki["server"]).replace("KEY", pki["server_key"])
    code, err = serve_refused(tmp_path, f"listeners:\n  beanstalk: {{port: 0, tls: {tls}}}\n")
    assert code == 2, err
    assert f"'{key}'" in err and "Traceback" not in err, err


def test_tls_on_a_unix_listener_is_refused(tmp_path, pki):
    code, err = serve_refused(tmp_path, f"listeners:\n  beanstalk: {{unix: {tmp_path}/b.sock, "
                                        f"tls: {tls_yaml(pki)}}}\n")
    assert code == 2 and "'listeners.beanstalk.tls'" in err, err


# ------------------------------------------------------------------------------ bunqueue client
@pytest.mark.skipif(bun_missing_reason() is not None, reason=bun_missing_reason() or "")
def test_bunqueue_typescript_client_tls_option(tls_server, pki):
    """bunqueue 2.9.5's client has `connection.tls: {caFile, rejectUnauthorized}` (no client
    certificate): add a job and read it back over TLS, verifying the server's certificate."""
    r = subprocess.run([BUN, os.path.join(CLIENT_DIR, "tls_check.ts"), "--port",
                        str(tls_server.ports["bunqueue"]), "--ca", pki["ca"]],
                       cwd=CLIENT_DIR, env=bun_env(), capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["data"] == {"over": "tls"} and out["counts"]["waiting"] >= 1


def test_a_stalled_tls_handshake_is_dropped_after_the_half_sent_timeout(pki, tmp_path):
    """A client that connects to a TLS listener and never sends its ClientHello is dropped
    after the dialect's half_sent_timeout_s (the handshake's timeout); a real TLS client is
    served meanwhile and afterwards."""
    t = tls_yaml(pki)
    s = ConfServer(tmp_path, f"""listeners:
  beanstalk: {{port: {{beanstalk}}, tls: {t}}}
limits:
  beanstalk: {{half_sent_timeout_s: 1}}
""")
    try:
        stalled = socket.create_connection(("127.0.0.1", s.ports["beanstalk"]), timeout=30)
        with greenstalk.Client(tls_socket(s.ports["beanstalk"], client_context(pki))) as c:
            assert "default" in c.tubes()
        try:
            assert stalled.recv(1) == b""        # closed by the server, not by this timeout
        except ConnectionResetError:
            pass
        stalled.close()
        with greenstalk.Client(tls_socket(s.ports["beanstalk"], client_context(pki))) as c:
            assert "default" in c.tubes()
    finally:
        s.stop()
