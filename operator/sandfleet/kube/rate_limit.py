"""An asyncio token bucket: `qps` requests per second on average, bursts of up to `burst`."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable


class TokenBucket:
    """Client-side rate limit, the way client-go's QPS/Burst works.

    The bucket holds up to `burst` tokens and refills at `qps` tokens per second. Each
    acquire takes one token; when none is left the caller reserves the next one to come and
    sleeps exactly until then, once. Reservations are handed out in call order, so waiters
    are served first come, first served and nobody polls. `qps=math.inf` disables the limit.

    `clock` and `sleep` are injectable so tests can measure the schedule on a fake clock.
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        if not qps > 0:
            raise ValueError(f"qps must be positive (math.inf for no limit), got {qps}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        """May go negative: each negative unit is a reservation someone is sleeping on."""
        self._updated = clock()

    def minimum_duration(self, acquisitions: int) -> float:
        """The least time `acquisitions` take when they start from a full bucket."""
        if math.isinf(self.qps):
            return 0.0
        return max(0, acquisitions - self.burst) / self.qps

    def reserve(self) -> float:
        """Take a token now and return how long to wait before using it (0 if at once)."""
        if math.isinf(self.qps):
            return 0.0
        now = self._clock()
        elapsed = max(0.0, now - self._updated)
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
        self._updated = now
        self._tokens -= 1.0
        if self._tokens >= 0:
            return 0.0
        return -self._tokens / self.qps

    def take_available(self, wanted: int) -> int:
        """Take up to `wanted` tokens the bucket holds now, without waiting: how many it
        gave (a batch sized to what the limit allows this moment; the rest waits a round)."""
        if math.isinf(self.qps):
            return wanted
        now = self._clock()
        elapsed = max(0.0, now - self._updated)
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
        self._updated = now
        taken = max(0, min(wanted, math.floor(self._tokens)))
        self._tokens -= taken
        return taken

    def cancel_reservation(self) -> None:
        """Give back a token whose holder will not use it (its waiter was cancelled)."""
        if not math.isinf(self.qps):
            self._tokens = min(float(self.burst), self._tokens + 1.0)

    async def acquire(self) -> float:
        """Wait for a token; return the seconds waited."""
        delay = self.reserve()
        if delay > 0:
            try:
                await self._sleep(delay)
            except asyncio.CancelledError:
                self.cancel_reservation()
                raise
        return delay
