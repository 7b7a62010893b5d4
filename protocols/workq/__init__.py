"""The workq dialect: sans-IO parser and session (workq-protocol.txt, docs/workq.md).

`REGISTRATION` is what the gateway's registry lists (protocols/contract.py).
"""
from ..contract import Registration
from .parser import CLOSE, Parser
from .session import QUIT, WAIT, Session, WorkqInfo, connect

__all__ = ["CLOSE", "Parser", "QUIT", "Session", "WAIT", "WorkqInfo", "connect",
           "REGISTRATION"]


def _state(port, options: dict, context) -> WorkqInfo:
    return WorkqInfo(port)


REGISTRATION = Registration(
    name="workq",
    default_port=9922,
    make_state=_state,
    session_factory=connect,
    refuse_reply=None,   # the reference accepts every connection: none to copy
    summary="workq's +/- text protocol (iamduo/workq)",
)
