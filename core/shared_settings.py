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


class SharedSettings:
    """One node's side (see the module docstring); `node`: core.shared.SharedNode, whose
    Calls `number` names this node. `installed`: changes of other nodes installed here."""

    def __init__(self, node) -> None:
        self.node = node
        self.changed_queues: set = set()   # changed here, to announce after the commit
        self.installed = 0

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
        """A `jobgate_settings` notification: another node changed a queue's settings."""
        head, _, queue = payload.partition(":")
        if not queue or head == str(self.node.calls.number):
            return

        self._install(queue)

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
