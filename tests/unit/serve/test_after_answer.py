"""Work held back until an answer is sent (a sandbox's release, the warm pool's refill): it
waits for the answer, no longer than ANSWER_WAIT_S, and closing does it at once."""

from __future__ import annotations

import asyncio
import functools

import pytest

from sandfleet.serve import sandboxes
from sandfleet.serve.sandboxes import AfterAnswer


async def test_the_work_waits_for_the_answer() -> None:
    after, answered, done = AfterAnswer(), asyncio.Event(), asyncio.Event()
    after.run(answered, done.set)
    await asyncio.sleep(0.05)
    assert not done.is_set()
    answered.set()
    await asyncio.wait_for(done.wait(), 5)


async def test_an_answer_never_sent_holds_the_work_back_only_so_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sandboxes, "ANSWER_WAIT_S", 0.01)
    after, done = AfterAnswer(), asyncio.Event()
    after.run(asyncio.Event(), done.set)
    await asyncio.wait_for(done.wait(), 5)


async def test_closing_does_the_held_back_work_now() -> None:
    after, calls = AfterAnswer(), list[int]()
    for n in range(3):
        after.run(asyncio.Event(), functools.partial(calls.append, n))
    await asyncio.wait_for(after.aclose(), 5)
    assert sorted(calls) == [0, 1, 2]
