"""The I/O loop of one beanstalk connection: read a chunk, feed the parser, run every complete
command, write all replies with one send (pipelining costs no extra syscalls). Replies to
mutating commands are sent only after their batch committed (durability: commit).

A reserve that must wait keeps reading the socket: end of input (client half-closed or gone)
withdraws the reserve and answers TIMED_OUT (beanstalk spec, "reserve"); bytes that arrive are
kept and parsed after the reserve is answered.
"""
from __future__ import annotations

import logging
from collections import deque

import anyio

from protocols.beanstalk import Parser, Session
from protocols.beanstalk.session import QUIT, WAIT

log = logging.getLogger("jobgate.beanstalk")

_CLOSED = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError,
           ConnectionError, OSError)


async def _wait_reserve(sess: Session, stream):
    """Wait for a pending reserve. Returns (reply bytes, extra bytes read, eof seen)."""
    ev = anyio.Event()
    sess.on_wake = ev.set
    st = {"data": b"", "eof": False, "reply": None}

    async def reader():
        try:
            st["data"] = await stream.receive(65536)
        except _CLOSED:
            st["eof"] = True
            r = sess.cancel_wait()
            if r is not None:
                st["reply"] = r
                ev.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        await ev.wait()
        tg.cancel_scope.cancel()
    sess.on_wake = None
    reply = st["reply"] if st["reply"] is not None else sess.take_reply()
    return reply, st["data"], st["eof"]


async def _send(sess: Session, stream, out: list, durable) -> None:
    """Send the replies in `out` with one write, after the commit they depend on."""
    if not out:
        return
    if sess.need_commit:
        sess.need_commit = False
        await durable()
    await stream.send(b"".join(out) if len(out) > 1 else out[0])


async def serve(stream, runtime) -> None:
    """Run one beanstalk connection on `stream` (an anyio ByteStream) until it closes."""
    info = runtime.beanstalk_info
    cfg = runtime.config
    if info.connections >= cfg.max_connections:
        await stream.aclose()
        return
    sess = Session(info)
    parser = Parser(cfg.beanstalk_max_job_size, cfg.beanstalk_line_max)
    durable = runtime.durable
    try:
        while True:
            try:
                data = await stream.receive(65536)
            except _CLOSED:
                return
            cmds = deque(parser.feed(data))
            out = []
            while cmds:
                r = sess.handle(cmds.popleft())
                if r.__class__ is bytes:
                    out.append(r)
                    continue
                if r is QUIT:
                    await _send(sess, stream, out, durable)
                    return
                # WAIT: answer what came before, then wait for the engine (or EOF)
                await _send(sess, stream, out, durable)
                out = []
                reply, extra, eof = await _wait_reserve(sess, stream)
                out.append(reply)
                if eof:
                    await _send(sess, stream, out, durable)
                    return
                if extra:
                    cmds.extend(parser.feed(extra))
            await _send(sess, stream, out, durable)
    except _CLOSED:
        return
    finally:
        sess.close()
        with anyio.CancelScope(shield=True):
            try:
                await stream.aclose()
            except _CLOSED:
                pass
