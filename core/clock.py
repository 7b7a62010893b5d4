"""Injectable clocks.

The engine reads time only through a clock, so tests move time without sleeping.
Two readings are used: monotonic milliseconds for deadlines (delays, TTR, timeouts, pauses)
and wall-clock milliseconds since the Unix epoch for timestamps that are stored.
"""
from __future__ import annotations

import time


class SystemClock:
    """The real clock: `monotonic_ms()` from time.monotonic_ns, `wall_ms()` from time.time_ns."""

    __slots__ = ()

    def monotonic_ms(self) -> int:
        """Monotonic time in integer milliseconds (only differences are meaningful)."""
        return time.monotonic_ns() // 1_000_000

    def wall_ms(self) -> int:
        """Wall-clock time in integer milliseconds since the Unix epoch."""
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to: `advance(ms)` moves both readings.

    Start values: monotonic 1_000_000 ms, wall `wall_start_ms` (default 1.7e12 ms, i.e. 2023-11).
    """

    __slots__ = ("_mono", "_wall")

    def __init__(self, wall_start_ms: int = 1_700_000_000_000) -> None:
        self._mono = 1_000_000
        self._wall = wall_start_ms

    def monotonic_ms(self) -> int:
        """Current monotonic reading in ms."""
        return self._mono

    def wall_ms(self) -> int:
        """Current wall reading in ms since the epoch."""
        return self._wall

    def advance(self, ms: int) -> None:
        """Move time forward by `ms` milliseconds (must be >= 0)."""
        if ms < 0:
            raise ValueError("time only moves forward")
        self._mono += ms
        self._wall += ms
