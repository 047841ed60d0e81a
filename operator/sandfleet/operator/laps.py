"""Where a step's time goes: milliseconds per stage, for the operator's own log lines."""

from __future__ import annotations

import time


class Laps:
    """Consecutive stage durations: `lap("bind")` records the time since the previous lap."""

    def __init__(self) -> None:
        self._last = time.monotonic()
        self.ms: dict[str, float] = {}

    def lap(self, stage: str) -> None:
        now = time.monotonic()
        self.ms[stage] = round((now - self._last) * 1000, 1)
        self._last = now
