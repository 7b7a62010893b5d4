"""The beanstalk dialect (../shared/specs/beanstalk-protocol.txt, reference: beanstalkd 1.12)."""
from .parser import Parser
from .session import Session, ServerInfo

__all__ = ["Parser", "Session", "ServerInfo"]
