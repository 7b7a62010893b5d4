"""Shared helpers of the beanstalk parser tests (test_beanstalk_golden.py,
test_beanstalk_parser.py): the sans-IO connection (a Parser feeding a Session) and its reply
markers.
"""
from __future__ import annotations

from protocols.beanstalk.parser import Parser
from protocols.beanstalk.session import QUIT, WAIT, Session
from protocols.beanstalk.stats import ServerInfo


QUIT_MARK = "<QUIT: connection closed>"
WAIT_MARK = "<WAIT: reserve blocks>"


# ========================================================================= replay
class Conn:
    """One client connection, sans-IO: a Parser feeding a Session; replies are collected."""

    def __init__(self, info: ServerInfo, max_job_size: int) -> None:
        self.parser = Parser(max_job_size=max_job_size)
        self.session = Session(info)
        self.closed = False

    def feed(self, data: bytes) -> list:
        """Feed `data` in one call; run every command; return the replies (QUIT ends it)."""
        assert not self.closed, "feeding a closed connection"
        out = []
        for cmd in self.parser.feed(data):
            r = self.session.handle(cmd)
            if r is QUIT:
                out.append(QUIT_MARK)
                self.close()
                break
            if r != b"":   # b"": no reply of its own (a too-big put answers after the skip)
                out.append(WAIT_MARK if r is WAIT else r)
        return out

    def feed_bytewise(self, data: bytes) -> list:
        """Feed `data` one byte per call; return all replies in order."""
        out = []
        for i in range(len(data)):
            if self.closed:
                break
            out += self.feed(data[i:i + 1])
        return out

    def close(self) -> None:
        """End the connection as the gateway does (Session.close releases reservations)."""
        if not self.closed:
            self.closed = True
            self.session.close()
