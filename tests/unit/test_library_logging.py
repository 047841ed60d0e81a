"""As a library, Sandfleet configures no logging: its events go to stdlib `logging` until the
program configures structlog, and then follow that configuration."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import structlog

import sandfleet
from sandfleet.logs import get_logger


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )


def test_importing_sandfleet_configures_neither_structlog_nor_logging() -> None:
    done = _run(
        """
        import logging, structlog
        import sandfleet, sandfleet.sandbox.facade, sandfleet.cli.main
        import sandfleet.operator.session_worker
        print(structlog.is_configured(), logging.getLogger().handlers)
        """
    )
    assert done.stdout.split() == ["False", "[]"]


def test_unconfigured_events_reach_stdlib_logging_only_from_warning_and_never_stdout() -> None:
    done = _run(
        """
        from sandfleet.logs import get_logger
        log = get_logger("sandfleet.example").bind(sandbox="s1")
        log.debug("debug_event", detail=1)
        log.info("info_event")
        log.warning("warning_event", count=2)
        """
    )
    assert done.stdout == ""
    assert "debug_event" not in done.stderr and "info_event" not in done.stderr
    # stdlib's last-resort handler prints the rendered key=value line to stderr
    assert "event='warning_event'" in done.stderr and "sandbox='s1'" in done.stderr
    assert "count=2" in done.stderr


def test_unconfigured_events_follow_the_programs_stdlib_levels() -> None:
    done = _run(
        """
        import logging, sys
        logging.basicConfig(stream=sys.stdout, level=logging.DEBUG, format="%(name)s %(message)s")
        from sandfleet.logs import get_logger
        get_logger("sandfleet.example").debug("debug_event", detail=1)
        """
    )
    assert done.stdout.startswith("sandfleet.example event='debug_event'")
    assert "detail=1" in done.stdout


def test_events_follow_structlog_once_the_program_configures_it() -> None:
    log = get_logger("sandfleet.example").bind(sandbox="s1")
    with structlog.testing.capture_logs() as events:
        log.info("configured_event", count=3)
    assert events == [
        {"event": "configured_event", "sandbox": "s1", "count": 3, "log_level": "info"}
    ]


def test_every_module_gets_its_logger_from_sandfleet_logs() -> None:
    """structlog.get_logger in a module would print to stdout in an unconfigured program."""
    package = Path(sandfleet.__file__).parent
    direct = [
        str(path.relative_to(package))
        for path in sorted(package.rglob("*.py"))
        if path.name != "logs.py" and "structlog.get_logger" in path.read_text()
    ]
    assert direct == []
