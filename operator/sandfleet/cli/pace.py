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
    mean_task_s: float | None,
    running_for_s: Sequence[float],
    queued: int,
    concurrency: int,
) -> float | None:
    """Seconds until the last task is expected to finish, or None before any task finished.

    Each running task is expected to need the mean task time minus what it has run; each
    queued task the mean task time; the work is spread over `concurrency` workers and can
    never take less than the longest running task still needs. (A completions-per-second
    rate, as a progress bar measures it, is wrong here: with N tasks at a time, tasks
    finish in bursts, and right after a burst the rate promises the rest in a second.)
    """
    if mean_task_s is None:
        return None
    still_running = [max(mean_task_s - ran, 0.0) for ran in running_for_s]
    work = sum(still_running) + queued * mean_task_s
    workers = max(concurrency, 1)
    return max(work / workers, max(still_running, default=0.0))
