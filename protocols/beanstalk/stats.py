"""Server-wide beanstalk state and the YAML bodies of stats, stats-job, stats-tube, list-*.

Key order is beanstalkd 1.12's (../shared/reference/beanstalk-golden-1.12.txt). String values are
double-quoted as beanstalkd HEAD does (version, hostname, os, platform, tube and tube names in
stats-job / stats-tube), so YAML parsers and Node's jackd read them; see docs/beanstalk.md D1.
"""
from __future__ import annotations

import os
import platform
import resource

from core.api import DELAYED, RESERVED, Port

#: Counted beanstalk commands, in the order stats prints them.
CMD_KEYS = (
    b"put", b"peek", b"peek-ready", b"peek-delayed", b"peek-buried", b"reserve",
    b"reserve-with-timeout", b"delete", b"release", b"use", b"watch", b"ignore", b"bury", b"kick",
    b"touch", b"stats", b"stats-job", b"stats-tube", b"list-tubes", b"list-tube-used",
    b"list-tubes-watched", b"pause-tube",
)

PRI_OFFSET = 2**31
PRI_MAX = 2**32 - 1


def to_rank(pri: int) -> int:
    """beanstalk priority (u32) -> canonical rank (DESIGN.md: r = pri - 2^31)."""
    return pri - PRI_OFFSET


def to_pri(rank: int) -> int:
    """canonical rank -> beanstalk priority, clamped to 0..2^32-1."""
    p = rank + PRI_OFFSET
    return 0 if p < 0 else PRI_MAX if p > PRI_MAX else p


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _secs_left(ms: int) -> int:
    """Whole seconds left of `ms` remaining ms, truncated as beanstalkd does with ns (>= 0)."""
    return (ms - 1) // 1000 if ms > 0 else 0


def ok(body: str) -> bytes:
    """Frame a YAML body: b"OK <n>\\r\\n" + body + b"\\r\\n"."""
    b = body.encode()
    return b"OK %d\r\n%s\r\n" % (len(b), b)


def yaml_list(names) -> bytes:
    """list-tubes / list-tubes-watched reply for `names` (iterable of str)."""
    return ok("---\n" + "".join(f"- {n}\n" for n in names))


class ServerInfo:
    """Process-wide beanstalk state shared by every session of one server.

    `port`: the engine port (core.api.Port; an engine is wrapped with Port.of). cmds: counts
    per command (keys CMD_KEYS); connection, producer and worker counts; max_job_size (bytes);
    line_max (bytes of a command line with CRLF); version (the string stats reports, default
    "1.12"). `uptime` counts from construction on the port's clock.
    """

    def __init__(self, engine, max_job_size: int = 65535, version: str = "1.12",
                 line_max: int = 224) -> None:
        self.port = Port.of(engine)
        self.max_job_size = max_job_size
        self.line_max = line_max
        self.version = version
        self.cmds = dict.fromkeys(CMD_KEYS, 0)
        self.more_cmds: dict = {}   # commands stats does not show (kick-job, reserve-job, quit)
        self.connections = 0
        self.total_connections = 0
        self.producers = 0
        self.workers = 0
        self.started = self.port.clock.monotonic_ms()
        self.id = os.urandom(8).hex()
        u = os.uname()
        self.hostname = u.nodename   # gethostname(), without importing socket (sans-IO)
        self.os = u.version
        self.platform = platform.machine()

    def operations(self) -> dict:
        """{command: times run} since start (protocols/contract.py; /metrics): stats' cmd-*
        counts and the commands it does not show."""
        out = {k.decode(): v for k, v in self.cmds.items()}
        out.update((k.decode(), v) for k, v in self.more_cmds.items())
        return out

    def stats(self, st=None) -> bytes:
        """The `stats` reply; `st`: the server's counts (core.api.ServerStats, default
        port.stats(); a node in shared mode passes Port.stats_global's)."""
        p = self.port
        if st is None:
            st = p.stats()
        ru = resource.getrusage(resource.RUSAGE_SELF)
        lines = [
            "---",
            f"current-jobs-urgent: {st.urgent}",
            f"current-jobs-ready: {st.ready}",
            f"current-jobs-reserved: {st.reserved}",
            f"current-jobs-delayed: {st.delayed}",
            f"current-jobs-buried: {st.buried}",
        ]
        lines += [f"cmd-{k.decode()}: {v}" for k, v in self.cmds.items()]
        lines += [
            f"job-timeouts: {st.job_timeouts}",
            f"total-jobs: {st.total_jobs}",
            f"max-job-size: {self.max_job_size}",
            f"current-tubes: {st.queues}",
            f"current-connections: {self.connections}",
            f"current-producers: {self.producers}",
            f"current-workers: {self.workers}",
            f"current-waiting: {st.waiting}",
            f"total-connections: {self.total_connections}",
            f"pid: {os.getpid()}",
            f"version: {_quote(self.version)}",
            f"rusage-utime: {int(ru.ru_utime)}.{int(ru.ru_utime * 1e6) % 1000000:06d}",
            f"rusage-stime: {int(ru.ru_stime)}.{int(ru.ru_stime * 1e6) % 1000000:06d}",
            f"uptime: {(p.clock.monotonic_ms() - self.started) // 1000}",
            "binlog-oldest-index: 0",
            "binlog-current-index: 0",
            "binlog-records-migrated: 0",
            "binlog-records-written: 0",
            "binlog-max-size: 10485760",
            f"draining: {'true' if st.draining else 'false'}",
            f"id: {self.id}",
            f"hostname: {_quote(self.hostname)}",
            f"os: {_quote(self.os)}",
            f"platform: {_quote(self.platform)}",
        ]
        return ok("\n".join(lines) + "\n")

    def stats_job(self, job) -> bytes:
        """The `stats-job` reply for a live job (a core.api.JobView)."""
        st = job.state
        left = _secs_left(job.left_ms) if st is RESERVED or st is DELAYED else 0
        age = (self.port.clock.wall_ms() - job.created_ms) // 1000
        # whole seconds, rounded up: a workq job's 200 ms TTR shows as 1, never 0
        delay_s, ttr_s = -(-job.delay_ms // 1000), -(-job.ttr_ms // 1000)
        body = (
            f"---\nid: {job.id}\ntube: {_quote(job.queue)}\nstate: {st}\n"
            f"pri: {to_pri(job.priority)}\nage: {age if age > 0 else 0}\n"
            f"delay: {delay_s}\nttr: {ttr_s}\ntime-left: {left}\n"
            f"file: 0\nreserves: {job.reserves}\ntimeouts: {job.timeouts}\n"
            f"releases: {job.releases}\nburies: {job.buries}\nkicks: {job.kicks}\n"
        )
        return ok(body)

    def stats_tube(self, q) -> bytes:
        """The `stats-tube` reply for a queue (a core.api.QueueView)."""
        body = (
            f"---\nname: {_quote(q.name)}\ncurrent-jobs-urgent: {q.urgent}\n"
            f"current-jobs-ready: {q.ready}\ncurrent-jobs-reserved: {q.reserved}\n"
            f"current-jobs-delayed: {q.delayed}\ncurrent-jobs-buried: {q.buried}\n"
            f"total-jobs: {q.total_jobs}\ncurrent-using: {q.using}\n"
            f"current-watching: {q.watching}\ncurrent-waiting: {q.waiting}\n"
            f"cmd-delete: {q.deletes}\ncmd-pause-tube: {q.pauses}\n"
            f"pause: {q.pause_ms // 1000 if q.paused else 0}\n"
            f"pause-time-left: {_secs_left(q.pause_left_ms) if q.paused else 0}\n"
        )
        return ok(body)


__all__ = ["ServerInfo", "CMD_KEYS", "to_rank", "to_pri", "ok", "yaml_list"]
