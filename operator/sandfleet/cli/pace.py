"""How fast a command works through its items: elapsed time and items finished per minute.

Shared by the progress lines of `batch` and `eval`, which count only what this invocation did
(a resumed run starts at zero).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence


@dataclasses.dataclass(slots=True, kw_only=True)
class Pace:
    started: float = dataclasses.field(default_factory=time.perf_counter)
    """`time.perf_counter()` when the invocation started."""
    finished: int = 0

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    def rate_per_minute(self) -> float:
        elapsed = self.elapsed_s
        return self.finished / (elapsed / 60) if elapsed > 0 else 0.0


def remaining_s(
    *,
    durations_s: Sequence[float],
    running_for_s: Sequence[float],
    queued: int,
    concurrency: int,
) -> float | None:
    """Seconds until the last task is expected to finish, or None ("unknown") when there is
    nothing to go by: no task finished yet, or a task has run longer than every finished one.

    `durations_s` are the finished tasks' times. A task that has run `t` seconds is expected
    to need the mean of `d - t` over the finished durations `d` longer than `t` (how much
    longer tasks that lasted past `t` took), so a task running long raises the estimate
    instead of counting as nearly done; each queued task needs the mean duration. The work
    is spread over `concurrency` workers and never takes less than the longest remainder.
    (A completions-per-second rate, as a progress bar measures it, is wrong here: with N
    tasks at a time, tasks finish in bursts, and right after a burst the rate promises the
    rest in a second.)
    """
    if not durations_s:
        return None
    still_running = []
    for ran in running_for_s:
        longer = [d - ran for d in durations_s if d > ran]
        if not longer:
            return None  # past everything seen so far: any number would be made up
        still_running.append(sum(longer) / len(longer))
    mean_s = sum(durations_s) / len(durations_s)
    work = sum(still_running) + queued * mean_s
    workers = max(concurrency, 1)
    return max(work / workers, max(still_running, default=0.0))
