"""The token bucket's schedule, measured on a fake clock: no real time passes in these tests."""

from __future__ import annotations

import asyncio
import math

import pytest

from sandfleet.kube import TokenBucket


class FakeClock:
    """A monotonic clock that moves only when a sleeper sleeps; it records every sleep."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class FrozenClock(FakeClock):
    """Sleeps are recorded and yield to the loop, but time stands still (concurrent waiters)."""

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await asyncio.sleep(0)


def bucket(clock: FakeClock, qps: float, burst: int) -> TokenBucket:
    return TokenBucket(qps, burst, clock=clock, sleep=clock.sleep)


async def test_a_full_bucket_serves_a_burst_at_once_then_one_token_per_interval() -> None:
    clock = FakeClock()
    limiter = bucket(clock, qps=10, burst=5)
    start = clock.now

    waits = [await limiter.acquire() for _ in range(8)]

    assert waits[:5] == [0, 0, 0, 0, 0]
    assert waits[5:] == pytest.approx([0.1, 0.1, 0.1])
    assert clock.now - start == pytest.approx(0.3)
    assert clock.now - start == pytest.approx(limiter.minimum_duration(8))


async def test_many_acquisitions_take_exactly_the_sustained_rate() -> None:
    clock = FakeClock()
    limiter = bucket(clock, qps=50, burst=100)
    start = clock.now

    for _ in range(300):
        await limiter.acquire()

    assert clock.now - start == pytest.approx((300 - 100) / 50)
    assert limiter.minimum_duration(300) == pytest.approx(4.0)


async def test_idle_time_refills_the_bucket_but_never_beyond_burst() -> None:
    clock = FakeClock()
    limiter = bucket(clock, qps=2, burst=3)
    for _ in range(3):
        await limiter.acquire()

    clock.now += 1.0  # two tokens come back
    assert [await limiter.acquire() for _ in range(2)] == [0, 0]
    assert await limiter.acquire() == pytest.approx(0.5)

    clock.now += 3600  # an hour idle still refills only `burst` tokens
    waits = [await limiter.acquire() for _ in range(4)]
    assert waits[:3] == [0, 0, 0]
    assert waits[3] == pytest.approx(0.5)


async def test_concurrent_waiters_each_sleep_once_in_arrival_order() -> None:
    clock = FrozenClock()
    limiter = bucket(clock, qps=4, burst=2)

    waits = await asyncio.gather(*(limiter.acquire() for _ in range(6)))

    assert waits == pytest.approx([0, 0, 0.25, 0.5, 0.75, 1.0])
    assert clock.sleeps == pytest.approx([0.25, 0.5, 0.75, 1.0])  # one sleep each: no polling


async def test_a_cancelled_waiter_gives_its_token_back() -> None:
    clock = FakeClock()
    sleeping = asyncio.Event()

    async def sleep_until_cancelled(seconds: float) -> None:
        sleeping.set()
        await asyncio.Event().wait()

    limiter = TokenBucket(1, 1, clock=clock, sleep=sleep_until_cancelled)
    await limiter.acquire()
    waiter = asyncio.create_task(limiter.acquire())  # reserves the token due in 1 s
    await sleeping.wait()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter

    assert limiter.reserve() == pytest.approx(1.0)  # not 2.0: the cancelled token came back


async def test_an_infinite_rate_never_waits() -> None:
    clock = FakeClock()
    limiter = bucket(clock, qps=math.inf, burst=1)

    assert [await limiter.acquire() for _ in range(1000)] == [0] * 1000
    assert clock.sleeps == []
    assert limiter.minimum_duration(1000) == 0


@pytest.mark.parametrize(("qps", "burst"), [(0, 1), (-1, 1), (math.nan, 1), (1, 0)])
def test_nonsensical_limits_are_refused(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        TokenBucket(qps, burst)


def test_take_available_gives_what_the_bucket_holds_now_and_the_rest_as_it_refills() -> None:
    clock = FakeClock()
    limit = bucket(clock, qps=10, burst=25)

    assert limit.take_available(50) == 25  # a batch capped at the burst
    assert limit.take_available(5) == 0  # empty: nothing waits, the caller tries later
    clock.now += 0.35
    assert limit.take_available(50) == 3  # 3.5 tokens refilled: whole ones only
    clock.now += 100
    assert limit.take_available(4) == 4
    assert limit.take_available(100) == 21  # never more than the burst in all


def test_take_available_without_a_limit_gives_everything() -> None:
    assert TokenBucket(math.inf, 1).take_available(1000) == 1000
