"""Listening sockets, bound before anything heavy is imported (issue 14: start-up in
milliseconds). Standard library only: the command-line entry points call `bind()` right after
parsing their options, so a client can connect while the server still imports and recovers;
its connection waits in the kernel's backlog and its commands are answered once the server
serves (gateway.server.Runtime.run takes the sockets). Nothing is refused or lost meanwhile.
"""
from __future__ import annotations

import os
import socket

#: listen() backlog: connections that may wait (completed by the kernel) before the server
#: accepts them; the kernel caps it at net.core.somaxconn.
BACKLOG = 4096


def bind_one(host: str | None, port: int = 0, unix: str | None = None) -> socket.socket:
    """A listening socket: TCP on `host`:`port` (SO_REUSEADDR, IPv6 when `host` is an IPv6
    address) or a unix socket at path `unix` (a stale file there is removed). Raises OSError
    (address in use, permission)."""
    if unix:
        try:
            os.unlink(unix)
        except FileNotFoundError:
            pass
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(unix)
            s.listen(BACKLOG)
        except BaseException:
            s.close()
            raise
        return s
    info = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                              flags=socket.AI_PASSIVE)
    family, kind, proto, _, addr = info[0]
    s = socket.socket(family, kind, proto)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.bind(addr)
        s.listen(BACKLOG)
    except BaseException:
        s.close()
        raise
    return s


def bind(listeners) -> list:
    """One listening socket per gateway.config.Listener (same order); closes what it opened
    and re-raises when one fails."""
    out = []
    try:
        for lst in listeners:
            out.append(bind_one(lst.host, lst.port, lst.unix))
    except BaseException:
        for s in out:
            s.close()
        raise
    return out


#: the first file descriptor systemd passes (sd_listen_fds(3): SD_LISTEN_FDS_START)
LISTEN_FDS_START = 3


def inherited_fds(environ=None, pid: int | None = None) -> list[int]:
    """File descriptors passed by systemd socket activation (sd_listen_fds(3)): with
    `$LISTEN_PID` equal to this process (`pid`, default os.getpid()) and `$LISTEN_FDS` = n,
    the descriptors 3 .. 3+n-1; else []. The variables are removed from `environ` (default
    os.environ: children such as the webhook worker must not take the sockets for theirs) and
    the descriptors made close-on-exec, as sd_listen_fds(1) does. Malformed values: []."""
    environ = os.environ if environ is None else environ
    pid = os.getpid() if pid is None else pid
    owner, count = environ.get("LISTEN_PID", ""), environ.get("LISTEN_FDS", "")
    for k in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        environ.pop(k, None)
    if not (owner.isdigit() and int(owner) == pid and count.isdigit()):
        return []
    fds = list(range(LISTEN_FDS_START, LISTEN_FDS_START + int(count)))
    for fd in fds:
        try:
            os.set_inheritable(fd, False)
        except OSError:
            pass        # not open: adopt() says so
    return fds


def adopt(fd: int) -> socket.socket:
    """The listening socket on inherited descriptor `fd` (TCP or unix stream). Raises
    ValueError when it is not one (as beanstalkd, which refuses to start then)."""
    try:
        s = socket.socket(fileno=fd)
    except OSError as e:
        raise ValueError(f"inherited fd {fd}: {e.strerror or e}") from None
    listening = (s.type == socket.SOCK_STREAM
                 and s.family in (socket.AF_INET, socket.AF_INET6, socket.AF_UNIX)
                 and s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
    if not listening:
        s.detach()      # not ours to close
        raise ValueError(f"inherited fd {fd} is not a TCP or unix listening socket")
    return s


_stop_requested: list = []


def catch_stop_signals() -> None:
    """From just before bind until the server's own signal handling starts, remember a SIGTERM / SIGINT
    instead of dying on it: the server then stops cleanly as soon as it runs (exit status 0,
    as for a signal while serving)."""
    import signal

    def note(signum, _frame):
        _stop_requested.append(signum)
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, note)


def stop_requested():
    """The first stop signal caught by catch_stop_signals() (a signal number), or None."""
    return _stop_requested[0] if _stop_requested else None
