"""Webhook registrations: who wants job events POSTed, and the SSRF rules for their URLs
(issue 16; bunqueue-tcp-protocol.txt "Webhook Commands"; reference: bunqueue 2.9.5
dist/application/webhookManager.js, dist/domain/types/webhook.js,
dist/shared/webhookValidation.js). Delivery is I/O and lives in gateway/webhooks.py; this
module holds the canonical registry, which the engine port (core/api.py) exposes.

A registration: `id` (str, a UUIDv7 the caller makes), `url`, `events` (list of WEBHOOK_EVENTS
names), `queue` (str, or None: every queue), `secret` (str or None: unsigned), `enabled`,
`created_ms` (wall ms), and delivery counters kept in memory only: `success`, `failure`,
`last_ms` (wall ms of the last successful delivery, None before one). Registrations are stored
in table `webhooks` (core/schema.py) through the journal, in the transaction of the next group
commit; the counters start at 0 after a restart (the reference keeps nothing at all).

No sockets here: `url_error` and `address_refused` are string and `ipaddress` checks only.
"""
from __future__ import annotations

import ipaddress
from typing import NamedTuple
from urllib.parse import unquote, urlsplit

import msgpack

#: The event names a webhook may subscribe to (reference WEBHOOK_EVENTS, in its order).
WEBHOOK_EVENTS = ("job.pushed", "job.started", "job.completed", "job.failed", "job.progress")

#: Canonical feed event kinds (core/events.py) -> the webhook event they trigger (reference
#: eventsManager.mapEventToWebhook: pushed, pulled, completed, failed; job.progress from
#: updateProgress). Other kinds trigger none.
EVENT_KINDS = {"put": "job.pushed", "add": "job.pushed", "schedule": "job.pushed",
               "run": "job.pushed", "push": "job.pushed", "reserve": "job.started",
               "complete": "job.completed", "fail": "job.failed", "progress": "job.progress"}

#: Longest URL accepted (characters), as the reference.
MAX_URL = 2048
#: Characters the WHATWG URL parser refuses in a host name (forbidden host code points).
_FORBIDDEN_HOST = frozenset(" #%/:<>?@[\\]^|")

_pack = msgpack.Packer(use_bin_type=True).pack


class AllowList:
    """Receivers exempt from the SSRF rules (config `webhooks.allow`): `networks` (ipaddress
    networks: an address in one is allowed at registration and after DNS resolution) and
    `hosts` (lower-case host names allowed whatever they resolve to). Empty: nothing exempt.
    Raises ValueError for an entry that is neither a network nor a host name."""

    def __init__(self, entries=()) -> None:
        self.networks = []
        self.hosts = set()
        for e in entries:
            try:
                self.networks.append(ipaddress.ip_network(e, strict=False))
            except ValueError:
                h = str(e).strip().lower().strip("[]")
                if not h or "/" in h or " " in h:
                    raise ValueError(f"not a network or host name: {e!r}") from None
                self.hosts.add(h)

    def allows_ip(self, ip) -> bool:
        """True when address `ip` (ipaddress object) is in an allowed network."""
        return any(ip.version == n.version and ip in n for n in self.networks)

    def allows_host(self, host: str) -> bool:
        """True when host name `host` is allowed by name."""
        return host.lower() in self.hosts


def _ipv4_whatwg(host: str):
    """`host` as an IPv4Address when the WHATWG URL parser reads it as one (1-4 parts, each
    decimal, 0x-hex or 0-octal; the last part fills the remaining bytes: `2130706433`,
    `0x7f.1`), else None. The reference's checks run on that normalised form."""
    parts = host.split(".")
    if parts and parts[-1] == "":
        parts.pop()
    if not 1 <= len(parts) <= 4:
        return None
    nums = []
    for p in parts:
        try:
            if p[:2] in ("0x", "0X"):
                n = int(p[2:] or "0", 16)
            elif len(p) > 1 and p[0] == "0":
                n = int(p[1:], 8)
            else:
                n = int(p, 10) if p.isdigit() else None
        except ValueError:
            return None
        if n is None:
            return None
        nums.append(n)
    last = nums.pop()
    if any(n > 255 for n in nums) or last >= 256 ** (4 - len(nums)):
        return None
    value = last
    for i, n in enumerate(nums):
        value += n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def _ends_in_number(host: str) -> bool:
    """WHATWG's "ends in a number": the last label is decimal digits or 0x-hex (the host is
    then an IPv4 address, or the URL is invalid)."""
    labels = host.split(".")
    if len(labels) > 1 and labels[-1] == "":
        labels.pop()
    last = labels[-1]
    if last.isascii() and last.isdigit():
        return True
    return last[:2].lower() == "0x" and all(c in "0123456789abcdefABCDEF" for c in last[2:])


def parse_host(host: str):
    """An IP literal host as an ipaddress object (IPv6 without brackets; IPv4 in any WHATWG
    form), else None."""
    h = host.strip("[]")
    if ":" in h:
        try:
            return ipaddress.IPv6Address(h.split("%")[0])
        except ValueError:
            return None
    return _ipv4_whatwg(h)


def _ipv4_error(ip: ipaddress.IPv4Address) -> str | None:
    """The reference's checkPrivateIpv4, on a parsed address."""
    a, b = ip.packed[0], ip.packed[1]
    if a == 10 or (a == 172 and 16 <= b <= 31) or (a == 192 and b == 168):
        return "Webhook URL cannot point to private IP"
    if a == 169 and b == 254:
        return "Webhook URL cannot point to link-local IP"
    if a == 0:
        return "Webhook URL cannot point to unspecified IP"
    if a == 127:
        return "Webhook URL cannot point to loopback IP"
    return None


def split_url(url: str):
    """urllib's SplitResult of `url` read as the WHATWG parser reads an http(s) URL: outer
    blanks dropped, a backslash taken for a slash, any run of slashes after the scheme
    skipped (`https:///x` is host x). Delivery builds its request from the same split, so the
    host it checks is the host it contacts. Raises ValueError for what urllib cannot split."""
    text = url.strip()
    low = text[:7].lower()
    if low.startswith(("http:", "https:")):
        text = text.replace("\\", "/")
    parts = urlsplit(text)
    if parts.scheme.lower() in ("http", "https") and not parts.netloc:
        rest = text.split(":", 1)[1].lstrip("/")
        parts = urlsplit(f"{parts.scheme}://{rest}")
    return parts


def url_error(url, allow: AllowList | None = None) -> str | None:
    """The reference's validateWebhookUrl (dist/shared/webhookValidation.js): its error text,
    or None when `url` may be registered. Checks, in its order: required, length (2048),
    parse, http/https, localhost names, IPv4-mapped IPv6, IPv6 unspecified / ULA / link-local,
    private / link-local / unspecified / loopback IPv4, cloud metadata names (`*.internal`).
    A host allowed by `allow` (by name, or an IP literal in an allowed network) skips the
    host checks. DNS is not consulted here: delivery checks the resolved addresses
    (address_refused)."""
    if url is None or url == "":
        return "Webhook URL is required"
    if url.__class__ is not str:
        return "Invalid URL format"
    if len(url) > MAX_URL:
        return "Webhook URL too long (max 2048 characters)"
    try:
        parts = split_url(url)
        host = parts.hostname or ""
        parts.port   # noqa: B018 (raises ValueError for a bad port)
    except ValueError:
        return "Invalid URL format"
    if ":" in host:
        after = parts.netloc.rpartition("]")[2]
        if "%" in host or (after and not after.startswith(":")):   # zone id, [::1]x
            return "Invalid URL format"
    else:
        host = unquote(host)                # WHATWG percent-decodes the host
        if any(c in _FORBIDDEN_HOST or ord(c) < 33 for c in host):
            return "Invalid URL format"
        if _ends_in_number(host) and _ipv4_whatwg(host) is None:
            return "Invalid URL format"     # a number that is not an IPv4 address
    scheme = parts.scheme.lower()
    if not scheme or (scheme in ("http", "https") and not host):
        return "Invalid URL format"
    if scheme not in ("http", "https"):
        return "Webhook URL must use http or https protocol"
    host = host.lower()
    ip = parse_host(host)
    if allow is not None and (allow.allows_host(host)
                              or (ip is not None and allow.allows_ip(ip))):
        return None
    if host == "localhost" or host.endswith(".localhost") or \
            (ip is not None and str(ip) in ("127.0.0.1", "::1")):
        return "Webhook URL cannot point to localhost"
    if ip is not None and ip.version == 6:
        v4 = ip.ipv4_mapped
        if v4 is None and int(ip) >> 32 == 0 and int(ip) >> 16:
            # deprecated IPv4-compatible ::a.b.c.d (the reference unwraps the two-hextet
            # form only: ::5 stays an IPv6 address)
            v4 = ipaddress.IPv4Address(int(ip))
        if v4 is not None:
            e = _ipv4_error(v4)
            if e:
                return e
        if int(ip) == 0:
            return "Webhook URL cannot point to unspecified IP"
        first = int(ip) >> 112
        if first >> 9 == 0x7E:          # fc00::/7
            return "Webhook URL cannot point to private (ULA) IP"
        if first >> 6 == 0x3FA:         # fe80::/10
            return "Webhook URL cannot point to link-local IP"
    elif ip is not None:
        e = _ipv4_error(ip)
        if e:
            return e
    if host == "metadata.google.internal" or host.endswith(".internal"):
        return "Webhook URL cannot point to cloud metadata endpoints"
    return None


def address_refused(ip, allow: AllowList | None = None) -> str | None:
    """Why a receiver's resolved address `ip` (ipaddress object) must not be contacted, or
    None when it may: anything but a global unicast address is refused (loopback, private,
    shared, link-local with the cloud metadata address 169.254.169.254, unspecified, reserved,
    multicast; an IPv4-mapped IPv6 address is judged by its IPv4), unless `allow` has it."""
    if allow is not None and allow.allows_ip(ip):
        return None
    v = ip.ipv4_mapped if ip.version == 6 and ip.ipv4_mapped is not None else ip
    if allow is not None and v is not ip and allow.allows_ip(v):
        return None
    if v.is_loopback:
        return "loopback"
    if v.is_link_local:
        return "link-local"
    if v.is_unspecified:
        return "unspecified"
    if v.is_multicast:
        return "multicast"
    if v.is_private or not v.is_global:
        return "private"
    return None


class WebhookView(NamedTuple):
    """An immutable snapshot of a registration (what the port hands out): the fields of the
    module docstring; `events` a tuple."""

    id: str
    url: str
    events: tuple
    queue: str | None
    secret: str | None
    enabled: bool
    created_ms: int
    success: int
    failure: int
    last_ms: int | None


class Webhook:
    """One registration (see the module docstring for the fields and units)."""

    __slots__ = ("id", "url", "events", "queue", "secret", "enabled", "created_ms",
                 "success", "failure", "last_ms")

    def __init__(self, id: str, url: str, events: list, queue, secret, created_ms: int,
                 enabled: bool = True) -> None:
        self.id = id
        self.url = url
        self.events = list(events)
        self.queue = queue
        self.secret = secret
        self.enabled = enabled
        self.created_ms = created_ms
        self.success = 0
        self.failure = 0
        self.last_ms = None

    def view(self) -> WebhookView:
        """A snapshot (WebhookView)."""
        return WebhookView(self.id, self.url, tuple(self.events), self.queue, self.secret,
                           self.enabled, self.created_ms, self.success, self.failure,
                           self.last_ms)

    def row(self) -> dict:
        """The `webhooks` table row: id, url, created_ms and the rest as MessagePack `spec`."""
        return {"id": self.id, "url": self.url, "created_ms": self.created_ms,
                "spec": _pack({"events": self.events, "queue": self.queue,
                               "secret": self.secret, "enabled": self.enabled})}

    @classmethod
    def from_row(cls, row: dict) -> "Webhook":
        spec = msgpack.unpackb(row["spec"], raw=False)
        return cls(row["id"], row["url"], spec.get("events") or [], spec.get("queue"),
                   spec.get("secret"), int(row["created_ms"]), bool(spec.get("enabled", True)))

    def wants(self, event: str, queue: str) -> bool:
        """True when this registration takes webhook event `event` of `queue` now."""
        return self.enabled and event in self.events and (self.queue is None
                                                          or self.queue == queue)


class Registry:
    """The registrations, in registration order (ListWebhooks' order). `clock`: the engine's
    (created_ms, last_ms); `journal`: core.journal.Journal or None (memory mode: not stored).
    `version` grows on every change, so a consumer (the gateway's delivery) can cache what it
    derived from the list. `on_change()` (optional) is called after every change."""

    def __init__(self, clock, journal) -> None:
        self.clock = clock
        self.journal = journal
        self.hooks: dict = {}
        self.allow = AllowList()
        self.version = 0
        self.on_change = None

    def _changed(self, hook: Webhook | None, key: str) -> None:
        self.version += 1
        if self.journal is not None:
            self.journal.put_record("webhooks", key, None if hook is None else hook.row())
        if self.on_change is not None:
            self.on_change()

    def restore(self, rows) -> int:
        """Load stored rows (Store.load_records("webhooks")), before serving; returns how many.
        Stored rows are not written again."""
        for r in rows:
            h = Webhook.from_row(r)
            self.hooks[h.id] = h
        self.hooks = dict(sorted(self.hooks.items(), key=lambda kv: (kv[1].created_ms, kv[0])))
        self.version += 1
        return len(rows)

    def add(self, id: str, url, events, queue, secret):
        """Register a webhook: the new Webhook, or the reference's error text (str) for a URL
        refused by url_error or an unknown event name. TypeError when `events` is not a list
        (or `queue` / `secret` not a string or None), as the reference's handler throws."""
        e = url_error(url, self.allow)
        if e:
            return e
        if events.__class__ is not list:
            raise TypeError("events must be an array")
        if not (queue is None or queue.__class__ is str) or \
                not (secret is None or secret.__class__ is str):
            raise TypeError("queue and secret must be strings")
        bad = [str(x) for x in events if x not in WEBHOOK_EVENTS]
        if bad:
            return (f"Invalid webhook event(s): {', '.join(bad)}. "
                    f"Valid: {', '.join(WEBHOOK_EVENTS)}")
        h = Webhook(id, url, events, queue, secret, self.clock.wall_ms())
        self.hooks[id] = h
        self._changed(h, id)
        return h

    def remove(self, id) -> bool:
        """Unregister webhook `id`; False when there is none."""
        h = self.hooks.pop(id, None) if id.__class__ is str else None
        if h is None:
            return False
        self._changed(None, id)
        return True

    def set_enabled(self, id, enabled: bool) -> bool:
        """Enable or disable webhook `id` (stored); False when there is none."""
        h = self.hooks.get(id) if id.__class__ is str else None
        if h is None:
            return False
        if h.enabled != enabled:
            h.enabled = enabled
            self._changed(h, id)
        return True

    def delivered(self, id: str, successes: int, failures: int = 0) -> None:
        """Count delivery outcomes of webhook `id` (each after its retries): a success sets
        last_ms to now (wall ms). A removed webhook is ignored. Not stored."""
        h = self.hooks.get(id)
        if h is None:
            return
        if successes:
            h.success += successes
            h.last_ms = self.clock.wall_ms()
        h.failure += failures

    def stats(self) -> dict:
        """{"total": registrations, "enabled": enabled ones} (the reference's getStats)."""
        return {"total": len(self.hooks),
                "enabled": sum(1 for h in self.hooks.values() if h.enabled)}
