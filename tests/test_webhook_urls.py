"""SSRF rules for webhooks: the URL checks at registration (core/webhooks.py url_error, with the
replies to AddWebhook), the address checks after DNS at delivery, the allow-list. The URL
checks are also run against the reference's own function:
bunqueue 2.9.5's dist/shared/webhookValidation.js run by Bun on the same URLs. Skipped when
Bun and the bunqueue package are not installed (tests/bunqueue_client)."""
from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest

from core.api import AllowList, address_refused
from core.webhooks import url_error
from gateway.config import ConfigError, from_dict
from tests.bunqueue_real import BUN, CLIENT_DIR
from tests.bunqueue_support import BQ, qname
from tests.webhook_support import add_hook, listed, recv, wait_for, wh_server  # noqa: F401

VALIDATION = os.path.join(CLIENT_DIR, "node_modules", "bunqueue", "dist", "shared",
                          "webhookValidation.js")

URLS = [
    "https://example.com/hook", "http://example.com:8080/a?b=c", "HTTPS://Example.COM/X",
    "http://93.184.216.34/x", "http://8.8.8.8", "https://[2001:db8::1]/x",
    "http://localhost/", "http://LOCALHOST:1/", "http://a.localhost/", "http://localhost./",
    "http://127.0.0.1/", "http://127.0.0.2/", "http://127.1/", "http://2130706433/",
    "http://0x7f000001/", "http://0x7f.1/", "http://0177.0.0.1/", "http://127.000.000.001/",
    "http://[::1]/", "http://[0:0:0:0:0:0:0:1]/", "http://[::]/", "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:10.0.0.1]/", "http://[::ffff:7f00:1]/", "http://[::127.0.0.1]/",
    "http://[fd00::1]/", "http://[fc00::]/", "http://[fe80::1]/", "http://[febf::1]/",
    "http://[fec0::1]/", "http://10.0.0.1/", "http://10.255.255.255:99/", "http://172.15.0.1/",
    "http://172.16.0.1/", "http://172.31.255.255/", "http://172.32.0.1/", "http://192.168.0.1/",
    "http://192.169.0.1/", "http://169.254.169.254/latest", "http://169.254.1.1/",
    "http://0.0.0.0/", "http://0/", "http://metadata.google.internal/",
    "http://METADATA.GOOGLE.INTERNAL/", "http://x.internal/", "http://internal/",
    "ftp://example.com/", "file:///etc/passwd", "javascript:alert(1)", "ws://example.com/",
    "not a url", "", "http://", "https:///x", "http://[::1/", "http://ex ample.com/",
    "https://example.com/" + "a" * 2030, "https://example.com/" + "a" * 2040,
    "http://user:pw@example.com/", "http://user@127.0.0.1/",
    # what the WHATWG parser makes of odd hosts (the reference's checks see its result)
    "http://exämple.com/", "http://１２７.0.0.1/", "http://127.0.0.1.nip.io/",
    "http://127.0.0.1:80@evil.com/", "http://evil.com#@127.0.0.1/", "http://[::ffff:a00:1]/",
    "http://10.1/", "http://0x0a.0.0.1/", "http://012.0.0.1/", "http://4294967295/",
    "http://4294967296/", "http://1.2.3.4.5/", "http://256.0.0.1/", "http://09.0.0.1/",
    "http://[::ffff:0:0]/", "http://[::1]:80/", "http://[0::]/", "http://[fc00::1%25eth0]/",
    "http://ex%41mple.com/", "http://EXAMPLE.internal./", "http://foo.internal:8080/",
    "http://a\\b/", "  http://127.0.0.1/  ", "http:\\\\127.0.0.1/", "HTTP://127.0.0.1/",
    "http://127.0.0.1./", "http://[::ffff:127.0.0.1]:8080/", "http://0.0.0.0:80/",
    "http://[2001:db8::]/", "http://[::a00:1]/", "http://[::5]/", "http://xn--exmple-cua.com/",
    "http://-a.com/", "http://a_b.com/", "https://example.com:0/", "https://example.com:65536/",
    "https://example.com:abc/", "http://1.2.3.09/", "http://foo.09/", "http://foo.0x/",
    "http://0x/", "http://%31%32%37.0.0.1/", "http://127.0.0.1%2f/", "http://[::1]x/",
    "http://a..b/", "http:/127.0.0.1/", "https:example.com/x",
]


def _reference(urls: list) -> list:
    script = ("import { validateWebhookUrl } from " + json.dumps(VALIDATION) + ";\n"
              "const urls = JSON.parse(await Bun.stdin.text());\n"
              "console.log(JSON.stringify(urls.map((u) => validateWebhookUrl(u))));\n")
    out = subprocess.run([BUN, "-e", script], input=json.dumps(urls).encode(),
                         capture_output=True, timeout=60, check=True)
    return json.loads(out.stdout)


@pytest.mark.skipif(not (os.path.exists(BUN) and os.path.exists(VALIDATION)),
                    reason="Bun and the bunqueue package are not installed")
def test_url_checks_answer_as_the_reference():
    want = _reference(URLS)
    got = [url_error(u) for u in URLS]
    diff = [(u, g, w) for u, g, w in zip(URLS, got, want) if g != w]
    assert diff == []


def test_the_allow_list_exempts_hosts_and_networks():
    allow = AllowList(["127.0.0.1/32", "10.0.0.0/8", "hooks.localhost", "fd00::/8"])
    for u in ("http://127.0.0.1:9/h", "http://10.2.3.4/h", "http://hooks.localhost/h",
              "http://[fd00::5]/h"):
        assert url_error(u, allow) is None, u
    assert url_error("http://127.0.0.2/h", allow) == "Webhook URL cannot point to loopback IP"
    assert url_error("http://localhost/h", allow) == "Webhook URL cannot point to localhost"
    with pytest.raises(ValueError):
        AllowList(["not a/network"])


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
    s = wh_server(tmp_path, webhook_allow=[])
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


# the webhook worker runs under SCHED_IDLE (gateway/webhook_worker.py): while the other
# pytest worker keeps both CPUs busy it gets none, and deliveries miss their deadline:
# `make test` runs it alone, after the parallel part
@pytest.mark.serial
def test_a_name_that_resolves_to_loopback_is_refused_at_delivery(tmp_path, recv):
    name = _loopback_name()
    if name is None:
        pytest.skip("no host name resolving to loopback here")
    s = wh_server(tmp_path, webhook_allow=["127.0.0.2/32"])   # not the receiver's address
    c = BQ(s.ports["bunqueue"])
    try:
        q = qname("wh")
        hid = add_hook(c, f"http://{name}:{recv.port}/hook", events=["job.pushed"], queue=q)
        c.push(q)
        wait_for(lambda: listed(c, hid)["failureCount"] == 1, what="the refusal")
        assert recv.requests == []
        assert s.call(lambda: s.runtime.webhooks.stats())["refused"] == 1
    finally:
        c.close()
        s.stop()
    s2 = wh_server(tmp_path, webhook_allow=[name])   # allowed by name: delivered
    c = BQ(s2.ports["bunqueue"])
    try:
        q = qname("wh")
        add_hook(c, f"http://{name}:{recv.port}/hook", events=["job.pushed"], queue=q)
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
