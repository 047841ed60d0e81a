"""The samples still to do, N at a time, each appended to samples.jsonl as it finishes."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from rich.console import Console
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

from sandfleet.agent import Model, openai_model
from sandfleet.cli.consoles import plural
from sandfleet.cli.eval_samples import EvalContext, cluster_sample, llm_sample, sandbox_sample
from sandfleet.cli.pace import Pace
from sandfleet.eval.problems import Problem
from sandfleet.eval.records import SampleLog, SampleRecord
from sandfleet.logs import get_logger
from sandfleet.runs.outcomes import RunFailure, utc_now

log = get_logger(__name__)

Job = tuple[Problem, int]
"""A problem and the number of its sample (0 .. K-1)."""


@dataclasses.dataclass(slots=True)
class EvalStats(Pace):
    """What this invocation did (a resumed run counts only its own samples)."""

    todo: int
    errors: int = 0
    score_sum: float = 0.0

    def eta_s(self) -> float | None:
        """Time left at this session's average pace: with N running at once the pace already
        counts the overlap, so remaining / rate is right from the first finished sample on."""
        if not self.finished:
            return None
        return (self.todo - self.finished) * self.elapsed_s / self.finished

    def record(self, sample: SampleRecord) -> None:
        self.finished += 1
        self.errors += sample.is_error
        self.score_sum += sample.score


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-:--:--"
    whole = round(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def sample_line(sample: SampleRecord) -> Text:
    """One line per finished sample: mark, problem and sample, score, stop reason, error."""
    mark, style = ("✓", "green") if sample.correct else ("•", "yellow")
    if sample.is_error:
        mark, style = "✗", "red"
    line = Text.assemble(
        (mark + " ", style),
        (f"{sample.problem_id}#{sample.sample}", "bold"),
        f"  score {sample.score:g}  {sample.status}  {plural(sample.turns, 'turn')}"
        f"  {sample.total_time_s:.1f}s",
    )
    if sample.error:
        line.append("  " + " ".join(sample.error.split())[:120], style="dim")
    return line


@dataclasses.dataclass(slots=True)
class EvalRunner:
    """One invocation's run over the samples still to do, in one mode."""

    context: EvalContext
    sample_log: SampleLog
    console: Console
    mode: str
    concurrency: int
    session_bodies: Mapping[tuple[str, int], dict[str, Any]] | None = None
    """Kubernetes backend: the SandboxSession body of each job, built before anything ran."""
    stats: EvalStats = dataclasses.field(default_factory=lambda: EvalStats(0))

    async def run(self, todo: Sequence[Job]) -> None:
        self.stats = EvalStats(len(todo))
        pending = iter(todo)  # shared by the workers: next() never awaits
        append_lock = asyncio.Lock()
        model = None if self.session_bodies is not None else openai_model(self.context.config)
        progress = Progress(
            SpinnerColumn(),
            TextColumn(f"[progress.description]eval {self.mode}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("[red]{task.fields[failed]} failed"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("ETA {task.fields[eta]}"),
            TextColumn("[bold]score {task.fields[score]}"),
            console=self.console,
        )
        bar = progress.add_task(
            "eval", total=len(todo), failed=0, rate="- /min", eta="-", score="-"
        )

        async def worker() -> None:
            for job in pending:
                sample = await self._run_job(job, model)
                async with append_lock:
                    await asyncio.to_thread(self.sample_log.append, sample)
                self._record(progress, bar, sample)

        try:
            with progress:
                async with asyncio.TaskGroup() as workers:
                    for _ in range(min(self.concurrency, len(todo))):
                        workers.create_task(worker())
        finally:
            if model is not None:
                await model.aclose()

    def _runner(self, job: Job, model: Model | None) -> Callable[[], Awaitable[SampleRecord]]:
        problem, sample = job
        if self.session_bodies is not None:
            body = self.session_bodies[(problem.id, sample)]
            return lambda: cluster_sample(self.context, problem, sample, body)
        assert model is not None
        if self.mode == "llm":
            return lambda: llm_sample(self.context, problem, sample, model)
        return lambda: sandbox_sample(self.context, problem, sample, model)

    async def _run_job(self, job: Job, model: Model | None) -> SampleRecord:
        problem, sample = job
        started = time.perf_counter()
        try:
            return await self._runner(job, model)()
        # One broken sample must never stop the run: a bug becomes that sample's error line.
        except Exception as error:
            log.exception("eval_sample_crashed", problem=problem.id, sample=sample)
            return SampleRecord(
                mode=self.mode, problem_id=problem.id, sample=sample, domain=problem.domain,
                score=0.0, correct=False, error=f"{type(error).__name__}: {error}",
                error_kind="run", agent_answer="", ground_truth=problem.ground_truth,
                stop_reason=RunFailure.INTERNAL_ERROR.value,
                total_time_s=round(time.perf_counter() - started, 3), finished_at=utc_now(),
            )  # fmt: skip

    def _record(self, progress: Progress, bar: TaskID, sample: SampleRecord) -> None:
        stats = self.stats
        stats.record(sample)
        progress.console.print(sample_line(sample))
        progress.update(
            bar,
            advance=1,
            failed=stats.errors,
            rate=f"{stats.rate_per_minute():.1f} /min",
            eta=_clock(stats.eta_s()),
            score=f"{stats.score_sum / stats.finished:.3f}",
        )
