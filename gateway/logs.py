"""Structured logging: one JSON object per line on stderr (or key=value text).

Use `log = logging.getLogger("jobgate")` and pass fields with `extra={"fields": {...}}` or the
helper `event(log, "msg", key=value, ...)`.
"""
from __future__ import annotations

import json
import logging
import sys
import time


class JsonFormatter(logging.Formatter):
    """Formats a record as {"ts": ISO-8601 UTC, "level", "logger", "msg", ...fields}."""

    def format(self, record: logging.LogRecord) -> str:
        d = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        d.update(getattr(record, "fields", {}) or {})
        if record.exc_info:
            d["exc"] = self.formatException(record.exc_info)
        return json.dumps(d, default=str)


class TextFormatter(logging.Formatter):
    """Formats a record as `ts level msg key=value ...`."""

    def format(self, record: logging.LogRecord) -> str:
        f = " ".join(f"{k}={v}" for k, v in (getattr(record, "fields", {}) or {}).items())
        s = f"{self.formatTime(record)} {record.levelname.lower()} {record.getMessage()} {f}".rstrip()
        if record.exc_info:
            s += "\n" + self.formatException(record.exc_info)
        return s


def setup(level: str = "info", fmt: str = "json") -> None:
    """Configure the root "jobgate" logger: `level` debug|info|warning|error, `fmt` json|text."""
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger("jobgate")
    root.handlers[:] = [h]
    root.setLevel(level.upper())
    root.propagate = False


def event(log: logging.Logger, msg: str, level: int = logging.INFO, **fields) -> None:
    """Log `msg` with structured `fields`."""
    if log.isEnabledFor(level):
        log.log(level, msg, extra={"fields": fields})
