"""Shared constants of the beanstalk load benchmarks: the job every workload puts, reply-length
bounds, workload names, paths, and BenchError. Standard library only."""
from __future__ import annotations

import os

HOST = "127.0.0.1"
BODY_SIZE = 100
BODY = (b"0123456789" * ((BODY_SIZE + 9) // 10))[:BODY_SIZE]
PUT_PRI, PUT_DELAY, PUT_TTR = 1024, 0, 60
PUT_ONE = b"put %d %d %d %d\r\n" % (PUT_PRI, PUT_DELAY, PUT_TTR, BODY_SIZE) + BODY + b"\r\n"
RESERVE_ONE = b"reserve-with-timeout 0\r\n"
CRLF = b"\r\n"
# Lower bounds on reply lengths (bytes), used to wait for a whole batch of replies in few recvs.
# Any reply to put is >= 10 ("BURIED 1\r\n", "DRAINING\r\n"); to delete >= 9 ("DELETED\r\n");
# to reserve-with-timeout >= 11 ("TIMED_OUT\r\n"), and a RESERVED of a BODY_SIZE job is
# >= len("RESERVED 1 100\r\n") + BODY_SIZE + 2.
MIN_PUT_REPLY = 10
# How the client collects a pipelined batch's replies:
#   plain:   recv whatever has arrived. beanstalkd writes each reply with its own write() on a
#            TCP_NODELAY socket, so this costs about one wakeup + recv per reply.
#   waitall: recv(lower bound of what the batch still owes, MSG_WAITALL): far less client CPU,
#            but beanstalkd measured slower with it on this machine (see README).
# (SO_RCVLOWAT was tried and stalls for 40-200 ms with beanstalkd's one-segment-per-reply
# stream, so it is not offered.)
RECV_MODES = ("plain", "waitall")
RBUF_SIZE = 262144
MIN_DELETE_REPLY = 9
MIN_RESERVE_REPLY = 11
MIN_RESERVED_REPLY = len(b"RESERVED 1 %d\r\n" % BODY_SIZE) + BODY_SIZE + 2

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCH_DIR)
SCRIPT = os.path.join(BENCH_DIR, "beanstalk_load.py")   # the entry point ({SCRIPT} in commands)

WORKLOADS = ("put", "reserve-delete", "put-reserve-delete")
MODES = ("pipelined", "unpipelined")
COMMANDS_PER_JOB = {"put": 1, "reserve-delete": 2, "put-reserve-delete": 3}


class BenchError(Exception):
    pass
