"""The I/O loop shared by the line-based dialects (beanstalk, workq): read a chunk, feed the
parser, run every complete command, write all replies with one send (pipelining costs no extra
syscalls). Replies to mutating commands are sent only after their batch committed (durability:
commit).

A command that must wait (reserve, lease, result, run) keeps the socket watched: end of input
(client half-closed or gone) withdraws the wait, which answers the dialect's timeout reply;
bytes that arrive meanwhile are kept (bounded) and their commands answered after it, then, after
end of input, the connection closes.

The session object provides: handle(item) -> bytes | WAIT | QUIT, has_reply(), take_reply(),
cancel_wait() -> bytes | None, close(), `on_wake` and `need_commit` attributes.
"""
from __future__ import annotations

from collections import deque

import anyio

CLOSED = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError,
          ConnectionError, OSError)

#: While a command waits, at most this many bytes of the client's further input are held
#: (then reading pauses until the wait is answered: backpressure, not unbounded memory).
WAIT_STASH_MAX = 1 << 20


async def _wait_reply(sess, stream):
    """Wait for a pending command's answer while still watching the socket.

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
        except CLOSED:
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


async def _send(sess, stream, out: list, durable) -> None:
    """Send the replies in `out` with one write, after the commit they depend on."""
    if not out:
        return
    if sess.need_commit:
        sess.need_commit = False
        await durable()
    await stream.send(b"".join(out) if len(out) > 1 else out[0])


async def serve_session(stream, sess, parser, durable, wait, quit, on_end=None) -> None:
    """Run `sess` over `stream` until the client quits or goes away; then call `on_end()`
    (if given), `sess.close()` and close the stream. `wait` / `quit` are the session module's
    WAIT / QUIT markers; `durable` is awaited before replies that need a commit."""
    eof = False
    try:
        while not eof:
            try:
                data = await stream.receive(65536)
            except CLOSED:
                return
            cmds = deque(parser.feed(data))
            out = []
            while cmds:
                r = sess.handle(cmds.popleft())
                if r.__class__ is bytes:
                    out.append(r)
                    continue
                if r is quit:
                    await _send(sess, stream, out, durable)
                    return
                assert r is wait
                if eof:   # input already ended: the command cannot wait
                    r = sess.cancel_wait()
                    out.append(r if r is not None else sess.take_reply())
                    continue
                await _send(sess, stream, out, durable)
                out = []
                reply, extra, eof = await _wait_reply(sess, stream)
                out.append(reply)
                if extra:
                    cmds.extend(parser.feed(extra))
            await _send(sess, stream, out, durable)
    except CLOSED:
        return
    finally:
        if on_end is not None:
            on_end()
        sess.close()
        with anyio.CancelScope(shield=True):
            try:
                await stream.aclose()
            except CLOSED:
                pass
