"""A real HTTP receiver for webhook tests: a threaded http.server on 127.0.0.1 (a free port)
that records every POST (headers, body) and answers as the test sets it: `fail_first` requests
answered 500 before 200s, or `hang` (requests wait until `release()`)."""
from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import threading
import time

import pytest

from tests.inproc import InProcServer

ALL = ["job.pushed", "job.started", "job.completed", "job.failed", "job.progress"]


class Receiver:
    """See the module docstring. `requests`: list of (headers dict, body bytes) in arrival
    order (failed and hanging attempts included); `url(path)`: its address."""

    def __init__(self, fail_first: int = 0, hang: bool = False) -> None:
        self.requests: list = []
        self.fail_first = fail_first
        self.hang = hang
        self._gate = threading.Event()
        self._lock = threading.Lock()
        self.hanging = 0
        rec = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                with rec._lock:
                    rec.requests.append(({k: v for k, v in self.headers.items()}, body))
                    fail = len(rec.requests) <= rec.fail_first
                    if rec.hang:
                        rec.hanging += 1
                if rec.hang:
                    rec._gate.wait(30)
                self.send_response(500 if fail else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def bodies(self) -> list:
        """Decoded JSON bodies of every request so far."""
        with self._lock:
            return [json.loads(b) for _, b in self.requests]

    def release(self) -> None:
        self._gate.set()

    def close(self) -> None:
        self._gate.set()
        self.server.shutdown()
        self.server.server_close()


def verify(headers: dict, body: bytes, secret: str) -> bool:
    """The reference's signature, checked independently: X-Webhook-Signature is the hex
    HMAC-SHA256 of the raw body keyed by the secret."""
    want = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers.get("X-Webhook-Signature", ""), want)


def wait_for(pred, timeout: float = 10.0, what: str = "condition"):
    """Poll `pred()` until true (no timing assertion: the deadline only bounds a failure)."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@pytest.fixture
def recv():
    r = Receiver()
    yield r
    r.close()


def wh_server(tmp_path, **cfg):
    """An in-process server (bunqueue and beanstalk, SQLite in `tmp_path`) whose webhooks may
    reach 127.0.0.1 and retry after 20, 40 ms; `cfg`: more Config attributes."""
    cfg.setdefault("webhook_allow", ["127.0.0.1/32"])
    cfg.setdefault("webhook_retry_delay_ms", 20)
    return InProcServer(f"sqlite:///{tmp_path}/jobgate.db", dialects=("bunqueue", "beanstalk"),
                        **cfg)


def add_hook(c, url, events=ALL, queue=None, secret=None) -> str:
    """AddWebhook on bunqueue connection `c` (asserts ok); returns the webhook id."""
    fields = {"url": url, "events": events}
    if queue is not None:
        fields["queue"] = queue
    if secret is not None:
        fields["secret"] = secret
    return c.ok("AddWebhook", **fields)["data"]["webhookId"]


def listed(c, hid) -> dict:
    """Webhook `hid` as ListWebhooks shows it."""
    return next(h for h in c.ok("ListWebhooks")["data"]["webhooks"] if h["id"] == hid)
