"""Logging: `get_logger` for every module, `configure_logging` for the CLI and operator only.

Importing Sandfleet configures nothing. A program that uses the SDK and never configures
structlog gets the SDK's events through stdlib `logging` (so nothing below WARNING, and
never on stdout: structlog's own default would print every debug line there). Once the
program, or the CLI or operator entry point, configures structlog, events follow that.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

import structlog

_SHARED: list[structlog.types.Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


_UNCONFIGURED: list[structlog.types.Processor] = [
    structlog.stdlib.filter_by_level,  # before rendering: a dropped event costs nothing
    structlog.stdlib.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.processors.KeyValueRenderer(key_order=["event"]),
]
"""Until structlog is configured: key=value lines handed to the module's stdlib logger."""


class Logger:
    """structlog's logging calls for a module, following structlog's configuration once
    there is one and going through stdlib `logging` until then (see the module doc)."""

    __slots__ = ("_configured", "_context", "_name", "_unconfigured")

    def __init__(self, name: str, context: Mapping[str, Any] | None = None) -> None:
        self._name = name
        self._context = dict(context or {})
        # Both are lazy proxies: neither reads a configuration before its first event.
        self._configured: Any = structlog.get_logger(name, **self._context)
        self._unconfigured: Any = structlog.wrap_logger(
            logging.getLogger(name),
            processors=_UNCONFIGURED,
            wrapper_class=structlog.stdlib.BoundLogger,
            **self._context,
        )

    def bind(self, **values: Any) -> Logger:
        """A logger that adds `values` to every event."""
        return Logger(self._name, {**self._context, **values})

    def _target(self) -> Any:
        return self._configured if structlog.is_configured() else self._unconfigured

    def debug(self, event: str, **values: Any) -> None:
        self._target().debug(event, **values)

    def info(self, event: str, **values: Any) -> None:
        self._target().info(event, **values)

    def warning(self, event: str, **values: Any) -> None:
        self._target().warning(event, **values)

    def error(self, event: str, **values: Any) -> None:
        self._target().error(event, **values)

    def exception(self, event: str, **values: Any) -> None:
        """An error event with the exception being handled."""
        self._target().exception(event, **values)


def get_logger(name: str) -> Logger:
    """The logger of module `name` (pass `__name__`)."""
    return Logger(name)


class _CurrentStderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is when a record is emitted, not when the handler was
    made: while a rich live display (a progress bar, a ticking line) runs, sys.stderr is
    rich's proxy, which prints each line above the display instead of through it."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass  # always sys.stderr


def _text_line(_: Any, method: str, event_dict: Mapping[str, Any]) -> str:
    """`warning: context_shortened task=t turn=3 clipped=2`: a log line for people, short
    enough to sit beside a trace (no timestamp or logger name; --log-format json has them)."""
    fields = {
        key: value
        for key, value in event_dict.items()
        if key not in ("event", "level", "timestamp", "logger", "exception")
    }
    line = f"{event_dict.get('level', method)}: {event_dict.get('event', '')}"
    line += "".join(f" {key}={value}" for key, value in fields.items())
    exception = event_dict.get("exception")
    return f"{line}\n{exception}" if exception else line


def configure_logging(
    *,
    level: str = "INFO",
    json: bool | None = None,
    stream: object = None,
    file: str | os.PathLike[str] | None = None,
    text: bool = False,
) -> None:
    """JSON lines when not on a TTY (or when asked), a readable console format otherwise;
    `text`: short `level: event key=value` lines instead of the console format (the CLI's).
    `file`: append there instead of writing to the stream (stderr as it is at each line).

    For entry points only (CLI, operator): it sets structlog's and stdlib's global state,
    and stdlib records (grpc, kopf, aiohttp) are rendered the same way as our events."""
    out = sys.stderr if stream is None else stream
    json = (not getattr(out, "isatty", lambda: False)()) if json is None else json
    renderer: structlog.types.Processor
    if json:
        renderer = structlog.processors.JSONRenderer()
    elif text:
        renderer = _text_line
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[*_SHARED, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler: logging.Handler
    if file is not None:
        handler = logging.FileHandler(file, encoding="utf-8")
    elif stream is None:
        handler = _CurrentStderrHandler()
    else:
        handler = logging.StreamHandler(stream)  # type: ignore[call-overload]
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=_SHARED,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.dict_tracebacks
                if json
                else structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
