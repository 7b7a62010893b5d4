"""The I/O loop of one beanstalk connection: read a chunk, feed the parser, run every complete
command, write all replies with one send (pipelining costs no extra syscalls). Replies to
mutating commands are sent only after their batch committed (durability: commit).

A reserve that must wait keeps reading the socket: end of input (client half-closed or gone)
withdraws the reserve and answers TIMED_OUT (beanstalk spec, "reserve"); bytes that arrive are
kept (bounded) and their commands answered after the reserve, then, after end of input, the
connection closes.
"""
from __future__ import annotations

import logging
from collections import deque

import anyio

from protocols.beanstalk import Parser, Session
from protocols.beanstalk.session import QUIT

log = logging.getLogger("jobgate.beanstalk")

_CLOSED = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError,
           ConnectionError, OSError)


#: While a reserve waits, at most this many bytes of the client's further input are held
#: (then reading pauses until the reserve is answered: backpressure, not unbounded memory).
WAIT_STASH_MAX = 1 << 20


async def _wait_reserve(sess: Session, stream):
    """Wait for a pending reserve while still watching the socket.

    Bytes that arrive are stashed (up to WAIT_STASH_MAX) for after the reply; end of input
    (half-close or close) withdraws the reserve, which answers TIMED_OUT.
    Returns (reply bytes, stashed bytes, eof seen).
    """
    if sess.has_reply():   # answered while earlier replies were being sent
        return sess.take_reply(), b"", False
    ev = anyio.Event()
    sess.on_wake = ev.set
    st = {"data": [], "size": 0, "eof": False, "reply": None}

    async def reader():
        try:
            while st["size"] < WAIT_STASH_MAX:
                d = await stream.receive(65536)
                st["data"].append(d)
                st["size"] += len(d)
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
    return reply, b"".join(st["data"]), st["eof"]


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
    eof = False
    try:
        while not eof:
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
                if eof:   # input already ended: a reserve cannot wait (beanstalk: TIMED_OUT)
                    r = sess.cancel_wait()
                    out.append(r if r is not None else sess.take_reply())
                    continue
                await _send(sess, stream, out, durable)
                out = []
                reply, extra, eof = await _wait_reserve(sess, stream)
                out.append(reply)
                if extra:
                    cmds.extend(parser.feed(extra))
            await _send(sess, stream, out, durable)
    except _CLOSED:
        return
    finally:
        if parser.in_body():
            sess.unfinished_put()
        sess.close()
        with anyio.CancelScope(shield=True):
            try:
                await stream.aclose()
            except _CLOSED:
                pass
