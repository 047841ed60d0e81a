"""What a batch shows as it goes: the progress bar with an ETA and the tasks in flight on a
terminal, or one JSON object per line with --json."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from sandfleet.cli.pace import Pace, remaining_s
from sandfleet.cli.render import finished_task_line
from sandfleet.runs.outcomes import TaskOutcome

_RUNNING_SHOWN = 6
"""In-flight tasks named on the status line; more are counted."""


@dataclasses.dataclass(slots=True)
class BatchStats(Pace):
    """What this invocation did (a resumed batch counts only its own tasks), and what runs."""

    todo: int = 0
    concurrency: int = 1
    submitted: int = 0
    failed: int = 0
    durations_s: list[float] = dataclasses.field(default_factory=list)
    """total_time_s of each task finished in this invocation."""
    running: dict[str, float] = dataclasses.field(default_factory=dict)
    """Task id -> time.perf_counter() when it started."""

    def task_started(self, task_id: str) -> None:
        self.running[task_id] = time.perf_counter()

    def record(self, outcome: TaskOutcome) -> None:
        self.running.pop(outcome.id, None)
        self.finished += 1
        self.submitted += outcome.submitted
        self.failed += outcome.failed
        self.durations_s.append(outcome.total_time_s)

    def eta_s(self) -> float | None:
        now = time.perf_counter()
        running = [now - since for since in list(self.running.values())]
        return remaining_s(
            durations_s=self.durations_s,
            running_for_s=running,
            queued=max(self.todo - self.finished - len(running), 0),
            concurrency=self.concurrency,
        )


def rate_text(stats: BatchStats) -> str:
    """Tasks finished per minute of this invocation so far (moves while none finishes)."""
    return f"{stats.rate_per_minute():.1f} tasks/min" if stats.finished else "- tasks/min"


def eta_text(seconds: float | None) -> str:
    if seconds is None:
        return "ETA unknown"
    whole = round(seconds)
    return f"ETA {whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def running_text(running: Mapping[str, float], now: float) -> Text:
    """`running: task-03 41s, task-07 12s (+2 more)`, longest-running first."""
    ordered = sorted(running.items(), key=lambda item: item[1])
    shown = ", ".join(
        f"{task_id} {now - since:.0f}s" for task_id, since in ordered[:_RUNNING_SHOWN]
    )
    more = len(ordered) - _RUNNING_SHOWN
    return Text(
        "running: " + shown + (f" (+{more} more)" if more > 0 else ""),
        style="dim",
        no_wrap=True,
        overflow="ellipsis",
    )


class BatchProgress(Progress):
    """The bar plus a line naming the tasks in flight and for how long they have run."""

    def __init__(self, console: Console, stats: BatchStats) -> None:
        self._stats = stats  # first: the base class may render while it initializes
        super().__init__(
            SpinnerColumn(),
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("[red]{task.fields[failed]} failed"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[eta]}"),
            console=console,
        )
        self.bar: TaskID = self.add_task(
            "batch", total=stats.todo, failed=0, rate="- tasks/min", eta=eta_text(None)
        )

    def get_renderables(self) -> Iterable[RenderableType]:
        yield self.make_tasks_table(self.tasks)
        if self._stats.running:
            yield running_text(dict(self._stats.running), time.perf_counter())

    def tick(self) -> None:
        """Refresh the ETA and the rate (called every second: both move while no task
        finishes)."""
        self.update(self.bar, eta=eta_text(self._stats.eta_s()), rate=rate_text(self._stats))

    def task_finished(self, outcome: TaskOutcome) -> None:
        stats = self._stats
        self.console.print(finished_task_line(outcome))
        self.update(
            self.bar,
            advance=1,
            failed=stats.failed,
            rate=rate_text(stats),
            eta=eta_text(stats.eta_s()),
        )


def json_line(console: Console, event: str, **fields: Any) -> None:
    """One machine-readable line on stdout (--json): {"event": ..., ...}."""
    console.out(json.dumps({"event": event, **fields}, ensure_ascii=False), highlight=False)
