"""systemd's service notification protocol (sd_notify), spoken directly: no dependency.

A service of `Type=notify` tells its manager how it is doing in datagrams of newline-separated
`KEY=VALUE` lines sent to the AF_UNIX datagram socket named by `$NOTIFY_SOCKET` (a path, or
`@name` for the abstract namespace). Source: sd_notify(3) and sd_watchdog_enabled(3) of
systemd, and systemd.service(5) (`Type=notify`, `NotifyAccess=`, `WatchdogSec=`).

jobgate sends (gateway/server.py):
- `STATUS=recovering ...` once the listeners are bound, before the database is opened;
- `READY=1` with `STATUS=serving ...` once recovery is done and every listener accepts;
- `WATCHDOG=1` every WATCHDOG_USEC/2 from the event loop while it serves, when the manager
  asked for it (`$WATCHDOG_USEC` set and `$WATCHDOG_PID` absent or this process's id): a loop
  stalled for longer than `WatchdogSec=` misses its pings and systemd acts on the unit;
- `STATUS=draining ...` after SIGUSR1;
- `STOPPING=1` with `STATUS=stopping ...` when it stops.

Without `$NOTIFY_SOCKET` (or with one that is not an absolute path or `@name`: sd_notify
ignores those too, and `vsock:` addresses are not supported) nothing is sent. Sending never
blocks the event loop and never fails the server: a datagram the socket cannot take now is
dropped, an error is logged once.
"""
from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger("jobgate")


def notify_address(value: str | None) -> str | None:
    """The AF_UNIX address of a `$NOTIFY_SOCKET` value: an absolute path as is, `@name` as
    "\\0name" (abstract namespace); None for unset, empty or any other form (a relative path,
    `vsock:...`)."""
    if not value:
        return None
    if value.startswith("/"):
        return value
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    return None


def watchdog_interval(environ, pid: int) -> float | None:
    """Seconds between two `WATCHDOG=1` pings: half of `$WATCHDOG_USEC` (µs), as
    sd_watchdog_enabled(3) recommends; None when the manager did not ask this process for
    them: WATCHDOG_USEC unset, not a positive integer, or `$WATCHDOG_PID` set to another
    process (or to something that is not a process id)."""
    usec = environ.get("WATCHDOG_USEC", "")
    if not usec.isdigit() or int(usec) <= 0:
        return None
    owner = environ.get("WATCHDOG_PID")
    if owner is not None and (not owner.isdigit() or int(owner) != pid):
        return None
    return int(usec) / 2_000_000


class Notifier:
    """Sends notifications to one address (see notify_address). `enabled`: an address is set.
    `watchdog_s`: the ping interval in seconds, or None (see watchdog_interval).

    `send(*lines)` sends one datagram of `KEY=VALUE` lines; True when the kernel took it.
    Non-blocking: a full receive queue drops the datagram (EAGAIN); errors are logged once."""

    def __init__(self, address: str | None, watchdog_s: float | None = None) -> None:
        self.address = address
        self.watchdog_s = watchdog_s if address else None
        self.sock = None
        self._failed = False
        if address:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self.sock.setblocking(False)

    @classmethod
    def from_env(cls, environ=None, pid: int | None = None) -> "Notifier":
        """A Notifier for `$NOTIFY_SOCKET` and `$WATCHDOG_USEC` / `$WATCHDOG_PID` of `environ`
        (default os.environ) as seen by process `pid` (default this one)."""
        environ = os.environ if environ is None else environ
        pid = os.getpid() if pid is None else pid
        address = notify_address(environ.get("NOTIFY_SOCKET"))
        return cls(address, watchdog_interval(environ, pid) if address else None)

    @property
    def enabled(self) -> bool:
        return self.sock is not None

    def send(self, *lines: str) -> bool:
        if self.sock is None:
            return False
        data = "\n".join(line.replace("\n", " ") for line in lines).encode("utf-8", "replace")
        try:
            self.sock.sendto(data, self.address)
            return True
        except BlockingIOError:
            return False      # the manager is not reading; the next status supersedes this one
        except OSError as e:  # no such socket, permission, a path over 107 bytes
            if not self._failed:
                self._failed = True
                log.warning("cannot notify the service manager",
                            extra={"fields": {"notify_socket": self.address.replace("\0", "@"),
                                              "cause": str(e)}})
            return False

    def status(self, text: str) -> bool:
        """`STATUS=text`: one line shown by `systemctl status`."""
        return self.send(f"STATUS={text}")

    def ready(self, text: str) -> bool:
        """`READY=1` and `STATUS=text`: start-up is complete."""
        return self.send("READY=1", f"STATUS={text}")

    def stopping(self, text: str = "stopping") -> bool:
        """`STOPPING=1` and `STATUS=text`: the service is shutting down."""
        return self.send("STOPPING=1", f"STATUS={text}")

    async def watchdog(self) -> None:
        """Ping `WATCHDOG=1` every `watchdog_s` seconds until cancelled (run it in the event
        loop that must stay responsive); returns at once when no watchdog was asked for."""
        import anyio
        if self.watchdog_s is None:
            return
        while True:
            self.send("WATCHDOG=1")
            await anyio.sleep(self.watchdog_s)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
