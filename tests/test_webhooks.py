"""Webhooks (issue 16): registrations through the bunqueue commands, delivery to a real HTTP
receiver on 127.0.0.1 (allow-listed), signatures checked with the hmac module, retries, a
hanging receiver, SSRF refusals, and registrations across a restart of a real server process.
Reference: bunqueue 2.9.5 webhookManager.js / webhookValidation.js; docs/bunqueue.md
"Webhooks (issue 16)"."""
from __future__ import annotations

import os
import socket

import pytest

from core.api import AllowList, address_refused
from gateway.config import ConfigError, from_dict
from tests.bunqueue_support import BQ, qname
from tests.inproc import InProcServer
from tests.webhook_support import Receiver, verify, wait_for

ALL = ["job.pushed", "job.started", "job.completed", "job.failed", "job.progress"]


@pytest.fixture
def recv():
    r = Receiver()
    yield r
    r.close()


def _server(tmp_path, **cfg):
    cfg.setdefault("webhook_allow", ["127.0.0.1/32"])
    cfg.setdefault("webhook_retry_delay_ms", 20)
    return InProcServer(f"sqlite:///{tmp_path}/jobgate.db", dialects=("bunqueue", "beanstalk"),
                        **cfg)


@pytest.fixture
def server(tmp_path):
    s = _server(tmp_path, webhook_concurrency=1)   # one request at a time: in event order
    yield s
    s.stop()


def _hook(c, url, events=ALL, queue=None, secret=None) -> str:
    fields = {"url": url, "events": events}
    if queue is not None:
        fields["queue"] = queue
    if secret is not None:
        fields["secret"] = secret
    return c.ok("AddWebhook", **fields)["data"]["webhookId"]


def _listed(c, hid) -> dict:
    return next(h for h in c.ok("ListWebhooks")["data"]["webhooks"] if h["id"] == hid)


def _beanstalk_put(port: int, tube: str, body: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"use %s\r\nput 0 0 60 %d\r\n%s\r\n" % (tube.encode(), len(body), body))
        data = b""
        while data.count(b"\r\n") < 2:
            data += s.recv(4096)
        return data


# -------------------------------------------------------------------- delivery
def test_every_event_type_is_delivered_signed_and_filtered(server, recv):
    c = BQ(server.ports["bunqueue"])
    q, other = qname("wh"), qname("wh-other")
    hid = _hook(c, recv.url(), queue=q, secret="s3cr3t")
    only_done = Receiver()
    try:
        _hook(c, only_done.url("/done"), events=["job.completed"], queue=q)
        j1 = c.push(q, {"a": 1})
        c.push(other, {"b": 2})                       # another queue: filtered out
        pulled = c.pull(q)
        c.ok("Progress", id=j1, progress=40)
        c.ok("ACK", id=j1, result={"r": 2}, token=pulled.get("token"))
        j2 = c.push(q, {"x": "y"}, maxAttempts=1)
        p2 = c.pull(q)
        c.ok("FAIL", id=j2, error="boom", token=p2.get("token"))
        _beanstalk_put(server.ports["beanstalk"], q, b"from beanstalk")
        want = [("job.pushed", j1), ("job.started", j1), ("job.progress", j1),
                ("job.completed", j1), ("job.pushed", j2), ("job.started", j2),
                ("job.failed", j2), ("job.pushed", None)]
        wait_for(lambda: len(recv.requests) >= len(want), what="8 deliveries")
        wait_for(lambda: len(only_done.requests) >= 1, what="the completed-only delivery")
        bodies = recv.bodies()
        assert [(b["event"], b["jobId"]) for b in bodies][:7] == want[:7]
        assert bodies[7]["event"] == "job.pushed" and bodies[7]["queue"] == q
        for (headers, raw), b in zip(recv.requests, bodies):
            assert verify(headers, raw, "s3cr3t"), headers
            assert headers["Content-Type"] == "application/json"
            assert headers["X-Webhook-Event"] == b["event"]
            assert headers["X-Webhook-Timestamp"] == str(b["timestamp"])
            assert list(b)[:4] == ["event", "timestamp", "jobId", "queue"]
            assert b["queue"] == q
        assert not verify(recv.requests[0][0], recv.requests[0][1], "other-secret")
        by = {b["event"]: b for b in bodies[:7]}
        assert bodies[0] == {"event": "job.pushed", "timestamp": bodies[0]["timestamp"],
                             "jobId": j1, "queue": q}
        assert by["job.progress"]["progress"] == 40
        assert by["job.completed"]["data"] == {"r": 2}
        assert by["job.failed"]["error"] == "boom" and by["job.failed"]["data"] == {"x": "y"}
        assert bodies[0]["timestamp"] == server.clock.wall_ms()   # the engine's clock
        assert b'"jobId":"' in recv.requests[0][1] and b", " not in recv.requests[0][1]
        assert [b["event"] for b in only_done.bodies()] == ["job.completed"]
        assert "X-Webhook-Signature" not in only_done.requests[0][0]   # no secret: unsigned
        wait_for(lambda: _listed(c, hid)["successCount"] == 8, what="8 successes")
        h = _listed(c, hid)
        assert h["failureCount"] == 0 and h["lastTriggered"] == float(server.clock.wall_ms())
    finally:
        only_done.close()
        c.close()


def test_disabled_and_removed_webhooks_get_nothing(server, recv):
    c = BQ(server.ports["bunqueue"])
    q = qname("wh")
    hid = _hook(c, recv.url(), events=["job.pushed"], queue=q)
    c.ok("SetWebhookEnabled", id=hid, enabled=False)
    c.push(q)
    c.ok("SetWebhookEnabled", id=hid, enabled=True)
    j = c.push(q)
    wait_for(lambda: recv.requests, what="a delivery")
    c.ok("RemoveWebhook", webhookId=hid)
    c.push(q)
    marker = Receiver()
    try:   # a later webhook's delivery shows the removed one had its chance
        _hook(c, marker.url(), events=["job.pushed"], queue=q)
        c.push(q)
        wait_for(lambda: marker.requests, what="the marker delivery")
    finally:
        marker.close()
    assert [b["jobId"] for b in recv.bodies()] == [j]
    c.close()


def test_a_failing_receiver_is_retried_until_it_answers(tmp_path):
    s = _server(tmp_path, webhook_max_attempts=3)
    flaky, dead = Receiver(fail_first=2), Receiver(fail_first=10**6)
    c = BQ(s.ports["bunqueue"])
    try:
        q = qname("wh")
        ok_id = _hook(c, flaky.url(), events=["job.pushed"], queue=q, secret="k")
        dead_id = _hook(c, dead.url(), events=["job.pushed"], queue=q)
        c.push(q, {"n": 1})
        wait_for(lambda: _listed(c, ok_id)["successCount"] == 1, what="the third attempt")
        wait_for(lambda: _listed(c, dead_id)["failureCount"] == 1, what="the dead receiver")
        assert len(flaky.requests) == 3
        assert len({b for _, b in flaky.requests}) == 1              # the same body each time
        assert all(verify(h, b, "k") for h, b in flaky.requests)
        assert _listed(c, ok_id)["failureCount"] == 0
        assert len(dead.requests) == 3                                # bounded retries
        dead_listed = _listed(c, dead_id)
        assert dead_listed["successCount"] == 0 and dead_listed["lastTriggered"] is None
        assert s.call(lambda: s.runtime.webhooks.stats())["failed"] == 1
    finally:
        c.close()
        flaky.close()
        dead.close()
        s.stop()


def test_a_hanging_receiver_neither_slows_jobs_nor_grows_memory(tmp_path):
    s = _server(tmp_path, webhook_timeout_ms=60_000, webhook_queue_size=64,
                webhook_concurrency=2, webhook_max_attempts=1)
    hang, healthy = Receiver(hang=True), Receiver()
    c = BQ(s.ports["bunqueue"], timeout=10)
    try:
        q = qname("wh")
        _hook(c, hang.url(), queue=q)
        good = _hook(c, healthy.url(), events=["job.completed"], queue=q)
        n = 300
        for i in range(n):                       # PUSH / PULL / ACK while a receiver hangs
            jid = c.push(q, {"i": i})
            p = c.pull(q)
            assert p["job"]["id"] == jid
            c.ok("ACK", id=jid, token=p.get("token"))
            if i % 50 == 0:
                st = s.call(lambda: s.runtime.webhooks.stats())
                assert st["queued"] <= 1000 * 2 + 64 * 2, st   # hand-off + per-webhook bounds
        assert c.count(q) == 0
        # the healthy receiver is not held up by the hanging one: the last event arrives
        # (events it could not take in time were dropped from its own bounded queue)
        wait_for(lambda: jid in [b["jobId"] for b in healthy.bodies()], what="the last event")
        wait_for(lambda: _listed(c, good)["successCount"] == len(healthy.requests),
                 what="the healthy receiver's count")
        assert _listed(c, good)["failureCount"] == 0
        st = s.call(lambda: s.runtime.webhooks.stats())
        assert st["in_flight"] <= 2 and st["queued"] <= 64, st
        assert st["dropped"] > 0, st
        assert hang.hanging <= 2                         # concurrency bound per webhook
    finally:
        hang.release()
        c.close()
        s.stop()
        hang.close()
        healthy.close()


def test_a_killed_worker_process_is_replaced(server, recv):
    c = BQ(server.ports["bunqueue"])
    try:
        q = qname("wh")
        hid = _hook(c, recv.url(), events=["job.pushed"], queue=q)
        c.push(q)
        wait_for(lambda: _listed(c, hid)["successCount"] == 1, what="the first delivery")
        d = server.runtime.webhooks
        pid = server.call(lambda: d.proc.pid)
        os.kill(pid, 9)                                   # the worker this server started
        wait_for(lambda: server.call(lambda: d.proc is None), what="the server noticing")
        j = c.push(q)
        wait_for(lambda: len(recv.requests) == 2, what="a delivery by the new worker")
        assert recv.bodies()[1]["jobId"] == j and server.call(lambda: d.proc.pid) != pid
        wait_for(lambda: _listed(c, hid)["successCount"] == 2, what="both counted")
    finally:
        c.close()


# ------------------------------------------------------------------------ SSRF
REFUSED = [
    ("http://localhost:8080/h", "Webhook URL cannot point to localhost"),
    ("http://app.localhost/h", "Webhook URL cannot point to localhost"),
    ("http://127.0.0.1/h", "Webhook URL cannot point to localhost"),
    ("http://[::1]/h", "Webhook URL cannot point to localhost"),
    ("http://2130706433/h", "Webhook URL cannot point to localhost"),      # 127.0.0.1 as one int
    ("http://127.1.2.3/h", "Webhook URL cannot point to loopback IP"),
    ("http://10.1.2.3/h", "Webhook URL cannot point to private IP"),
    ("http://172.16.0.1/h", "Webhook URL cannot point to private IP"),
    ("http://192.168.1.5/h", "Webhook URL cannot point to private IP"),
    ("http://169.254.169.254/latest/meta-data", "Webhook URL cannot point to link-local IP"),
    ("http://0.0.0.0/h", "Webhook URL cannot point to unspecified IP"),
    ("http://[::ffff:10.0.0.1]/h", "Webhook URL cannot point to private IP"),
    ("http://[::ffff:7f00:2]/h", "Webhook URL cannot point to loopback IP"),
    ("http://[::]/h", "Webhook URL cannot point to unspecified IP"),
    ("http://[fd00::1]/h", "Webhook URL cannot point to private (ULA) IP"),
    ("http://[fe80::1]/h", "Webhook URL cannot point to link-local IP"),
    ("http://metadata.google.internal/h", "Webhook URL cannot point to cloud metadata endpoints"),
    ("http://db.corp.internal/h", "Webhook URL cannot point to cloud metadata endpoints"),
    ("ftp://example.com/h", "Webhook URL must use http or https protocol"),
    ("not a url", "Invalid URL format"),
    ("", "Webhook URL is required"),
    ("https://example.com/" + "a" * 2048, "Webhook URL too long (max 2048 characters)"),
]


def test_refused_urls_get_the_reference_errors(tmp_path):
    s = _server(tmp_path, webhook_allow=[])
    c = BQ(s.ports["bunqueue"])
    try:
        for url, msg in REFUSED:
            assert c.call("AddWebhook", url=url, events=["job.pushed"]) == \
                {"ok": False, "error": msg}, url
        assert c.call("AddWebhook", url="https://example.com/h", events=["job.nope"]) == {
            "ok": False, "error": "Invalid webhook event(s): job.nope. Valid: job.pushed, "
            "job.started, job.completed, job.failed, job.progress"}
        assert c.call("AddWebhook", url="https://example.com/h") == {
            "ok": False, "error": "undefined is not an object (evaluating "
            "'command.events.filter')"}
        # hostile field types: the reference's texts where it has one, else an error reply
        assert c.call("AddWebhook", url=123, events=["job.pushed"]) == \
            {"ok": False, "error": "Invalid URL format"}
        assert c.call("AddWebhook", url="https://example.com/h", events=[5, "job.pushed"]) == {
            "ok": False, "error": "Invalid webhook event(s): 5. Valid: job.pushed, "
            "job.started, job.completed, job.failed, job.progress"}
        assert c.call("AddWebhook", url="https://example.com/h",
                      events="job.pushed")["error"].startswith(
            "command.events.filter is not a function")
        assert c.call("AddWebhook", url="https://example.com/h", events=["job.pushed"],
                      queue=["q"]) == {"ok": False,
                                       "error": "Invalid AddWebhook command: TypeError"}
        assert c.call("AddWebhook", url="http://[::1", events=["job.pushed"]) == \
            {"ok": False, "error": "Invalid URL format"}
        assert c.call("SetWebhookEnabled", id={"x": 1}, enabled=True) == \
            {"ok": False, "error": "Webhook not found"}
        assert c.ok("ListWebhooks")["data"] == {"webhooks": [],
                                                "stats": {"total": 0, "enabled": 0}}
        assert c.call("RemoveWebhook", webhookId="nope") == {"ok": False,
                                                             "error": "Webhook not found"}
    finally:
        c.close()
        s.stop()


@pytest.mark.parametrize("addr,why", [
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("10.0.0.1", "private"),
    ("172.20.0.1", "private"), ("192.168.0.1", "private"), ("100.64.0.1", "private"),
    ("169.254.169.254", "link-local"), ("fe80::1", "link-local"), ("fd00::1", "private"),
    ("::ffff:10.0.0.1", "private"), ("0.0.0.0", "unspecified"), ("224.0.0.1", "multicast"),
])
def test_resolved_addresses_of_every_blocked_class_are_refused(addr, why):
    import ipaddress
    ip = ipaddress.ip_address(addr)
    assert address_refused(ip) == why
    net = "::/0" if ip.version == 6 else "0.0.0.0/0"
    assert address_refused(ip, AllowList([net])) is None
    assert address_refused(ipaddress.ip_address("93.184.216.34")) is None


def _loopback_name() -> str | None:
    """A host name that resolves to a loopback address and that the URL checks do not catch
    by name (the machine's own name usually does, through /etc/hosts)."""
    for name in (socket.gethostname(), "localhost.localdomain"):
        if name == "localhost" or name.endswith(".localhost") or name.endswith(".internal"):
            continue
        try:
            addrs = {i[4][0] for i in socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)}
        except OSError:
            continue
        if addrs and all(a.startswith("127.") or a == "::1" for a in addrs):
            return name
    return None


def test_a_name_that_resolves_to_loopback_is_refused_at_delivery(tmp_path, recv):
    name = _loopback_name()
    if name is None:
        pytest.skip("no host name resolving to loopback here")
    s = _server(tmp_path, webhook_allow=["127.0.0.2/32"])   # not the receiver's address
    c = BQ(s.ports["bunqueue"])
    try:
        q = qname("wh")
        hid = _hook(c, f"http://{name}:{recv.port}/hook", events=["job.pushed"], queue=q)
        c.push(q)
        wait_for(lambda: _listed(c, hid)["failureCount"] == 1, what="the refusal")
        assert recv.requests == []
        assert s.call(lambda: s.runtime.webhooks.stats())["refused"] == 1
    finally:
        c.close()
        s.stop()
    s2 = _server(tmp_path, webhook_allow=[name])   # allowed by name: delivered
    c = BQ(s2.ports["bunqueue"])
    try:
        q = qname("wh")
        _hook(c, f"http://{name}:{recv.port}/hook", events=["job.pushed"], queue=q)
        c.push(q)
        wait_for(lambda: recv.requests, what="the delivery by allowed name")
        assert recv.requests[0][0]["Host"] == f"{name}:{recv.port}"
    finally:
        c.close()
        s2.stop()


def test_config_allow_list_is_validated():
    assert from_dict({"webhooks": {"allow": ["127.0.0.1/32", "hooks.corp"]}}).webhook_allow \
        == ["127.0.0.1/32", "hooks.corp"]
    for bad, key in [({"allow": "127.0.0.1"}, "webhooks.allow"),
                     ({"allow": ["a b"]}, "webhooks.allow"),
                     ({"timeout_ms": 0}, "webhooks.timeout_ms"),
                     ({"nope": 1}, "webhooks.nope")]:
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            from_dict({"webhooks": bad})


def test_a_restricted_principal_sees_and_changes_only_its_queues_webhooks():
    from core.api import AccessDenied, ManualClock, Port, Principal
    port = Port.create(ManualClock(1_000), durable=False)
    mine = port.scoped(Principal("token:mailer", "token", ["emails*"]))
    other = port.add_webhook("w-all", "https://example.com/a", ["job.pushed"])
    theirs = port.add_webhook("w-rep", "https://example.com/r", ["job.pushed"], "reports")
    with pytest.raises(AccessDenied):
        mine.add_webhook("w-x", "https://example.com/x", ["job.pushed"])        # every queue
    with pytest.raises(AccessDenied):
        mine.add_webhook("w-y", "https://example.com/y", ["job.pushed"], "reports")
    own = mine.add_webhook("w-e", "https://example.com/e", ["job.pushed"], "emails-1")
    assert [h.id for h in mine.webhooks()] == [own.id]
    assert mine.webhook(theirs.id) is None and mine.webhook(other.id) is None
    assert not mine.remove_webhook(theirs.id) and not mine.set_webhook_enabled(other.id, False)
    assert mine.set_webhook_enabled(own.id, False) and mine.remove_webhook(own.id)
    assert [h.id for h in port.webhooks()] == ["w-all", "w-rep"]
    assert all(h.enabled for h in port.webhooks())


# --------------------------------------------------------------------- restart
def test_registrations_survive_kill_9_and_deliver_after_restart(tmp_path, recv):
    from tests.support import Server
    cfg = os.path.join(tmp_path, "jobgate.yaml")
    with open(cfg, "w") as f:
        f.write("webhooks:\n  allow: ['127.0.0.1/32']\n  retry_delay_ms: 20\n")
    url = f"sqlite:///{tmp_path}/jobgate.db"
    srv = Server(url, bunqueue=True, extra=["--config", cfg])
    q = qname("wh")
    c = BQ(srv.bunqueue_port)
    try:
        hid = _hook(c, recv.url(), events=["job.pushed"], queue=q, secret="kept")
        off = _hook(c, "https://example.com/hook", events=["job.failed"])
        c.ok("SetWebhookEnabled", id=off, enabled=False)
        before = c.ok("ListWebhooks")["data"]
    finally:
        c.close()
        srv.kill()
    srv = Server(url, bunqueue=True, extra=["--config", cfg])
    c = BQ(srv.bunqueue_port)
    try:
        after = c.ok("ListWebhooks")["data"]
        assert after == before
        assert [h["enabled"] for h in after["webhooks"]] == [True, False]
        assert after["stats"] == {"total": 2, "enabled": 1}
        j = c.push(q)
        wait_for(lambda: recv.requests, what="a delivery after the restart")
        headers, body = recv.requests[0]
        assert verify(headers, body, "kept") and recv.bodies()[0]["jobId"] == j
        c.ok("RemoveWebhook", webhookId=off)
    finally:
        c.close()
        srv.stop()
    srv = Server(url, bunqueue=True, extra=["--config", cfg])
    c = BQ(srv.bunqueue_port)
    try:
        assert [h["id"] for h in c.ok("ListWebhooks")["data"]["webhooks"]] == [hid]
    finally:
        c.close()
        srv.stop()


def test_registrations_are_stored_in_sqlite_and_postgresql(db_url):
    def start():
        return InProcServer(db_url, dialects=("bunqueue",),
                            webhook_allow=["127.0.0.1/32"])
    s = start()
    c = BQ(s.ports["bunqueue"])
    try:
        a = _hook(c, "https://example.com/a", queue="qa", secret="sa")
        b = _hook(c, "https://example.com/b", events=["job.failed"])
        c.ok("SetWebhookEnabled", id=b, enabled=False)
        gone = _hook(c, "https://example.com/gone", events=["job.pushed"])
        c.ok("RemoveWebhook", webhookId=gone)
        before = c.ok("ListWebhooks")["data"]
    finally:
        c.close()
        s.stop()
    s = start()
    c = BQ(s.ports["bunqueue"])
    try:
        assert c.ok("ListWebhooks")["data"] == before
        assert [h["id"] for h in before["webhooks"]] == [a, b]
        assert s.call(lambda: s.port.webhook(a).secret) == "sa"
    finally:
        c.close()
        s.stop()
