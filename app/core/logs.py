"""Structured JSON logs, one object per line, each carrying the request id it belongs to.

svc logs events, not requests: a successful completion writes no log line (its numbers go
to the metrics), so the hot path never formats a record. What is logged — errors, backend
outages, upstream failures, sweeps, flushes, start and stop — carries the ``request_id``
of the request that caused it, the one the client got in its ``x-request-id`` header.

Secrets are kept out twice: nothing in svc passes a header or a key to a logger, and every
record is scrubbed of anything shaped like an API key or a bearer token before it is
written, in case a library's message quotes one.
"""

from __future__ import annotations

import contextvars
import logging
import re
import sys
import time
from typing import Any

import msgspec

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "svc_request_id", default=None
)
"""The id of the request the running task serves (``None`` outside requests)."""

_SECRET = re.compile(
    r"(?i:authorization)[\"':=\s]+(?:(?i:bearer)\s+)?[^\s\"',;]+"
    r"|(?i:bearer)\s+[^\s\"',;]+"
    r"|svc_(?:live|test)_[0-9A-Za-z]{8,}"
    r"|sk-[0-9A-Za-z_-]{8,}"
)
REDACTED = "[redacted]"
# LogRecord attributes that are not user-supplied ``extra`` fields.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
_encoder = msgspec.json.Encoder()


def redact(text: str) -> str:
    """``text`` with every API key, bearer token and authorization value replaced."""
    return _SECRET.sub(REDACTED, text)


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object: ts, level, logger, msg, request_id, extras, exc."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact(record.getMessage()),
        }
        rid = getattr(record, "request_id", None) or request_id.get()
        if rid:
            entry["request_id"] = rid
        for name, value in record.__dict__.items():
            if name not in _STANDARD and name != "request_id":
                entry[name] = value if isinstance(value, int | float | bool) else redact(str(value))
        if record.exc_info:
            entry["exc"] = redact(self.formatException(record.exc_info))
        return _encoder.encode(entry).decode()


def configure_logging(level: str = "INFO") -> None:
    """Send every logger's records to stderr as JSON lines, through one root handler (it
    replaces whatever the server or a library installed there)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root.addHandler(handler)
    root.setLevel(level.upper())


def granian_log_config(level: str = "INFO") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` that writes granian's loggers and the root logger in
    the same JSON format (``svc serve`` applies it to itself and hands it to granian)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": f"{__name__}.JsonFormatter"}},
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"handlers": ["console"], "level": level.upper()},
        "loggers": {
            "_granian": {"handlers": ["console"], "level": level.upper(), "propagate": False},
            "granian.access": {"handlers": ["console"], "level": level.upper(), "propagate": False},
        },
    }
