"""RefreshingCache: fresh answers as they are, stale ones while a background read refreshes
them, and a refresh that finds the thing gone forgets it."""

from __future__ import annotations

import asyncio

import pytest

from sandfleet.gateway.claim_sources import RefreshingCache


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class GoneError(Exception):
    pass


class Source:
    """Answers reads with its current value (or raises `failure`), counting them."""

    def __init__(self) -> None:
        self.value = "v1"
        self.failure: Exception | None = None
        self.reads = 0

    async def read(self) -> str:
        self.reads += 1
        await asyncio.sleep(0)
        if self.failure is not None:
            raise self.failure
        return self.value


async def _settle() -> None:
    for _ in range(5):  # the background refresh: a few loop steps
        await asyncio.sleep(0)


async def test_a_stale_answer_is_served_at_once_while_one_refresh_runs() -> None:
    clock, source = Clock(), Source()
    cache: RefreshingCache[str] = RefreshingCache(fresh_s=5, stale_s=60, clock=clock)
    assert await cache.get("k", source.read) == "v1"
    source.value = "v2"
    clock.now = 4
    assert await cache.get("k", source.read) == "v1"  # fresh: no read
    assert source.reads == 1

    clock.now = 10
    answers = [await cache.get("k", source.read) for _ in range(3)]
    await _settle()

    assert answers == ["v1", "v1", "v1"]  # stale, served without waiting
    assert source.reads == 2  # one refresh for the three
    assert await cache.get("k", source.read) == "v2"
    await cache.close()


async def test_an_answer_older_than_stale_s_is_read_first() -> None:
    clock, source = Clock(), Source()
    cache: RefreshingCache[str] = RefreshingCache(fresh_s=5, stale_s=60, clock=clock)
    await cache.get("k", source.read)
    source.value = "v2"
    clock.now = 61

    assert await cache.get("k", source.read) == "v2"
    assert source.reads == 2


async def test_a_refresh_finding_it_gone_forgets_it_and_other_errors_keep_it() -> None:
    clock, source = Clock(), Source()
    cache: RefreshingCache[str] = RefreshingCache(
        fresh_s=5, stale_s=60, drop_on=GoneError, clock=clock
    )
    await cache.get("k", source.read)
    clock.now = 10
    source.failure = RuntimeError("API server unavailable")
    assert await cache.get("k", source.read) == "v1"
    await _settle()
    assert await cache.get("k", source.read) == "v1"  # kept (and refreshed again)
    await _settle()

    source.failure = GoneError("no such pool")
    await cache.get("k", source.read)
    await _settle()

    with pytest.raises(GoneError):
        await cache.get("k", source.read)
    await cache.close()
