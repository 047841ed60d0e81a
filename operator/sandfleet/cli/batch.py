"""`sandfleet batch TASKS.jsonl --out results.jsonl`: many tasks, N at a time, resumable."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from sandfleet.agent import (
    AgentConfig,
    AgentEvent,
    EventSink,
    Model,
    ModelRetried,
    StopReason,
    openai_model,
)
from sandfleet.cli.batch_display import BatchProgress, BatchStats, eta_text, json_line
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
from sandfleet.cli.exit_codes import ExitCode
from sandfleet.cli.interrupts import run_until_interrupted
from sandfleet.cli.preflight import EndpointUnusableError, check_endpoint
from sandfleet.cli.render import TraceRenderer, batch_summary_table
from sandfleet.cli.run import add_gateway_argument, add_session_target_arguments
from sandfleet.logs import get_logger
from sandfleet.runs.outcomes import NO_ANSWER, RunFailure, TaskOutcome
from sandfleet.settings import Settings
from sandfleet.tasks import TaskInputError, task_from_batch_record

if TYPE_CHECKING:
    from sandfleet.clients.gateway.target import GatewayTarget

log = get_logger(__name__)

DEFAULT_FAIL_FAST = 3
_TICK_S = 1.0


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
    output = parser.add_mutually_exclusive_group()
    output.add_argument(
        "--trace", action="store_true", help="print every task's turns and tool calls"
    )
    output.add_argument(
        "--json", dest="as_json", action="store_true",
        help='machine-readable progress on stdout: one JSON object per line ("event": '
        '"start", "task" per finished task, "stopped", "summary")',
    )  # fmt: skip
    parser.add_argument(
        "--fail-fast", dest="fail_fast", type=int, default=DEFAULT_FAIL_FAST, metavar="N",
        help="stop starting tasks when the first N tasks all end in model_error "
        f"(default {DEFAULT_FAIL_FAST}; 0: never)",
    )  # fmt: skip
    parser.add_argument(
        "--no-preflight", dest="preflight", action="store_false",
        help="skip the check that the model endpoint answers (GET <base-url>/models) "
        "before any task starts",
    )  # fmt: skip
    cluster = parser.add_argument_group(
        "kubernetes backend",
        "--backend kubernetes claims each task's sandbox through the sandfleet gateway and "
        "runs the loops here, as local runs do.",
    )
    add_session_target_arguments(
        cluster, runs="the tasks", sandboxes="the sandboxes", api_key_secret=False
    )
    add_gateway_argument(cluster)


def batch_command(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    errors = error_console()
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
    bad = _bad_tasks(todo, base_dir=args.tasks.parent)
    if bad:
        listed = "\n  ".join(bad)
        count = "1 task" if len(bad) == 1 else f"{len(bad)} tasks"
        message = (
            f"{count} of {args.tasks} cannot run (no task was started; fix the lines and run "
            f"the same command again):\n  {listed}"
        )
        errors.print(Text.assemble(("error: ", "red"), message))
        return ExitCode.USAGE
    if todo and args.preflight:
        failure = _preflight(config)
        if failure == "":
            errors.print("interrupted")
            return ExitCode.CANCELLED
        if failure is not None:
            errors.print(Text.assemble(("error: ", "red"), failure))
            if args.as_json:
                json_line(console, "stopped", reason="preflight", error=failure, started=0)
            return ExitCode.MODEL_ERROR
    concurrency = min(settings.concurrency, max(len(todo), 1))
    _announce_start(console, args, total=len(lines), todo=len(todo), concurrency=concurrency)
    batch = _Batch(
        base_dir=args.tasks.parent,
        config=config,
        settings=settings,
        results_log=results_log,
        console=console,
        trace=args.trace,
        as_json=args.as_json,
        fail_fast=args.fail_fast,
        gateway=gateway,
        stats=BatchStats(todo=len(todo), concurrency=concurrency),
    )
    interrupted = bool(todo) and run_until_interrupted(batch.run(todo)) is None
    if interrupted and not args.as_json:
        message = f"interrupted: run the same command again to resume ({args.out})"
        console.print(Text(message, style="yellow"))
    if batch.stopped is not None:
        errors.print(Text.assemble(("stopped: ", "red"), batch.stopped))
    recorded = latest_outcomes(results_log.load())
    outcomes = [recorded[line["id"]] for line in lines if line["id"] in recorded]
    code = batch_exit_code(outcomes, total=len(lines), stopped=batch.stopped is not None)
    stats = batch.stats
    if args.as_json:
        if batch.stopped is not None:
            json_line(console, "stopped", reason="fail_fast", error=batch.stopped,
                      started=stats.finished + len(stats.running))  # fmt: skip
        json_line(console, "summary", **_summary(outcomes, len(lines), stats, code))
    elif outcomes:
        console.print(
            batch_summary_table(outcomes, ran_now=stats.finished, elapsed_s=stats.elapsed_s)
        )
    return code


def _bad_tasks(todo: Sequence[Mapping[str, Any]], *, base_dir: Path) -> list[str]:
    """What is wrong with each line that could not become a task (a missing prompt, a
    task_dir that does not exist, ...), checked before any task starts, so a bad line is
    never run, recorded in --out, and then skipped by a corrected rerun."""
    problems = []
    for line in todo:
        try:
            task_from_batch_record(line, base_dir=base_dir)
        except TaskInputError as error:
            problems.append(f"{line['id']}: {error}")
    return problems


def _announce_start(
    console: Console, args: argparse.Namespace, *, total: int, todo: int, concurrency: int
) -> None:
    if args.as_json:
        json_line(console, "start", total=total, skipped=total - todo, todo=todo,
                  concurrency=concurrency)  # fmt: skip
    else:
        console.print(
            f"{plural(total, 'task')}: {total - todo} already in {args.out}, "
            f"{todo} to run, {concurrency} at a time"
        )


def batch_exit_code(outcomes: list[TaskOutcome], *, total: int, stopped: bool) -> ExitCode:
    """0 every task submitted an answer; 3 the model endpoint failed every task, or the
    batch stopped because the first tasks all hit model errors; 130 tasks left unrun; 1 some
    task did not submit; 5 every task submitted, some without an answer."""
    if stopped or (outcomes and all(o.stop_reason == StopReason.MODEL_ERROR for o in outcomes)):
        return ExitCode.MODEL_ERROR
    if len(outcomes) < total:
        return ExitCode.CANCELLED
    if not all(outcome.submitted for outcome in outcomes):
        return ExitCode.NOT_SUBMITTED
    return ExitCode.OK if all(o.answered for o in outcomes) else ExitCode.NO_ANSWER


def _preflight(config: AgentConfig) -> str | None:
    """None when the endpoint answered; else why the batch must not start ("" when the
    check itself was interrupted)."""
    try:
        status = run_until_interrupted(check_endpoint(config.base_url, config.api_key))
    except EndpointUnusableError as error:
        return f"{error}; no task was started (skip this check with --no-preflight)"
    if status is None:
        return ""
    log.debug("batch_preflight_passed", status=status)
    return None


def _summary(
    outcomes: list[TaskOutcome], total: int, stats: BatchStats, code: ExitCode
) -> dict[str, Any]:
    by_reason: dict[str, int] = {}
    by_status: dict[str, int] = {}
    for outcome in outcomes:
        by_reason[outcome.stop_reason] = by_reason.get(outcome.stop_reason, 0) + 1
        by_status[outcome.status] = by_status.get(outcome.status, 0) + 1
    return {
        "total": total,
        "recorded": len(outcomes),
        "submitted": sum(o.submitted for o in outcomes),
        "answered": sum(o.submitted and o.answered for o in outcomes),
        "submitted_no_answer": by_status.get(NO_ANSWER, 0),
        "by_stop_reason": by_reason,
        "by_status": by_status,
        "ran_now": stats.finished,
        "elapsed_s": round(stats.elapsed_s, 3),
        "exit_code": int(code),
    }


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
    as_json: bool
    fail_fast: int
    """Stop starting tasks when the first this many all end in model_error (0: never)."""
    stats: BatchStats
    gateway: GatewayTarget | None = None
    """Where each task's sandbox is claimed (None: a local sandbox)."""
    stopped: str | None = None
    """Why no more tasks are started (fail-fast), or None."""
    _first_reasons: list[str] = dataclasses.field(default_factory=list)

    async def run(self, todo: Sequence[Mapping[str, Any]]) -> bool:
        # Workers share one iterator: next() never awaits, so each line is taken exactly once.
        pending = iter(todo)
        append_lock = asyncio.Lock()
        model = openai_model(self.config)
        progress = None if self.as_json else BatchProgress(self.console, self.stats)
        console = progress.console if progress is not None else self.console

        async def worker() -> None:
            for line in pending:
                if self.stopped is not None:
                    return
                self.stats.task_started(str(line["id"]))
                outcome = await self._run_line(line, model, console)
                async with append_lock:
                    await asyncio.to_thread(self.results_log.append, outcome)
                self._record(progress, outcome)

        async def ticker() -> None:
            while progress is not None:
                await asyncio.sleep(_TICK_S)
                progress.tick()

        try:
            with progress if progress is not None else contextlib.nullcontext():
                ticking = asyncio.create_task(ticker())
                try:
                    async with asyncio.TaskGroup() as workers:
                        for _ in range(self.stats.concurrency):
                            workers.create_task(worker())
                finally:
                    ticking.cancel()
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
        on_event: EventSink
        if self.trace:
            on_event = TraceRenderer(console, prefix=f"[{task_id}] ")
        else:
            on_event = functools.partial(self._show_retry, console)
        started = time.perf_counter()
        try:
            return await execute_task(
                spec, model=model, config=self.config, settings=self.settings,
                on_event=on_event, gateway=self.gateway,
            )  # fmt: skip
        # One broken task must never stop the batch: a bug becomes that task's failed line.
        except Exception as error:
            log.exception("batch_task_crashed", task=task_id)
            return TaskOutcome.failure(
                task_id, RunFailure.INTERNAL_ERROR, f"{type(error).__name__}: {error}",
                model=self.config.model, total_time_s=time.perf_counter() - started,
            )  # fmt: skip

    def _show_retry(self, console: Console, event: AgentEvent) -> None:
        """Without --trace, of a task's events only its model retries are shown: a line
        above the progress bar, or a "retry" object with --json."""
        if not isinstance(event, ModelRetried):
            return
        if self.as_json:
            json_line(
                console, "retry", id=event.task_id, turn=event.turn, attempt=event.attempt,
                attempts=event.attempts, cause=event.cause, attempt_s=event.attempt_s,
                wait_s=event.wait_s,
            )  # fmt: skip
            return
        console.print(
            Text.assemble(
                ("↻ ", "yellow"), (event.task_id, "bold"),
                (f" model request failed (attempt {event.attempt}/{event.attempts}, "
                 f"{event.attempt_s:.1f}s): ", "yellow"),
                event.cause, (f"; retrying in {event.wait_s:.1f}s", "yellow"),
            ),
            no_wrap=True, overflow="ellipsis",
        )  # fmt: skip

    def _record(self, progress: BatchProgress | None, outcome: TaskOutcome) -> None:
        stats = self.stats
        stats.record(outcome)
        if progress is not None:
            progress.task_finished(outcome)
        else:
            json_line(
                self.console, "task", **outcome.to_record(), done=stats.finished,
                todo=stats.todo, eta=eta_text(stats.eta_s()).removeprefix("ETA "),
            )  # fmt: skip
        self._check_fail_fast(outcome)

    def _check_fail_fast(self, outcome: TaskOutcome) -> None:
        if self.fail_fast <= 0 or len(self._first_reasons) >= self.fail_fast:
            return
        self._first_reasons.append(outcome.stop_reason)
        if len(self._first_reasons) == self.fail_fast and all(
            reason == StopReason.MODEL_ERROR for reason in self._first_reasons
        ):
            self.stopped = (
                f"the first {self.fail_fast} tasks all failed with model_error (last: "
                f"{outcome.error or '?'}); no more tasks were started. Fix the endpoint and "
                "run the same command with --retry-failed (or raise --fail-fast)"
            )
            log.warning("batch_fail_fast", tasks=self.fail_fast, error=outcome.error)
