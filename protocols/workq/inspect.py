"""workq's `inspect` command (workq-protocol.txt "inspect"; reply formats in replies.py): a
mixin of session.Session, which provides `port`, `info`, `_lookup` and `_wake`.

`inspect server`, `inspect job <id>` (in shared mode, a job this node does not hold is read
from its row: docs/scaling.md), `inspect queue <name>`, `inspect queues <offset> <limit>`,
`inspect jobs|scheduled-jobs <name> <offset> <limit>`. A tube that exists only because
beanstalk clients use or watch it is not a workq queue (`_visible`).
"""
from __future__ import annotations

from . import replies as R
from .parser import ARGS, UNKNOWN, client_error
from .replies import INVALID_NAME, WAIT
from .values import MAX_LIMIT, parse_id, parse_uint, valid_name


class Inspect:
    """The `inspect` command of a workq Session (see the module docstring)."""

    def _inspected(self, view) -> None:
        if view is None or isinstance(view, Exception):
            self._wake(R.NOT_FOUND)
        else:
            self._wake(R.jobs_reply([R.job_entry(view)]))

    # ---------------------------------------------------------------- inspect
    def _inspect(self, c):
        a = c.args
        obj = a[0]
        n = len(a)
        if obj == b"server":
            if n != 1 or c.flags:
                return ARGS
            info = self.info
            return R.server_reply(info.connections, self.port.stats().evicted_jobs,
                                  info.started_ms)
        if obj == b"job":
            if n != 2 or c.flags:
                return ARGS
            id = self._lookup(a[1], check_v4=False)
            if id is R.NOT_FOUND and self.port.shared:   # its row answers (docs/scaling.md)
                self.port.lookup_remote(parse_id(a[1])[0], self._inspected)
                return WAIT
            if id.__class__ is bytes:
                return id
            return R.jobs_reply([R.job_entry(self.port.job(id))])
        if obj == b"queue":
            if n != 2 or c.flags:
                return ARGS
            if not valid_name(a[1]):
                return INVALID_NAME
            q = self._visible(a[1].decode())
            if q is None:
                return R.NOT_FOUND
            return b"+OK 1\r\n" + R.queue_entry(q.name, q.ready, q.delayed)
        if obj == b"queues":
            if n != 3 or c.flags:
                return ARGS
            page = self._page(a[1], a[2])
            if page.__class__ is bytes:
                return page
            qs = sorted((q for q in self.port.queue_views() if q.kept or not q.is_empty()),
                        key=lambda q: q.name)
            qs = qs[page[0]:page[0] + page[1]]
            return b"+OK %d\r\n" % len(qs) + b"".join(
                R.queue_entry(q.name, q.ready, q.delayed) for q in qs)
        if obj == b"jobs" or obj == b"scheduled-jobs":
            if n != 4 or c.flags:
                return ARGS
            if not valid_name(a[1]):
                return INVALID_NAME
            page = self._page(a[2], a[3])
            if page.__class__ is bytes:
                return page
            q = self._visible(a[1].decode())
            if q is None:
                return R.NOT_FOUND
            e = self.port
            lister = e.ready_page if obj == b"jobs" else e.delayed_page
            return R.jobs_reply([R.job_entry(j) for j in lister(q.name, *page)])
        return UNKNOWN

    def _visible(self, name: str):
        """The queue `name` as workq sees it: one used through workq (workq keeps such queues)
        or holding jobs; a tube that exists only because beanstalk clients use or watch it
        (e.g. "default") is not a workq queue. Returns its QueueView or None."""
        q = self.port.queue(name)
        return q if q is not None and (q.kept or not q.is_empty()) else None

    def _page(self, offset: bytes, limit: bytes):
        o = parse_uint(offset, 32)
        if o is None:
            return client_error(b"Invalid cursor offset")
        n = parse_uint(limit, 16)
        if n is None or not 1 <= n <= MAX_LIMIT:
            return client_error(b"Invalid limit")
        return o, n
