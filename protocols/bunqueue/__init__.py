"""The bunqueue dialect: length-prefixed MessagePack frames (bunqueue-tcp-protocol.txt).

Sans-IO: codec.FrameReader cuts frames, session.Session runs commands on the engine and returns
framed replies; the gateway owns the socket (gateway/bunqueue_conn.py).
"""
from .codec import FrameReader, MAX_FRAME
from .info import BunqueueInfo
from .session import Session

__all__ = ["BunqueueInfo", "FrameReader", "MAX_FRAME", "Session"]
