"""The webhook URL checks (core/webhooks.py url_error) against the reference's own function:
bunqueue 2.9.5's dist/shared/webhookValidation.js run by Bun on the same URLs. Skipped when
Bun and the bunqueue package are not installed (tests/bunqueue_client)."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from core.api import AllowList
from core.webhooks import url_error
from tests.bunqueue_real import BUN, CLIENT_DIR

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
