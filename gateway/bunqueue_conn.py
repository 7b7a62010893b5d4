"""One bunqueue connection: frames in, replies out in completion order (bunqueue-tcp-protocol.txt
"Pipelining"; DESIGN.md "Networking").

Per read: every complete frame is run; the replies that are ready go out with one send, after
the commit they depend on (durability: commit). Commands that wait (PULL with a timeout,
WaitJob) answer later, in completion order, through a second task that also sends event frames.
At most MAX_IN_FLIGHT commands of one connection wait at once; further frames are read only when
one of them has answered (backpressure). A frame over the size limit gets one error frame, then
the connection closes (reference behaviour). Closing returns the connection's active jobs to
waiting without counting an attempt.
"""
from __future__ import annotations

import anyio

from protocols.bunqueue import FrameReader, Session
from protocols.bunqueue.codec import TooLarge, UNDEFINED, frame, pack

from .textconn import CLOSED

#: Commands of one connection that may wait at the same time (the reference's semaphore).
MAX_IN_FLIGHT = 50


async def serve(stream, runtime) -> None:
    """Run one bunqueue connection on `stream` (an anyio ByteStream) until it closes."""
    if runtime.connections >= runtime.config.max_connections:
        await stream.aclose()
        return
    runtime.connections += 1
    lock = anyio.Lock()
    late: list = []
    st = {"commit": False, "wake": anyio.Event(), "slot": None}

    def deliver(data: bytes, need_commit: bool) -> None:
        late.append(data)
        if need_commit:
            st["commit"] = True
        st["wake"].set()
        if st["slot"] is not None:   # a waiting command answered: a slot is free
            st["slot"].set()

    sess = Session(runtime.bunqueue_info, deliver)
    reader = FrameReader(runtime.config.bunqueue_max_frame)
    durable = runtime.durable

    async def send(out: list, commit: bool) -> None:
        if commit:
            await durable()
        async with lock:
            await stream.send(b"".join(out) if len(out) > 1 else out[0])

    async def flusher() -> None:
        while True:
            await st["wake"].wait()
            st["wake"] = anyio.Event()
            if late:
                out = late[:]
                del late[:]
                commit, st["commit"] = st["commit"], False
                await send(out, commit)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(flusher)
            try:
                await _read_loop(stream, sess, reader, send, st)
            finally:
                tg.cancel_scope.cancel()
    except CLOSED:
        pass
    finally:
        sess.close()
        runtime.connections -= 1
        with anyio.CancelScope(shield=True):
            try:
                await stream.aclose()
            except CLOSED:
                pass


async def _read_loop(stream, sess: Session, reader: FrameReader, send, st: dict) -> None:
    while True:
        try:
            data = await stream.receive(262144)
        except CLOSED:
            return
        out: list = []
        for body in reader.feed(data):
            if body.__class__ is TooLarge:
                out.append(frame(pack({"ok": False, "error": body.error, "reqId": UNDEFINED})))
                await send(out, sess.need_commit)
                return
            r = sess.handle(body)
            if r is not None:
                out.append(r)
            while len(sess.waits) >= MAX_IN_FLIGHT:   # backpressure: wait for a slot
                if out:
                    commit, sess.need_commit = sess.need_commit, False
                    await send(out, commit)
                    out = []
                st["slot"] = anyio.Event()
                if len(sess.waits) >= MAX_IN_FLIGHT:
                    await st["slot"].wait()
                st["slot"] = None
        if out:
            commit, sess.need_commit = sess.need_commit, False
            await send(out, commit)
