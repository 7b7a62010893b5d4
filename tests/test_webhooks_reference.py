"""Webhook requests of jobgate next to the real bunqueue 2.9.5 server's, for the same commands:
both deliver to one receiver on this machine's own non-loopback address (the reference refuses
loopback and private ranges; a test-net or public interface address passes its checks, and
jobgate allow-lists it). Bodies must be equal once job ids and timestamps are named by their
order; both signatures must verify with the secret. Skipped without Bun and the bunqueue
package, or without such an address."""
from __future__ import annotations

import http.server
import ipaddress
import json
import os
import re
import socket
import threading

import pytest

from core.webhooks import url_error
from tests.bunqueue_real import BUN, BunqueueServer
from tests.bunqueue_support import BQ
from tests.inproc import InProcServer
from tests.webhook_support import verify, wait_for


def _own_address() -> str | None:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))          # no packet is sent
            addr = s.getsockname()[0]
    except OSError:
        return None
    if ipaddress.ip_address(addr).is_loopback or url_error(f"http://{addr}/") is not None:
        return None
    return addr


ADDR = _own_address()
# the webhook worker runs under SCHED_IDLE (gateway/webhook_worker.py): while the other
# pytest worker keeps both CPUs busy it gets none, and deliveries miss their deadline:
# `make test` runs it alone, after the parallel part
pytestmark = [pytest.mark.serial,
              pytest.mark.skipif(not os.path.exists(BUN) or ADDR is None,
                                 reason="needs Bun and a non-loopback, non-private address")]


class _Recv:
    def __init__(self) -> None:
        self.requests = []
        rec = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                rec.requests.append((dict(self.headers.items()), body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass
        self.server = http.server.ThreadingHTTPServer((ADDR, 0), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _script(port: int, url: str) -> list:
    """The same commands on a bunqueue server; returns the job ids in order."""
    c = BQ(port)
    try:
        c.ok("AddWebhook", url=url, events=["job.pushed", "job.started", "job.completed",
                                              "job.failed", "job.progress"], secret="sek")
        j1 = c.push("whq", {"a": 1, "s": "x"})
        p1 = c.pull("whq")
        c.ok("Progress", id=j1, progress=30, message="m")
        c.ok("ACK", id=j1, result={"r": [1, 2.5, None, "t"]}, token=p1.get("token"))
        j2 = c.push("whq", {"b": 2}, maxAttempts=1)
        p2 = c.pull("whq")
        c.ok("FAIL", id=j2, error="bad", token=p2.get("token"))
        j3 = c.push("whq", "plain")
        p3 = c.pull("whq")
        c.ok("ACK", id=j3, token=p3.get("token"))
        return [j1, j2, j3]
    finally:
        c.close()


def _normalized(requests: list, ids: list) -> list:
    out = []
    for headers, body in requests:
        assert verify(headers, body, "sek")
        assert headers["Content-Type"] == "application/json"
        d = json.loads(body)
        assert headers["X-Webhook-Event"] == d["event"]
        assert headers["X-Webhook-Timestamp"] == str(d["timestamp"])
        text = body.decode()
        for i, j in enumerate(ids):
            text = text.replace(j, f"JOB{i}")
        out.append(re.sub(r'"timestamp":\d+', '"timestamp":T', text))
    return out


def test_requests_match_the_reference_server(tmp_path):
    recv = _Recv()
    url = f"http://{ADDR}:{recv.server.server_port}/hook"
    try:
        ref = BunqueueServer()
        try:
            ids = _script(ref.port, url)
            wait_for(lambda: len(recv.requests) >= 10, what="the reference's 10 requests")
        finally:
            ref.stop()
        want = _normalized(recv.requests, ids)
        recv.requests.clear()
        s = InProcServer(f"sqlite:///{tmp_path}/jobgate.db", dialects=("bunqueue",),
                         webhook_allow=[f"{ADDR}/32"], webhook_concurrency=1)
        try:
            ids = _script(s.ports["bunqueue"], url)
            wait_for(lambda: len(recv.requests) >= 10, what="jobgate's 10 requests")
        finally:
            s.stop()
        # the reference sends without waiting for earlier requests: compare as sets of bodies
        assert sorted(_normalized(recv.requests, ids)) == sorted(want)
    finally:
        recv.close()
