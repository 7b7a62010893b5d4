"""Leases: every reservation, in every dialect, holds a lease token issued by the engine.

A token names one reservation of one job: it is issued when the job is reserved (beanstalk
reserve, workq lease, bunqueue PULL) and void once the job leaves the reserved state (delete,
release, bury, completion, failure, TTR expiry, the owner's connection closing). Tokens are
UUIDv4-shaped strings, unique within the process and not predictable from another process's;
the engine numbers leases and makes a token's string only when it is asked for (token_str).

How a presented token is treated depends on the reservation's mode (core.model):

| mode | ACK / FAIL / complete with no token | with the right token | with another token |
| --- | --- | --- | --- |
| TOKEN_CHECKED (default: beanstalk, workq, bunqueue) | accepted | accepted | refused |
| TOKEN_REQUIRED (bunqueue PULL with `owner`: a lock) | refused | accepted | refused |
| TOKEN_IGNORED (bunqueue PULL without `owner`) | accepted | accepted | accepted |

Renewing (touch, JobHeartbeat, ExtendLock) accepts no token in every mode, as bunqueue 2.9.5
does (a heartbeat without a token renews the lock).

Restart (docs/architecture.md, "Leases"): a TOKEN_REQUIRED lease is stored with the job row
(token, owner, deadline) in the group commit after the reservation, and a restart keeps it:
the job is still reserved, the token still valid, until its deadline passes as before the
restart. That is bunqueue 2.9.5's rule when its leases live in the database (its PostgreSQL
mode keeps lease token and lease end in the job row, and a restarted broker honours them);
bunqueue's embedded SQLite mode instead returns active jobs to waiting at start (counting an
attempt), and beanstalkd's binlog returns reserved jobs to ready. Other leases are not kept
across a restart: the job is ready again (beanstalk: the reserving connection is gone; workq:
attempts are counted, the lease starts over, as jobgate has always done).
"""
from __future__ import annotations

import os

from .model import TOKEN_IGNORED, TOKEN_REQUIRED

#: check() results
LEASE_OK = 0
NOT_ACTIVE = 1
TOKEN_MISSING = 2
TOKEN_MISMATCH = 3

_MASK = (1 << 122) - 1
_STEP = 0x9E3779B97F4A7C15F39CC0605CEDC835   # odd: n -> n * _STEP is a bijection mod 2^122
_SALT = int.from_bytes(os.urandom(16), "big") & _MASK   # per process


def token_str(lease) -> str:
    """The token of a lease: `lease` is the engine's lease number (an int: the string is made
    only when someone asks for it) or a token restored from storage (a str)."""
    if lease.__class__ is str:
        return lease
    x = ((lease * _STEP) ^ _SALT) & _MASK
    return "%08x-%04x-4%03x-%04x-%012x" % (
        x >> 90, (x >> 74) & 0xFFFF, (x >> 62) & 0xFFF, 0x8000 | ((x >> 48) & 0x3FFF),
        x & 0xFFFFFFFFFFFF)


def check(job, token) -> int:
    """Whether `token` (str or None) may finish or move `job` (a core.records.Job) now:
    LEASE_OK, NOT_ACTIVE (not reserved), TOKEN_MISSING (its lock needs one) or TOKEN_MISMATCH."""
    if job.state != "reserved":
        return NOT_ACTIVE
    mode = job.lease_mode
    if mode == TOKEN_IGNORED:
        return LEASE_OK
    if token is None:
        return TOKEN_MISSING if mode == TOKEN_REQUIRED else LEASE_OK
    return LEASE_OK if token == token_str(job.token) else TOKEN_MISMATCH


def renewable(job, token) -> bool:
    """Whether `token` (str or None) may renew the lease of `job`: it is reserved, and a
    presented token matches (no token, or a TOKEN_IGNORED lease, always may)."""
    if job.state != "reserved":
        return False
    return token is None or job.lease_mode == TOKEN_IGNORED or token == token_str(job.token)
