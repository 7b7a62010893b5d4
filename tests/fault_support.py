"""Real faults for the storage-fault tests (tests/test_storage_faults.py): a TCP proxy in front of
PostgreSQL that can cut the database off (a partition or an outage, as a client sees it) or
lose one COMMIT's answer after PostgreSQL executed it (the commit whose outcome is unknown), and
a small tmpfs that can be filled up (SQLite disk full).

Everything talks to 127.0.0.1 only; the proxy's threads end when it is closed.
"""
from __future__ import annotations

import os
import socket
import subprocess
import threading


class PgProxy:
    """Forward 127.0.0.1:`port` to PostgreSQL at `target` (host, port), byte for byte.

    `cut()`: close every proxied connection and refuse new ones (connect, then closed at once)
    until `heal()`; `partition()`: the same, except that PostgreSQL's side stays open. `lose_commit_answer()`: arm a one-shot fault: the next COMMIT sent on a
    connection whose transaction inserted job rows is forwarded, PostgreSQL's answer to it is
    read and dropped, and both sides are closed, so the client cannot know whether it committed.
    `lost_commits` counts the answers dropped.
    """

    def __init__(self, target=("127.0.0.1", 5432)) -> None:
        self.target = target
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.down = False
        self.armed = False
        self.lost_commits = 0
        self._pairs: list = []
        self._zombies: list = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, database: str) -> str:
        """A SQLAlchemy URL to `database` through the proxy."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            if self.down:
                c.close()
                continue
            try:
                s = socket.create_connection(self.target)
            except OSError:
                c.close()
                continue
            pair = {"c": c, "s": s, "insert": False, "commit_sent": False}
            with self._lock:
                self._pairs.append(pair)
            threading.Thread(target=self._pump_up, args=(pair,), daemon=True).start()
            threading.Thread(target=self._pump_down, args=(pair,), daemon=True).start()

    def _pump_up(self, pair) -> None:
        """client -> PostgreSQL; notes an INSERT INTO jobs and a COMMIT after it."""
        c, s = pair["c"], pair["s"]
        try:
            while True:
                d = c.recv(65536)
                if not d:
                    break
                if b"INSERT INTO jobs" in d:
                    pair["insert"] = True
                if self.armed and pair["insert"] and b"COMMIT" in d:
                    self.armed = False
                    pair["commit_sent"] = True
                s.sendall(d)
                if b"COMMIT" in d:
                    pair["insert"] = False
        except OSError:
            pass
        self._close(pair)

    def _pump_down(self, pair) -> None:
        """PostgreSQL -> client; drops the answer to an armed COMMIT and closes both sides."""
        c, s = pair["c"], pair["s"]
        try:
            while True:
                d = s.recv(65536)
                if not d:
                    break
                if pair["commit_sent"]:
                    # PostgreSQL answered the COMMIT (it is done); the client never hears it
                    self.lost_commits += 1
                    break
                c.sendall(d)
        except OSError:
            pass
        self._close(pair)

    def _close(self, pair) -> None:
        for k in (("c",) if pair.get("zombie") else ("c", "s")):
            try:
                pair[k].shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                pair[k].close()
            except OSError:
                pass
        with self._lock:
            if pair in self._pairs:
                self._pairs.remove(pair)

    def cut(self) -> None:
        """PostgreSQL becomes unreachable: every connection is closed, new ones refused."""
        self.down = True
        with self._lock:
            pairs = list(self._pairs)
        for p in pairs:
            self._close(p)

    def partition(self) -> None:
        """A network partition PostgreSQL does not notice: jobgate's side of every connection
        is closed and new ones refused, but the sessions stay open on PostgreSQL's side (with
        their locks), as when packets stop flowing and no FIN arrives. `close()` ends them."""
        self.down = True
        with self._lock:
            pairs = list(self._pairs)
        for p in pairs:
            p["zombie"] = True
            self._zombies.append(p["s"])
            self._close(p)

    def heal(self) -> None:
        """PostgreSQL is reachable again."""
        self.down = False

    def lose_commit_answer(self) -> None:
        """Arm the one-shot lost COMMIT answer (see the class docstring)."""
        self.armed = True

    def close(self) -> None:
        self._closed = True
        self.lsock.close()
        self.cut()
        for z in self._zombies:
            z.close()


class SmallDisk:
    """A tmpfs of `size` bytes mounted at `path` (root only; `mount` raises otherwise).
    `fill(leave)`: a filler file that leaves `leave` bytes free; `free()`: remove it."""

    def __init__(self, path: str, size: int) -> None:
        self.path = path
        os.makedirs(path, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path],
                       check=True, capture_output=True)
        self.filler = os.path.join(path, "filler")

    def available(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self, leave: int) -> None:
        n = max(0, self.available() - leave)
        with open(self.filler, "ab") as f:
            f.write(b"\0" * n)

    def free(self) -> None:
        os.unlink(self.filler)

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", self.path], capture_output=True)


def can_mount() -> str | None:
    """None when this process may mount a tmpfs; else the reason it cannot."""
    if os.geteuid() != 0:
        return "mounting a small tmpfs needs root (CI runs as root)"
    return None
