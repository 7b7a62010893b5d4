"""Queue settings across nodes (issue 19; docs/scaling.md "Queue settings across nodes"):
a rate limit, concurrency limit or stall config set through one node (bunqueue RateLimit,
SetConcurrency, SetStallConfig, their Clear forms) applies on every node.

The settings are stored in table queue_settings by the node that changed them (core/limits.py,
with its next commit). After that commit the node NOTIFYs channel `jobgate_settings` with
`<node number>:<queue>`; every other node reads the queue's row and installs it in its engine
without storing it again (Limits.apply_settings). A node that starts reads them all
(Port.restore). A notification lost with a listener's session is not repeated: the
settings of a queue changed during that gap reach that node at the queue's next change or
its restart (docs/scaling.md).

A node whose rate limit differs from the stored one for a second reads the row again
(`reload`, from core/shared_tokens.py). A row read while a change made here waits for its
commit is not installed (that change is stored after it). The limits hold across nodes:
core/shared_slots.py (concurrency), core/shared_tokens.py (rate). No I/O here (the
gateway's listener feeds `heard`). Units: ms.
"""
from __future__ import annotations

from .shared_events import publish
from .shared_reads import _run

#: the channel of settings changes
SETTINGS_CHANNEL = "jobgate_settings"


def settings_row(conn, queue: str):
    """The stored spec (bytes) of `queue`'s settings, or None when it has none."""
    def go(cur):
        cur.execute("SELECT spec FROM queue_settings WHERE queue = %s", (queue,))
        r = cur.fetchone()
        return None if r is None else bytes(r[0])
    return _run(conn, go)


def pause_row(conn, queue: str):
    """The end (wall ms) of `queue`'s pause across nodes (table queue_pauses), or None."""
    def go(cur):
        cur.execute("SELECT until_ms FROM queue_pauses WHERE queue = %s", (queue,))
        r = cur.fetchone()
        return None if r is None else r[0]
    return _run(conn, go)


class SharedSettings:
    """One node's side (see the module docstring); `node`: core.shared.SharedNode, whose
    Calls `number` names this node. `installed`: changes of other nodes installed here."""

    def __init__(self, node) -> None:
        self.node = node
        self.changed_queues: set = set()   # changed here, to announce after the commit
        self.installed = 0
        self.pauses_installed = 0            # other nodes' pauses installed here
        self._pausing: dict = {}             # queue -> callbacks of pause_global here
        self._missed: set = set()            # queues whose notices came meanwhile

    def changed(self, queue: str) -> None:
        """The engine changed `queue`'s settings (stored with the next commit): announce it
        once that commit is in."""
        if not self.changed_queues:
            self.node.after_commit(self._announce)
        self.changed_queues.add(queue)

    def _announce(self) -> None:
        queues, self.changed_queues = self.changed_queues, set()
        me = self.node.calls.number
        self.node.query(publish, (SETTINGS_CHANNEL, [f"{me}:{q}" for q in sorted(queues)]),
                        lambda _: None)

    def heard(self, payload: str) -> None:
        """A `jobgate_settings` notification: another node changed a queue's settings
        (`<number>:<queue>`) or paused it or ended its pause (`<number>p:<queue>`)."""
        head, _, queue = payload.partition(":")
        if not queue or head == str(self.node.calls.number):
            return
        if head.endswith("p"):
            if queue in self._pausing:
                self._missed.add(queue)
            elif head[:-1] != str(self.node.calls.number):
                self._install_pause(queue)
            return
        self._install(queue)

    # ------------------------------------------------------------------ pauses
    def pausing(self, queue: str, callback) -> None:
        """A client of this node pauses `queue` (or ends its pause) across nodes
        (Port.pause_global): `callback(result)` once `paused` is called with the database's
        answer; meanwhile other nodes' pause notices of `queue` are not installed here (this
        node's change is stored after them)."""
        self._pausing.setdefault(queue, []).append(callback)

    def paused(self, queue: str, result) -> None:
        """The database's answer to the oldest `pausing` of `queue`: its callback gets it."""
        cbs = self._pausing.get(queue)
        cb = cbs.pop(0)
        if not cbs:
            del self._pausing[queue]
            if queue in self._missed:   # another node's notice came meanwhile: read again
                self._missed.discard(queue)
                self._install_pause(queue)
        cb(result)

    def _install_pause(self, queue: str) -> None:
        """Read `queue`'s pause row (core/shared_changes.py `pause`) and pause this engine's
        queue until its end, or end its pause: so that a pause made on another node holds the
        jobs handed over here, and its end (a beanstalk `pause-tube <tube> 0`, a glide-mq
        resume) lets this node's reservers go at once. A queue unknown here is left alone
        (the claims skip it while the row is there)."""
        def got(until) -> None:
            if isinstance(until, Exception):
                return
            if queue in self._pausing:   # read again once this node's own is stored
                self._missed.add(queue)
                return
            e = self.node.e
            left = 0 if until is None else until - e.clock.wall_ms()
            self.pauses_installed += 1
            node = self.node
            if e.pause(queue, max(left, 0), count=False) and left <= 0:
                # the pause's end: its NOTIFY may have come before this row read, when the
                # claim still skipped the queue here
                node.hint(queue)
                if node.waits_for(queue) and node.on_demand is not None:
                    node.on_demand()
        self.node.query(pause_row, (queue,), got)

    def reload(self, queue: str) -> None:
        """Read `queue`'s stored settings again and install them: this node found its own
        differ from the stored ones (core/shared_tokens.py: a notification lost with its
        listener's session)."""
        self._install(queue)

    def _install(self, queue: str) -> None:
        """Read `queue`'s row and install it, unless a change made here waits for its commit
        (that change is stored after the row read, so it is the one that holds)."""
        def got(spec) -> None:
            if isinstance(spec, Exception) or queue in self.changed_queues:
                return   # the next change, a reload or a restart brings them
            self.installed += 1
            self.node.e.apply_settings(queue, spec)
        if queue not in self.changed_queues:
            self.node.query(settings_row, (queue,), got)


__all__ = ["SETTINGS_CHANNEL", "SharedSettings", "settings_row"]
