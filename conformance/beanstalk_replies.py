"""Builders for expected beanstalk reply frames, in beanstalkd 1.12's exact format.

Stats bodies are written with 1.12's fixed key order and 1.12's quoting (only ``version`` is
quoted). Volatile values (pid, uptime, rusage-*, hostname, id, os, platform, age, time-left,
pause-time-left) get placeholders here: the comparison masks them on both sides.
"""

from __future__ import annotations

__all__ = [
    "ok",
    "yaml_list",
    "job_frame",
    "stats_job",
    "stats_tube",
    "stats",
    "STATS_KEYS",
]


def ok(body: bytes) -> bytes:
    """``OK <n>\\r\\n<body>\\r\\n`` for a body given without its trailing CRLF."""
    return b"OK %d\r\n" % len(body) + body + b"\r\n"


def yaml_list(*names: str) -> bytes:
    """The frame list-tubes / list-tubes-watched send for ``names`` (in server order)."""
    return ok(("---\n" + "".join(f"- {n}\n" for n in names)).encode())


def job_frame(word: str, job_id: int, body: bytes) -> bytes:
    """``RESERVED``/``FOUND`` frame: ``<word> <id> <len>\\r\\n<body>\\r\\n``."""
    return b"%s %d %d\r\n" % (word.encode(), job_id, len(body)) + body + b"\r\n"


def stats_job(job_id: int, tube: str, state: str, *, pri: int = 0, age: int = 0,
              delay: int = 0, ttr: int = 60, time_left: int = 0, file: int = 0,
              reserves: int = 0, timeouts: int = 0, releases: int = 0, buries: int = 0,
              kicks: int = 0) -> bytes:
    """stats-job reply frame; ``delay``, ``ttr``, ``age``, ``time_left`` in seconds."""
    body = (
        f"---\nid: {job_id}\ntube: {tube}\nstate: {state}\npri: {pri}\nage: {age}\n"
        f"delay: {delay}\nttr: {ttr}\ntime-left: {time_left}\nfile: {file}\n"
        f"reserves: {reserves}\ntimeouts: {timeouts}\nreleases: {releases}\n"
        f"buries: {buries}\nkicks: {kicks}\n"
    )
    return ok(body.encode())


def stats_tube(name: str, *, urgent: int = 0, ready: int = 0, reserved: int = 0,
               delayed: int = 0, buried: int = 0, total: int = 0, using: int = 0,
               watching: int = 0, waiting: int = 0, deletes: int = 0, pauses: int = 0,
               pause: int = 0, pause_left: int = 0) -> bytes:
    """stats-tube reply frame; ``pause`` and ``pause_left`` in seconds."""
    body = (
        f"---\nname: {name}\ncurrent-jobs-urgent: {urgent}\ncurrent-jobs-ready: {ready}\n"
        f"current-jobs-reserved: {reserved}\ncurrent-jobs-delayed: {delayed}\n"
        f"current-jobs-buried: {buried}\ntotal-jobs: {total}\ncurrent-using: {using}\n"
        f"current-watching: {watching}\ncurrent-waiting: {waiting}\ncmd-delete: {deletes}\n"
        f"cmd-pause-tube: {pauses}\npause: {pause}\npause-time-left: {pause_left}\n"
    )
    return ok(body.encode())


# 1.12's stats keys in order, with the default value of a fresh server. Counters are given
# as keyword arguments to ``stats`` with "-" spelled "_" (cmd_put=3).
STATS_KEYS: tuple[tuple[str, str], ...] = (
    ("current-jobs-urgent", "0"),
    ("current-jobs-ready", "0"),
    ("current-jobs-reserved", "0"),
    ("current-jobs-delayed", "0"),
    ("current-jobs-buried", "0"),
    ("cmd-put", "0"),
    ("cmd-peek", "0"),
    ("cmd-peek-ready", "0"),
    ("cmd-peek-delayed", "0"),
    ("cmd-peek-buried", "0"),
    ("cmd-reserve", "0"),
    ("cmd-reserve-with-timeout", "0"),
    ("cmd-delete", "0"),
    ("cmd-release", "0"),
    ("cmd-use", "0"),
    ("cmd-watch", "0"),
    ("cmd-ignore", "0"),
    ("cmd-bury", "0"),
    ("cmd-kick", "0"),
    ("cmd-touch", "0"),
    ("cmd-stats", "0"),
    ("cmd-stats-job", "0"),
    ("cmd-stats-tube", "0"),
    ("cmd-list-tubes", "0"),
    ("cmd-list-tube-used", "0"),
    ("cmd-list-tubes-watched", "0"),
    ("cmd-pause-tube", "0"),
    ("job-timeouts", "0"),
    ("total-jobs", "0"),
    ("max-job-size", "65535"),
    ("current-tubes", "1"),
    ("current-connections", "1"),
    ("current-producers", "0"),
    ("current-workers", "0"),
    ("current-waiting", "0"),
    ("total-connections", "2"),
    ("pid", "0"),
    ("version", '"1.12"'),
    ("rusage-utime", "0.000000"),
    ("rusage-stime", "0.000000"),
    ("uptime", "0"),
    ("binlog-oldest-index", "0"),
    ("binlog-current-index", "0"),
    ("binlog-records-migrated", "0"),
    ("binlog-records-written", "0"),
    ("binlog-max-size", "10485760"),
    ("draining", "false"),
    ("id", "0000000000000000"),
    ("hostname", "host"),
    ("os", "os"),
    ("platform", "platform"),
)
_STATS_KEYSET = {k for k, _ in STATS_KEYS}


def stats(**values: int | str) -> bytes:
    """stats reply frame: a fresh server's values overridden by ``values``.

    Keyword names use "_" for "-" (``cmd_put=2``, ``current_connections=2``). Defaults assume
    the harness's one readiness-probe connection (``total-connections: 2`` with one client).
    """
    given = {k.replace("_", "-"): str(v).lower() if isinstance(v, bool) else str(v)
             for k, v in values.items()}
    unknown = set(given) - _STATS_KEYSET
    if unknown:
        raise KeyError(f"unknown stats keys: {sorted(unknown)}")
    body = "---\n" + "".join(f"{k}: {given.get(k, v)}\n" for k, v in STATS_KEYS)
    return ok(body.encode())
