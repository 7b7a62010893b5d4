"""The workq dialect: sans-IO parser and session (workq-protocol.txt, docs/workq.md)."""
from .parser import CLOSE, Parser
from .session import QUIT, WAIT, Session, WorkqInfo

__all__ = ["CLOSE", "Parser", "QUIT", "Session", "WAIT", "WorkqInfo"]
