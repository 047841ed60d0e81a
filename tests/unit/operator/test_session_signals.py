"""SessionSignals: a session's change wakes the worker waiting on it at once (not after the
fallback look), and only that session's worker."""

from __future__ import annotations

import asyncio

import pytest

from sandfleet.operator import session_signals
from sandfleet.operator.session_signals import SessionSignals

WOKEN_WITHIN_S = 30.0
"""Generous for a loaded machine, and far below the fallback look the test sets."""


async def test_a_notify_wakes_the_waiting_worker_and_a_look_finds_the_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(session_signals, "FALLBACK_S", 3600.0)  # only a signal wakes it
    signals = SessionSignals()
    asked = {"suspend": False}
    waiting = asyncio.ensure_future(signals.until("uid-1", lambda: asked["suspend"]))
    await asyncio.sleep(0)  # the first look: not asked yet
    assert not waiting.done()

    signals.notify("uid-2")  # another session's change
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not waiting.done()

    asked["suspend"] = True
    signals.notify("uid-1")
    assert await asyncio.wait_for(waiting, WOKEN_WITHIN_S) is True
    signals.notify("uid-1")  # nobody waits any more: nothing kept, nothing raised


async def test_a_change_before_the_wait_is_found_by_the_first_look() -> None:
    assert await SessionSignals().until("uid", lambda: True) is True


async def test_a_passed_deadline_ends_the_wait_unfulfilled() -> None:
    loop = asyncio.get_running_loop()
    assert await SessionSignals().until("uid", lambda: False, deadline=loop.time() + 0.05) is False
