"""`sandfleet batch TASKS.jsonl --out results.jsonl`: many tasks, N at a time, resumable."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from sandfleet.agent import AgentConfig, Model, openai_model
from sandfleet.cli.batch_files import (
    BatchFileError,
    ResultsLog,
    ids_to_skip,
    latest_outcomes,
    read_task_lines,
)
from sandfleet.cli.consoles import error_console, plural
from sandfleet.cli.execution import (
    ConfigurationError,
    agent_config,
    execute_task,
    gateway_target,
    system_prompt_notices,
)
from sandfleet.cli.interrupts import run_until_interrupted
from sandfleet.cli.pace import Pace
from sandfleet.cli.render import TraceRenderer, batch_summary_table, finished_task_line
from sandfleet.cli.results import ExitCode, RunFailure, TaskOutcome
from sandfleet.cli.run import add_gateway_argument, add_session_target_arguments
from sandfleet.logs import get_logger
from sandfleet.settings import Settings
from sandfleet.tasks import TaskInputError, task_from_batch_record

if TYPE_CHECKING:
    from sandfleet.cluster.gateway_target import GatewayTarget

log = get_logger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "tasks", type=Path, metavar="TASKS.jsonl",
        help='one task per line: {"id", "prompt", "files"?, "task_dir"?, "system_prompt"?, '
        '"instance_prompt"?}; paths are relative to this file\'s folder',
    )  # fmt: skip
    parser.add_argument(
        "--out", "-o", type=Path, required=True, metavar="RESULTS.jsonl",
        help="results log: one line per finished task; ids already in it are skipped",
    )  # fmt: skip
    parser.add_argument(
        "--concurrency", "-c", dest="concurrency", type=int, metavar="N",
        help=f"tasks running at once (default {Settings.model_fields['concurrency'].default})",
    )  # fmt: skip
    parser.add_argument(
        "--retry-failed", action="store_true",
        help="on resume, run again the ids whose last result failed (model_error, "
        "sandbox_lost, launch_failed, invalid_task, internal_error, cancelled)",
    )  # fmt: skip
    parser.add_argument(
        "--trace", action="store_true", help="print every task's turns and tool calls"
    )
    cluster = parser.add_argument_group(
        "kubernetes backend",
        "--backend kubernetes claims each task's sandbox through the sandfleet gateway and "
        "runs the loops here, as local runs do.",
    )
    add_session_target_arguments(
        cluster, runs="the tasks", sandboxes="the sandboxes", api_key_secret=False
    )
    add_gateway_argument(cluster)


@dataclasses.dataclass(slots=True)
class _SessionStats(Pace):
    """What this invocation did (a resumed batch counts only its own tasks)."""

    submitted: int = 0
    failed: int = 0


def batch_command(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    errors = Console(stderr=True, highlight=False, soft_wrap=True)  # one error, one line
    results_log = ResultsLog(args.out)
    try:
        lines = read_task_lines(args.tasks)
        config = agent_config(settings, loop_here=True)
        previous = latest_outcomes(results_log.load())
        gateway = gateway_target(settings) if settings.backend == "kubernetes" else None
    except (BatchFileError, ConfigurationError) as error:
        errors.print(Text.assemble(("error: ", "red"), str(error)))
        return ExitCode.USAGE
    for notice in system_prompt_notices(config, settings):
        errors.print(Text.assemble(("warning: ", "yellow"), notice))
    skip = ids_to_skip(previous, retry_failed=args.retry_failed)
    todo = [line for line in lines if line["id"] not in skip]
    console.print(
        f"{plural(len(lines), 'task')}: {len(lines) - len(todo)} already in {args.out}, "
        f"{len(todo)} to run, {min(settings.concurrency, max(len(todo), 1))} at a time"
    )
    batch = _Batch(
        base_dir=args.tasks.parent,
        config=config,
        settings=settings,
        results_log=results_log,
        console=console,
        trace=args.trace,
        gateway=gateway,
    )
    if todo and run_until_interrupted(batch.run(todo)) is None:
        message = f"interrupted: run the same command again to resume ({args.out})"
        console.print(Text(message, style="yellow"))
    recorded = latest_outcomes(results_log.load())
    outcomes = [recorded[line["id"]] for line in lines if line["id"] in recorded]
    if outcomes:
        stats = batch.stats
        console.print(
            batch_summary_table(outcomes, ran_now=stats.finished, elapsed_s=stats.elapsed_s)
        )
    if len(outcomes) < len(lines):
        return ExitCode.CANCELLED
    return ExitCode.OK if all(outcome.submitted for outcome in outcomes) else ExitCode.NOT_SUBMITTED


@dataclasses.dataclass(slots=True)
class _Batch:
    """One invocation's run over the tasks still to do."""

    base_dir: Path
    """Relative task_dir and file paths in task lines start here (the task file's folder)."""
    config: AgentConfig
    settings: Settings
    results_log: ResultsLog
    console: Console
    trace: bool
    gateway: GatewayTarget | None = None
    """Where each task's sandbox is claimed (None: a local sandbox)."""
    stats: _SessionStats = dataclasses.field(default_factory=_SessionStats)

    async def run(self, todo: Sequence[Mapping[str, Any]]) -> bool:
        # Workers share one iterator: next() never awaits, so each line is taken exactly once.
        pending = iter(todo)
        append_lock = asyncio.Lock()
        model = openai_model(self.config)
        progress = Progress(
            SpinnerColumn(),
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("[red]{task.fields[failed]} failed"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
        )
        bar = progress.add_task("batch", total=len(todo), failed=0, rate="- tasks/min")

        async def worker() -> None:
            for line in pending:
                outcome = await self._run_line(line, model, progress.console)
                async with append_lock:
                    await asyncio.to_thread(self.results_log.append, outcome)
                self._record(progress, bar, outcome)

        try:
            with progress:
                async with asyncio.TaskGroup() as workers:
                    for _ in range(min(self.settings.concurrency, len(todo))):
                        workers.create_task(worker())
        finally:
            await model.aclose()
        return True

    async def _run_line(
        self, line: Mapping[str, Any], model: Model, console: Console
    ) -> TaskOutcome:
        task_id = str(line["id"])
        try:
            spec = task_from_batch_record(line, base_dir=self.base_dir)
        except TaskInputError as error:
            return TaskOutcome.failure(
                task_id, RunFailure.INVALID_TASK, str(error), model=self.config.model
            )
        for notice in spec.notices:  # the task still runs: a typo is the user's to fix
            warning = Text.assemble(("warning: ", "yellow"), f"[{task_id}] {notice}")
            error_console().print(warning)
        renderer = TraceRenderer(console, prefix=f"[{task_id}] ") if self.trace else None
        started = time.perf_counter()
        try:
            return await execute_task(
                spec, model=model, config=self.config, settings=self.settings,
                on_event=renderer, gateway=self.gateway,
            )  # fmt: skip
        # One broken task must never stop the batch: a bug becomes that task's failed line.
        except Exception as error:
            log.exception("batch_task_crashed", task=task_id)
            return TaskOutcome.failure(
                task_id, RunFailure.INTERNAL_ERROR, f"{type(error).__name__}: {error}",
                model=self.config.model, total_time_s=time.perf_counter() - started,
            )  # fmt: skip

    def _record(self, progress: Progress, bar: TaskID, outcome: TaskOutcome) -> None:
        stats = self.stats
        stats.finished += 1
        stats.submitted += outcome.submitted
        stats.failed += outcome.failed
        progress.console.print(finished_task_line(outcome))
        progress.update(
            bar,
            advance=1,
            failed=stats.failed,
            rate=f"{stats.rate_per_minute():.1f} tasks/min",
        )
