"""Fan-out (issue 5 item 4): each row of a DataFrame becomes exactly one job through jobgate's own
wire protocol (bunqueue PUSHB), even when a Spark task is retried or a connection drops.

Real server (bunqueue + beanstalk listeners on 127.0.0.1), real local Spark, jobs counted by
greenstalk's stats-tube.
"""
from __future__ import annotations

import json
import os
import socket
import struct
import threading

import greenstalk
import msgpack
import pytest

from pipeline import enqueue
from pipeline.fanout import FanoutError, row_id
from pipeline.wire import PushClient

from .support import free_port


def jobs_in(port: int, tube: str) -> int:
    """Jobs in `tube` (ready, delayed, reserved or buried), by beanstalk stats-tube."""
    g = greenstalk.Client(("127.0.0.1", port))
    try:
        st = g.stats_tube(tube)
    except greenstalk.NotFoundError:
        return 0
    finally:
        g.close()
    return sum(int(st[k]) for k in ("current-jobs-ready", "current-jobs-delayed",
                                    "current-jobs-reserved", "current-jobs-buried"))


def _get_job(port: int, uid: str):
    """bunqueue GetJob over a raw socket: the job map or None (used inside a Spark task)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        body = msgpack.packb({"cmd": "GetJob", "id": uid, "reqId": "1"})
        s.sendall(struct.pack(">I", len(body)) + body)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
            buf += s.recv(65536)
        return msgpack.unpackb(buf[4:], raw=False).get("job")


def test_10000_rows_with_a_retried_task_make_exactly_10000_jobs(tmp_path, servers, spark):
    s = servers(f"sqlite:///{tmp_path}/j.db", bunqueue=True)
    marker = str(tmp_path / "failed-once")
    port = s.bunqueue_port
    first_of_partition_2 = row_id("", "fan", "2:0")

    def boom(row):
        """Fails the first attempt of partition 2 at its last row, once its first row's job
        exists on the server: that attempt's pushes are in before Spark retries it. (An RDD
        map runs in the same Python worker as the fan-out, row by row as it pushes.)"""
        from pyspark import TaskContext
        from pyspark.sql import Row
        if row.id == 7499 and TaskContext.get().attemptNumber() == 0:
            import time
            for _ in range(200):
                if _get_job(port, first_of_partition_2) is not None:
                    break
                time.sleep(0.05)
            open(marker, "w").write(str(_get_job(port, first_of_partition_2) is not None))
            raise RuntimeError("injected task failure")
        return Row(n=row.id)

    rows = spark.range(0, 10_000, 1, 4).rdd.map(boom)
    r = enqueue(rows, "fan", f"127.0.0.1:{port}", batch=100)
    assert open(marker).read() == "True"   # the failed attempt had pushed rows already
    assert (r.rows, r.pushed, r.errors) == (10_000, 10_000, 0)
    assert jobs_in(s.port, "fan") == 10_000
    # each row is one job, with the row as its data
    g = greenstalk.Client(("127.0.0.1", s.port), watch="fan")
    seen = set()
    for _ in range(10_000):
        j = g.reserve(timeout=5)
        seen.add(json.loads(j.body)["n"])
        g.delete(j)
    g.close()
    assert seen == set(range(10_000))


def test_rerun_adds_nothing_and_a_new_run_id_adds_again(tmp_path, servers, spark):
    s = servers(f"sqlite:///{tmp_path}/j.db", bunqueue=True)
    df = spark.createDataFrame([(i, f"file-{i}.png") for i in range(300)], "k long, path string")
    addr = f"127.0.0.1:{s.bunqueue_port}"
    enqueue(df, "img", addr, id_column="k", body_column="path")
    enqueue(df.repartition(3), "img", addr, id_column="k", body_column="path")  # same keys
    assert jobs_in(s.port, "img") == 300
    enqueue(df, "img", addr, id_column="k", body_column="path", run_id="second")
    assert jobs_in(s.port, "img") == 600
    g = greenstalk.Client(("127.0.0.1", s.port), watch="img")
    assert g.reserve(timeout=5).body.startswith("file-")
    g.close()


def test_refused_rows_are_counted_and_raised(tmp_path, servers, spark):
    s = servers(f"sqlite:///{tmp_path}/j.db", bunqueue=True)
    df = spark.range(0, 250, 1, 2)
    with pytest.raises(FanoutError) as e:
        enqueue(df, "bad", f"127.0.0.1:{s.bunqueue_port}", options={"priority": "high"},
                batch=100)
    assert (e.value.result.rows, e.value.result.errors, e.value.result.pushed) == (250, 250, 0)
    assert "250 of 250 rows were refused" in str(e.value) and e.value.result.samples
    assert jobs_in(s.port, "bad") == 0


class FlakyProxy:
    """A TCP proxy on 127.0.0.1 to `port` that cuts its first connection after forwarding
    `cut_after` bytes from the client; later connections pass everything."""

    def __init__(self, port: int, cut_after: int) -> None:
        self.port, self.cut_after, self.conns = free_port(), cut_after, 0
        self.lsock = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(port,), daemon=True).start()

    def _accept(self, upstream: int) -> None:
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            self.conns += 1
            u = socket.create_connection(("127.0.0.1", upstream))
            limit = self.cut_after if self.conns == 1 else None
            threading.Thread(target=self._pump, args=(c, u, limit), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, None), daemon=True).start()

    @staticmethod
    def _pump(a, b, limit) -> None:
        sent = 0
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                if limit is not None and sent + len(data) > limit:
                    b.sendall(data[:limit - sent])
                    break
                b.sendall(data)
                sent += len(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.lsock.close()


def test_a_lost_connection_is_resumed_without_losing_or_doubling_jobs(tmp_path, servers):
    s = servers(f"sqlite:///{tmp_path}/j.db", bunqueue=True)
    proxy = FlakyProxy(s.bunqueue_port, cut_after=150_000)
    c = PushClient("127.0.0.1", proxy.port, window=4)
    for b in range(40):
        c.push("flaky", [{"data": "x" * 100, "jobId": row_id("", "flaky", f"{b}:{i}")}
                         for i in range(100)])
    c.flush()
    c.close()
    proxy.close()
    assert c.reconnects == 1 and proxy.conns == 2
    assert (c.pushed, c.errors) == (4000, 0)
    assert jobs_in(s.port, "flaky") == 4000


def test_the_server_gone_for_good_is_an_error(tmp_path):
    c = PushClient("127.0.0.1", free_port(), retries=2)
    with pytest.raises(Exception) as e:
        c.push("q", [{"data": "x", "jobId": "a"}])
    assert "unreachable after 2 attempts" in str(e.value)
    assert os.path.basename(str(tmp_path))   # (the tmp dir fixture keeps the test isolated)
