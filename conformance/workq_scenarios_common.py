"""Building blocks of the workq scenarios: golden ids, reply builders, step builders that cut
expected replies into frames with the workq framing, and the masks for values a scenario
cannot pin down (timestamps; active-clients where it depends on the harness).

Expected replies are written as whole byte strings (what the reference server sent); the step
builders split them into frames with ``workq_client.split_reply``, so a reply that breaks its
own framing (the reference's ``inspect server``, a payload with CRLF in ``inspect job``) turns
into the same extra frames the runner will read.
"""

from __future__ import annotations

import re
import time
from dataclasses import replace
from typing import Callable

from .framing import END_EOF, END_OK, END_SILENT, Outcome
from .scenario import DEFAULT_TIMEOUT, Scenario, Step, steps
from .workq_client import format_time, split_reply

__all__ = [
    "U", "OK", "NOT_FOUND", "TIMEOUT", "CE", "T0",
    "entry", "jobs", "queue", "server", "leased", "result",
    "frames", "wq", "wq_window", "wq_read", "wq_eof", "waits", "timed", "at",
    "mask_times", "mask_active_clients", "scenario",
]

#: Every reply frame of a time-dependent key carries this value after masking.
MASKED = b"*"
#: The ``created``/``started`` value written into expected replies (masked when compared).
T0 = b"2026-11-22T02:42:21Z"

OK = b"+OK\r\n"
NOT_FOUND = b"-NOT-FOUND\r\n"
TIMEOUT = b"-TIMEOUT\r\n"


def CE(msg: str) -> bytes:  # noqa: N802 - reads like the wire word
    """``-CLIENT-ERROR <msg>\\r\\n``."""
    return b"-CLIENT-ERROR " + msg.encode() + b"\r\n"


def U(n: int) -> bytes:  # noqa: N802
    """The golden transcript's fixed v4 id number ``n``: ``11111111-1111-4111-8111-<n:012x>``."""
    return b"11111111-1111-4111-8111-%012x" % n


# ------------------------------------------------------------------------- reply builders
def entry(id: bytes, name: str, *, ttr: int = 1000, ttl: int = 60000, payload: bytes = b"x",
          max_attempts: int = 0, attempts: int = 0, max_fails: int = 0, fails: int = 0,
          priority: int = 0, state: int = 0, created: bytes = T0, time: bytes | None = None,
          show_payload: bool = True, count: int | None = None) -> bytes:
    """One job of an inspect reply, keys in workq's order. ``show_payload=False`` leaves the
    ``payload`` key out (jobgate, payload with CR/LF: W3); ``count`` overrides the announced
    key count (the number of key lines by default). ``ttr``/``ttl`` in ms."""
    keys = [b"name " + name.encode(), b"ttr %d" % ttr, b"ttl %d" % ttl,
            b"payload-size %d" % len(payload)]
    if show_payload:
        keys.append(b"payload " + payload)
    keys += [b"max-attempts %d" % max_attempts, b"attempts %d" % attempts,
             b"max-fails %d" % max_fails, b"fails %d" % fails, b"priority %d" % priority,
             b"state %d" % state, b"created " + created]
    if time is not None:
        keys.append(b"time " + time)
    n = len(keys) if count is None else count
    return b"%s %d\r\n" % (id, n) + b"".join(k + b"\r\n" for k in keys)


def jobs(*entries: bytes) -> bytes:
    """``+OK <n>`` and the job entries (inspect job / jobs / scheduled-jobs)."""
    return b"+OK %d\r\n" % len(entries) + b"".join(entries)


def queue(name: str, ready: int, scheduled: int) -> bytes:
    """One queue entry of inspect queue / queues."""
    return b"%s 2\r\nready-len %d\r\nscheduled-len %d\r\n" % (name.encode(), ready, scheduled)


def server(clients: int, evicted: int, announced: int = 3, started: bytes = T0) -> bytes:
    """An ``inspect server`` reply; jobgate announces the 3 keys it sends, the reference 2."""
    return (b"+OK 1\r\nserver %d\r\nactive-clients %d\r\nevicted-jobs %d\r\nstarted %s\r\n"
            % (announced, clients, evicted, started))


def leased(id: bytes, name: str, ttr: int, payload: bytes) -> bytes:
    """A lease reply: ``+OK 1``, ``<id> <name> <ttr ms> <size>``, payload."""
    return b"+OK 1\r\n%s %s %d %d\r\n%s\r\n" % (id, name.encode(), ttr, len(payload), payload)


def result(id: bytes, success: bool, data: bytes) -> bytes:
    """A result / run reply: ``+OK 1``, ``<id> <0|1> <size>``, result bytes."""
    return b"+OK 1\r\n%s %d %d\r\n%s\r\n" % (id, 1 if success else 0, len(data), data)


def frames(reply: bytes) -> tuple[bytes, ...]:
    """``reply`` cut into frames as the runner reads them (an incomplete rest is an error)."""
    out = []
    rest = reply
    while rest:
        f, used, _ = split_reply(rest)
        if f is None:
            raise ValueError(f"incomplete reply frame: {rest[:80]!r}")
        out.append(f)
        rest = rest[used:]
    return tuple(out)


# -------------------------------------------------------------------------- step builders
def _label(label: str, data: bytes) -> str:
    if label:
        return label
    text = data.decode("latin-1")
    return text if len(text) <= 60 else text[:57] + "..."


def wq(conn: str, data: bytes, reply: bytes = b"", label: str = "",
       timeout: float = DEFAULT_TIMEOUT, alt: tuple[bytes, ...] = ()) -> Step:
    """Send ``data`` on ``conn`` and read the frames of ``reply`` within ``timeout`` seconds.
    ``alt``: other whole replies (same frame count) the reference may send instead."""
    fr = frames(reply)
    return Step(conn, "send", _label(label, data), data=data, read="frames", count=len(fr),
                timeout=timeout, expect=Outcome(fr, END_OK),
                alternatives=tuple(Outcome(frames(a), END_OK) for a in alt))


def wq_window(conn: str, data: bytes, seconds: float, reply: bytes = b"", label: str = "",
              end: str = END_SILENT) -> Step:
    """Send ``data`` and collect what arrives within ``seconds``: exactly ``reply`` (nothing
    by default: "no answer yet"); ``end`` END_EOF when the server closes inside the window."""
    return Step(conn, "send", _label(label, data), data=data, read="window", timeout=seconds,
                expect=Outcome(frames(reply), end))


def wq_read(conn: str, reply: bytes, label: str, timeout: float = DEFAULT_TIMEOUT,
            alt: tuple[bytes, ...] = ()) -> Step:
    """Read the frames of ``reply`` on ``conn`` without sending, within ``timeout`` s."""
    fr = frames(reply)
    return Step(conn, "none", label, read="frames", count=len(fr), timeout=timeout,
                expect=Outcome(fr, END_OK),
                alternatives=tuple(Outcome(frames(a), END_OK) for a in alt))


def wq_eof(conn: str, data: bytes, reply: bytes = b"", label: str = "",
           timeout: float = DEFAULT_TIMEOUT) -> Step:
    """Send ``data``; expect ``reply`` and then the server closing the connection."""
    return Step(conn, "send", _label(label, data), data=data, read="eof", timeout=timeout,
                expect=Outcome(frames(reply), END_EOF))


def waits(conn: str, data: bytes, quiet: float, reply: bytes, label: str,
          timeout: float = DEFAULT_TIMEOUT) -> tuple[Step, Step]:
    """A blocking command: send ``data``, expect no answer for ``quiet`` seconds (a lower
    bound on the wait), then ``reply`` within ``timeout`` seconds. The second step's label is
    ``label + " [reply]"``."""
    return (wq_window(conn, data, quiet, label=label),
            wq_read(conn, reply, label + " [reply]", timeout))


def timed(step: Step, render: Callable[[], bytes]) -> Step:
    """``step`` with its bytes built when it runs (``render()``), e.g. a schedule time
    relative to now; ``step.data`` stays as the readable template."""
    return replace(step, render=render)


def at(offset_s: float, fmt: bytes, frac: bytes = b"") -> Callable[[], bytes]:
    """A render function: ``fmt`` with ``%s`` replaced by the UTC time ``offset_s`` seconds
    from the moment the step runs (``2006-01-02T15:04:05Z``; ``frac`` e.g. b".5" is inserted
    before the Z)."""
    def render() -> bytes:
        t = format_time(time.time() + offset_s).encode()
        return fmt % (t[:-1] + frac + b"Z")
    return render


# ---------------------------------------------------------------------------------- masks
_OK_N = re.compile(rb"\+OK (\d+)\r\n")


def _map_keys(frame: bytes, keys: frozenset[bytes]) -> bytes:
    """Replace the value of every inspect key line whose key is in ``keys`` by MASKED.
    Walks the frame's structure (sized bodies are skipped, never searched); a stray line
    frame ``<key> <value>`` (a reference reply that overran its key count) is masked too."""
    m = _OK_N.match(frame)
    if m is None:
        if frame[:1] in (b"+", b"-"):
            return frame
        k, sep, _ = frame[:-2].partition(b" ")
        return k + b" " + MASKED + b"\r\n" if sep and k in keys else frame
    out = [frame[:m.end()]]
    pos = m.end()
    for _ in range(int(m.group(1))):
        eol = frame.find(b"\r\n", pos)
        if eol < 0:
            break
        head = frame[pos:eol].split(b" ")
        out.append(frame[pos:eol + 2])
        pos = eol + 2
        if len(head) == 2 and head[1].isdigit():
            for _ in range(int(head[1])):
                eol = frame.find(b"\r\n", pos)
                if eol < 0:
                    break
                k, sep, _ = frame[pos:eol].partition(b" ")
                out.append(k + b" " + MASKED + b"\r\n" if sep and k in keys
                           else frame[pos:eol + 2])
                pos = eol + 2
        elif head[-1].isdigit():
            end = pos + int(head[-1]) + 2
            out.append(frame[pos:end])
            pos = end
    out.append(frame[pos:])
    return b"".join(out)


_TIME_KEYS = frozenset({b"created", b"started", b"time"})
_CLIENT_KEYS = frozenset({b"active-clients"})


def mask_times(frame: bytes) -> bytes:
    """Mask the values of ``created``, ``started`` and ``time`` in inspect replies (wall-clock
    times of the run)."""
    return _map_keys(frame, _TIME_KEYS)


def mask_active_clients(frame: bytes) -> bytes:
    """Mask ``active-clients`` in inspect server replies (for scenarios where the count
    depends on when the server notices a closed connection, or on the harness)."""
    return _map_keys(frame, _CLIENT_KEYS)


def scenario(name: str, doc: str, *items, source: str = "golden",
             masks: tuple[Callable[[bytes], bytes], ...] = ()) -> Scenario:
    """A workq Scenario (workq framing) from steps and iterables of steps."""
    return Scenario(name, steps(*items), doc=doc, source=source, splitter=split_reply,
                    masks=masks)
