"""A flood of calls with a bad token leaves a few warnings and one count, not a log flood."""

from __future__ import annotations

import asyncio
import logging

import pytest

from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import SandboxLostError
from sandfleet_runtime.auth import FailureLog
from sandfleet_runtime.server import RuntimeServer

pytestmark = pytest.mark.integration


def _events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == name]


async def test_a_bad_token_flood_logs_the_first_few_then_one_summary(
    runtime: tuple[RuntimeServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    server, token = runtime
    caplog.set_level(logging.WARNING, logger="sandfleet_runtime.auth")
    intruder = RuntimeClient(f"127.0.0.1:{server.port}", "not-the-token")
    try:

        async def attempt() -> None:
            with pytest.raises(SandboxLostError, match="UNAUTHENTICATED"):
                await intruder.stats()

        await asyncio.gather(*(attempt() for _ in range(300)))
    finally:
        await intruder.close()
    assert len(_events(caplog, "rpc_unauthenticated")) == 10
    assert _events(caplog, "rpc_unauthenticated_suppressed") == []  # the window is still open
    server.auth.failures.flush()
    [summary] = _events(caplog, "rpc_unauthenticated_suppressed")
    assert summary.count == 290  # type: ignore[attr-defined]
    # The rightful client is not affected.
    owner = RuntimeClient(f"127.0.0.1:{server.port}", token)
    try:
        assert (await owner.stats()).uptime_s >= 0
    finally:
        await owner.close()


async def test_each_window_logs_its_burst_and_a_timer_reports_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="sandfleet_runtime.auth")
    failures = FailureLog(burst=2, interval_s=0.3)
    for _ in range(5):
        failures.record("/m", token_present=True)
    assert len(_events(caplog, "rpc_unauthenticated")) == 2
    await asyncio.sleep(0.5)  # the window ends: its timer reports the 3 suppressed calls
    [summary] = _events(caplog, "rpc_unauthenticated_suppressed")
    assert summary.count == 3  # type: ignore[attr-defined]
    failures.record("/m", token_present=False)  # a new window: warned again
    assert len(_events(caplog, "rpc_unauthenticated")) == 3
