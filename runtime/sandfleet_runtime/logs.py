"""Key-value JSON logging for the runtime on the standard library (structlog is not shipped here).

Records look like structlog's JSON events: {"event": "...", "level": "info", "logger": ...,
"timestamp": ..., **extra}. Call sites pass key-values through `extra=`.
"""

from __future__ import annotations

import json
import logging
import sys
import time

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD_ATTRS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class KeyValueJsonFormatter(logging.Formatter):
    """One JSON object per line: the event name plus the record's `extra` key-values."""

    def format(self, record: logging.LogRecord) -> str:
        event: dict[str, object] = {
            "event": record.getMessage(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                event[key] = value
        if record.exc_info:
            event["exception"] = self.formatException(record.exc_info)
        return json.dumps(event, default=str)


def configure_logging(level: str = "INFO") -> None:
    """Route every stdlib logger (ours and grpc's) to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(KeyValueJsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
