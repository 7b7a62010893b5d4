"""Job events across nodes in shared mode (issue 19, item 4; docs/scaling.md "Events across
nodes"): a bunqueue `SubscribeEvents` on node B receives the events of jobs pushed, pulled,
completed and failed on node A.

Two NOTIFY channels, no table:

- **`jobgate_subs`: who wants which events.** A node whose subscribers ask for every node's
  events (core.events.Subscription `all_nodes`: bunqueue's SubscribeEvents) announces the
  queues they watch: `<number>:<json>`, the JSON a list of queue names, `null` for every
  queue, `[]` for none any more. It announces when that set changes, and again every
  ANNOUNCE_MS while it is not empty; the others forget a node not heard for FORGET_MS (a
  node that died). A node that (re)connects its listener asks with `<number>:?`, and every
  node with subscribers announces again.
- **`jobgate_events`: the events.** A node that knows of subscribers elsewhere subscribes to
  its own feed for their queues (the relay subscription: nothing at all while nobody
  elsewhere subscribes) and, once the changes behind a batch of events are committed
  (SharedNode.query_settled), sends them as MessagePack in base64, cut into notifications of
  at most CHUNK characters: `<number>:<batch>:<i>:<n>:<text>`. One transaction's
  notifications reach every listener together and in order, so a receiver joins the n
  parts of a batch and hands its events to the subscriptions that asked for every node's
  events (core.events.Feed.relay), with sequence numbers of its own.

What is relayed: every event of the engine's feed, as it is (core.events.Event) but without
`detail` (a failed job's payload, for webhooks; a `progress` value is kept), and without the
`result` of one whose MessagePack passes MAX_RESULT bytes (its `completed` event then carries
no data). Events of changes made in SQL by no engine (the leader's promotions, cron runs and
rescues, a row deleted from another node) are not events anywhere. Delivery is at most once,
as notifications are: a node whose listener is reconnecting misses what was sent meanwhile.

No I/O here: notifications are sent with `publish` through SharedNode.query (the gateway's
claim thread), and the gateway (gateway/shared.py) feeds what its listener hears to
`received` / `heard`, calls `tick` on its timer and `connected` when its listener
(re)connects. Units: ms.
"""
from __future__ import annotations

import base64
import json

import msgpack

from .shared_reads import _run

#: the channel of the events themselves
EVENTS_CHANNEL = "jobgate_events"
#: the channel of the announcements of who wants events
SUBS_CHANNEL = "jobgate_subs"
#: characters of base64 text in one notification (PostgreSQL's payload limit is 8000 bytes)
CHUNK = 7000
#: ms between announcements of an unchanged, non-empty set of wanted queues
ANNOUNCE_MS = 10_000
#: ms after which a node's announcement is forgotten (3 missed announcements: it is gone)
FORGET_MS = 30_000
#: a relayed `complete` event's result larger than this (bytes) is left out
MAX_RESULT = 16_384
#: the relay subscription's buffer (events; the oldest are dropped when full)
RELAY_MAXLEN = 10_000
#: the most events in one relayed batch (the next batch follows once it is sent)
BATCH_EVENTS = 500

_pack = msgpack.Packer(use_bin_type=True).pack


def publish(conn, channel: str, payloads: list) -> int:
    """On the claim thread's DB-API connection: NOTIFY `channel` with each of `payloads`, in
    order, in one statement and one transaction (so that a listener gets them together).
    Returns how many."""
    def go(cur):
        cur.execute("SELECT count(pg_notify(%s, p)) FROM (SELECT p FROM unnest(%s::text[]) "
                    "WITH ORDINALITY AS t(p, i) ORDER BY i) o", (channel, list(payloads)))
        return len(payloads)
    return _run(conn, go)


def cut(head: str, data: bytes) -> list:
    """`data` as notification payloads `<head>:<i>:<n>:<base64 part>` of at most CHUNK
    characters of text each (`head` names the stream and ends with its batch number: see
    Joiner)."""
    text = base64.b64encode(data).decode("ascii")
    parts = [text[i:i + CHUNK] for i in range(0, len(text), CHUNK)] or [""]
    n = len(parts)
    return [f"{head}:{i}:{n}:{p}" for i, p in enumerate(parts)]


class Joiner:
    """Joins the payloads `cut()` made back into data. `<head>` is `<stream>:<batch>`: the
    parts of one stream's batch arrive in order and together (one transaction's
    notifications); a batch with a part missing is dropped and counted in `lost`."""

    def __init__(self) -> None:
        self.parts: dict = {}   # stream -> (batch, n, [parts])
        self.lost = 0

    def add(self, payload: str):
        """One payload: (head, data bytes) when it completes a batch, else None (a part, or
        a payload that is not ours: ignored)."""
        try:
            head, i, n, text = payload.rsplit(":", 3)
            stream, batch = head.rsplit(":", 1)
            i, n = int(i), int(n)
        except ValueError:
            return None
        if n != 1:
            got = self.parts.get(stream)
            if i == 0:
                if got is not None:
                    self.lost += 1
                got = self.parts[stream] = (batch, n, [])
            elif got is None or got[0] != batch or len(got[2]) != i:
                self.parts.pop(stream, None)   # a part went missing: drop the batch
                self.lost += 1
                return None
            got[2].append(text)
            if len(got[2]) < n:
                return None
            del self.parts[stream]
            text = "".join(got[2])
        try:
            return head, base64.b64decode(text, validate=True)
        except ValueError:
            self.lost += 1
            return None


def encode(number: int, batch: int, events) -> list:
    """The notification payloads of `events` (core.events.Event) sent by node `number` as its
    batch `batch`: see the module docstring."""
    rows = []
    for ev in events:
        result = ev.result
        if result is not None and len(result) > MAX_RESULT:
            result = None
        detail = ev.detail if ev.kind == "progress" else None
        rows.append((ev.kind, ev.job_id, ev.uid, ev.queue, ev.dialect, ev.at_ms, ev.prev,
                     ev.state, ev.attempt, ev.priority, ev.worker, ev.error, result,
                     ev.result_fmt, detail))
    try:
        data = _pack(rows)
    except (TypeError, ValueError):   # a progress value MessagePack cannot hold
        data = _pack([r[:-1] + (None,) for r in rows])
    return cut(f"{number}:{batch}", data)


class EventRelay:
    """One node's side of the events across nodes (module docstring); `node`:
    core.shared.SharedNode. The gateway sets `number` (this node's number) and `flush_soon`
    (called, inside an engine operation, when relayed events wait: it must run `flush()`
    soon, outside it). Counters: `relayed` (events sent from here), `delivered` (events of
    other nodes delivered here), `lost` (batches that arrived incomplete or could not be
    sent)."""

    def __init__(self, node) -> None:
        self.node = node
        self.number = 0
        self.flush_soon = None
        self.announce_soon = None
        node.e.feed.on_wide = self._wants_changed
        self.wants: dict = {}        # other node number -> (frozenset | None, heard at ms)
        self.sub = None              # the relay subscription while other nodes want events
        self.batch = 0
        self.joiner = Joiner()
        self.announced = frozenset()   # what this node announced last (None: every queue)
        self.announced_ms = 0
        self.relayed = self.delivered = self.unsent = 0
        self.inflight = False        # a batch of events is being sent (the next one waits)

    # -------------------------------------------------- what subscribers here want
    def local_wants(self):
        """The queues this node's every-node subscriptions watch: None (every queue), or a
        frozenset (empty: none)."""
        out: set = set()
        for s in self.node.e.feed.subs:
            if s.all_nodes:
                if s.queues is None:
                    return None
                out |= s.queues
        return frozenset(out)

    def _send(self, channel: str, payloads: list) -> None:
        self.node.query(publish, (channel, payloads), self._sent)

    def _sent(self, outcome) -> None:
        if isinstance(outcome, Exception):
            self.unsent += 1   # logged by the gateway; notifications are hints

    def _events_sent(self, outcome) -> None:
        self.inflight = False
        self._sent(outcome)
        if self.sub is not None and self.sub.buf:
            self.flush()   # what came meanwhile goes as the next batch

    def tick(self, now_ms: int) -> None:
        """The gateway's timer (every 100 ms): forget silent nodes, announce what this
        node wants when it changed or is due again."""
        if self.wants:
            self.expire(now_ms)
        a = self.announcement(now_ms)
        if a is not None:
            self._send(SUBS_CHANNEL, [a])

    def connected(self) -> None:
        """The listener (re)connected: ask every node to announce what it wants (this node
        may have missed announcements while it was not listening)."""
        self._send(SUBS_CHANNEL, [self.ask()])

    def heard_subs(self, payload: str, now_ms: int) -> None:
        """A `jobgate_subs` notification: note what another node wants, or answer its ask."""
        if self.heard(payload, now_ms):
            a = self.announcement(now_ms, force=True)
            if a is not None:
                self._send(SUBS_CHANNEL, [a])

    def announcement(self, now_ms: int, force: bool = False) -> str | None:
        """The `jobgate_subs` payload to send now, or None: when what this node wants
        changed, when ANNOUNCE_MS passed with something wanted, or when `force` (another node
        asked) with something wanted."""
        w = self.local_wants()
        if w == self.announced and not (w != frozenset() and (
                force or now_ms - self.announced_ms >= ANNOUNCE_MS)):
            return None
        self.announced = w
        self.announced_ms = now_ms
        body = "null" if w is None else json.dumps(sorted(w))
        if len(body) > CHUNK:   # too many names for one notification: ask for every queue
            body = "null"
        return f"{self.number}:{body}"

    def ask(self) -> str:
        """The payload that asks every node to announce what it wants (listener connected)."""
        return f"{self.number}:?"

    def heard(self, payload: str, now_ms: int) -> bool:
        """A `jobgate_subs` payload from another node. Returns True when it asked for
        announcements (send `announcement(now, force=True)`)."""
        head, _, body = payload.partition(":")
        if not head.isdigit() or int(head) == self.number:
            return False
        if body == "?":
            return True
        try:
            names = json.loads(body)
        except ValueError:
            return False
        n = int(head)
        if names is None:
            self.wants[n] = (None, now_ms)
        elif names.__class__ is list and names:
            self.wants[n] = (frozenset(str(x) for x in names), now_ms)
        else:
            self.wants.pop(n, None)
        self._retarget()
        return False

    def expire(self, now_ms: int) -> None:
        """Forget the nodes not heard for FORGET_MS."""
        gone = [n for n, (_, at) in self.wants.items() if now_ms - at >= FORGET_MS]
        if gone:
            for n in gone:
                del self.wants[n]
            self._retarget()

    def _retarget(self) -> None:
        """Open, narrow or close the relay subscription to what the other nodes want."""
        queues: set | None = set()
        for qs, _ in self.wants.values():
            if qs is None:
                queues = None
                break
            queues |= qs
        if queues is not None and not queues:
            if self.sub is not None:
                self.sub.close()
                self.sub = None
            return
        if self.sub is None:
            self.sub = self.node.e.feed.subscribe(queues, RELAY_MAXLEN, self._ready)
        else:
            self.sub.set_queues(queues)

    def _wants_changed(self) -> None:
        """A subscription here that wants every node's events came, changed or went: tell
        the other nodes soon (the gateway runs `tick`), not at the next timer tick."""
        if self.announce_soon is not None:
            self.announce_soon()

    # ------------------------------------------------------------------ outgoing
    def _ready(self) -> None:
        if self.flush_soon is not None:
            self.flush_soon()

    def flush(self) -> int:
        """Send the events waiting to be relayed, once the changes behind them are committed
        (SharedNode.query_settled); while a batch is being sent the next one waits for it (so
        a busy node sends few large batches, not one per event). Returns how many."""
        sub = self.sub
        if sub is None or self.inflight:
            return 0
        events = sub.take(BATCH_EVENTS)
        if not events:
            return 0
        self.batch += 1
        try:
            payloads = encode(self.number, self.batch, events)
        except Exception:   # an event that cannot be encoded: that batch is lost, not the relay
            self.unsent += 1
            return 0
        self.relayed += len(events)
        self.inflight = True
        self.node.query_settled(publish, (EVENTS_CHANNEL, payloads), self._events_sent)
        return len(events)

    # ------------------------------------------------------------------ incoming
    def received(self, payload: str) -> int:
        """A `jobgate_events` payload: when it completes a batch of another node, hand the
        batch's events to this node's every-node subscriptions. Returns how many."""
        if payload.startswith(f"{self.number}:"):
            return 0
        got = self.joiner.add(payload)
        if got is None:
            return 0
        try:
            rows = msgpack.unpackb(got[1], raw=False, use_list=False, strict_map_key=False)
        except (ValueError, msgpack.UnpackException):
            self.joiner.lost += 1
            return 0
        feed = self.node.e.feed
        n = 0
        for r in rows if rows.__class__ is tuple else ():
            if r.__class__ is tuple and len(r) == 15:
                feed.relay(r)
                n += 1
        self.delivered += n
        return n

    @property
    def lost(self) -> int:
        """Batches lost: incomplete or unreadable here, or not sent from here."""
        return self.joiner.lost + self.unsent
