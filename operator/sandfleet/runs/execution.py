"""One task end to end: a fresh sandbox, the agent loop, outputs copied back, the outcome
recorded in the run's folder. The core use case `run`, `batch`, `eval` and `serve` share.

Nothing here knows the command line or a terminal: progress goes to an EventSink, the
sandbox comes from a SandboxSource (sandfleet.runs.sandboxes).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from sandfleet.agent import (
    AgentConfig,
    AgentEvent,
    AgentResult,
    EventSink,
    Model,
    RunFinished,
    StopReason,
    Task,
    TaskFileError,
    TrajectoryWriter,
    run_agent,
)
from sandfleet.errors import SandfleetError
from sandfleet.logs import get_logger
from sandfleet.runs.folders import OUTPUT_FOLDER, RESULT_FILE, TRAJECTORY_FILE, new_run_folder
from sandfleet.runs.outcomes import RunFailure, TaskOutcome, write_result_file
from sandfleet.runs.sandboxes import SandboxSource
from sandfleet.sandbox.copy_back import CopyLimits, CopyReport
from sandfleet.sandbox.facade import Sandbox
from sandfleet.tasks import TaskSpec

log = get_logger(__name__)


async def execute_task(
    spec: TaskSpec,
    *,
    model: Model,
    config: AgentConfig,
    sandboxes: SandboxSource,
    folder: Path,
    copy_limits: CopyLimits | None = None,
    on_event: EventSink | None = None,
) -> TaskOutcome:
    """Run one task in a fresh sandbox from `sandboxes` and record it in `folder` (a new,
    empty run folder: see `run_folder`): trajectory.jsonl, output/ (within `copy_limits`),
    result.json. Earlier runs' folders are never touched. `on_event` sees the loop's events
    as they happen (live progress).

    Never raises for a sandbox that fails to start, a lost sandbox or a model failure: the
    outcome's stop reason says what happened. CancelledError propagates after result.json
    has been written with stop reason `cancelled` and the sandbox has been reclaimed.
    """
    run = _Execution(spec, model, config, folder, on_event)
    async with contextlib.AsyncExitStack() as stack:
        try:
            sandbox = await stack.enter_async_context(
                sandboxes(spec, tool_timeout_s=config.tool_timeout_s)
            )
        except (SandfleetError, OSError) as error:
            log.warning("sandbox_launch_failed", task=spec.task.id, error=str(error))
            failure = run.failure(RunFailure.LAUNCH_FAILED, f"the sandbox did not start: {error}")
            return await run.record(failure)
        trajectory = stack.enter_context(TrajectoryWriter(folder / TRAJECTORY_FILE))
        result = await run.loop(sandbox, trajectory)
        if isinstance(result, TaskOutcome):
            return await run.record(result)
        copied, copy_error, report = await _copy_outputs(
            sandbox, result, folder / OUTPUT_FOLDER, copy_limits or CopyLimits()
        )
    outcome = TaskOutcome.from_agent_result(
        result, model=config.model, results_dir=folder, output_files=copied,
        total_time_s=run.elapsed_s(), error=copy_error,
        copy_back=report.to_record() if report is not None else None,
    )  # fmt: skip
    return await run.record(outcome)


class _Execution:
    """One execute_task call's bookkeeping: the clock, the loop's result once it reported
    one, and the outcomes of the ways a run can break."""

    def __init__(
        self,
        spec: TaskSpec,
        model: Model,
        config: AgentConfig,
        folder: Path,
        on_event: EventSink | None,
    ) -> None:
        self.task = spec.task
        self.model = model
        self.config = config
        self.folder = folder
        self.on_event = on_event
        self.started = time.perf_counter()
        self.finished: list[AgentResult] = []

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    def observe(self, event: AgentEvent) -> None:
        if isinstance(event, RunFinished):
            self.finished.append(event.result)
        if self.on_event is not None:
            self.on_event(event)

    def failure(self, reason: RunFailure | StopReason, error: str) -> TaskOutcome:
        return TaskOutcome.failure(
            self.task.id, reason, error, model=self.config.model, results_dir=self.folder,
            total_time_s=self.elapsed_s(),
        )  # fmt: skip

    async def record(self, outcome: TaskOutcome) -> TaskOutcome:
        await asyncio.to_thread(write_result_file, self.folder / RESULT_FILE, outcome)
        return outcome

    async def loop(
        self, sandbox: Sandbox, trajectory: TrajectoryWriter
    ) -> AgentResult | TaskOutcome:
        """The agent loop's result, or the outcome of a run that broke (the error contract:
        whatever broke, the run leaves a result.json and an outcome)."""
        task = self.task
        try:
            return await run_agent(
                task, sandbox, self.model, self.config, trajectory=trajectory, on_event=self.observe
            )
        except TaskFileError as error:  # an input file vanished or became unreadable
            trajectory.close()
            _remove_if_empty(trajectory.path)  # the loop reads its inputs before any record
            return self.failure(RunFailure.INVALID_TASK, str(error))
        except Exception as error:
            log.warning("task_crashed", task=task.id, error=repr(error))
            log.debug("task_crash_traceback", task=task.id, exc_info=True)
            return _crashed(
                task, error, self.config.model, self.folder, started=self.started,
                finished=self.finished,
            )  # fmt: skip
        except asyncio.CancelledError:
            partial = self.finished[0] if self.finished else None
            outcome = _cancelled_outcome(
                task, partial, self.config.model, self.folder, self.started
            )
            # Synchronous on purpose: nothing may be awaited between a cancellation and the
            # record of it, or a second Ctrl-C could leave no result behind.
            write_result_file(self.folder / RESULT_FILE, outcome)
            raise


async def run_folder(results_dir: Path, task_id: str) -> Path:
    """A new, empty, private folder for one run of the task under `results_dir`."""
    return await asyncio.to_thread(new_run_folder, results_dir, task_id)


def _crashed(
    task: Task,
    error: Exception,
    model: str,
    folder: Path,
    *,
    started: float,
    finished: list[AgentResult],
) -> TaskOutcome:
    """An internal_error outcome (exit 1) for a run that raised instead of ending."""
    text = f"{type(error).__name__}: {error}"
    if finished:  # the loop had recorded its result; what broke came after it
        return TaskOutcome.from_agent_result(
            finished[0], model=model, results_dir=folder, output_files=[],
            total_time_s=time.perf_counter() - started, error=text,
        )  # fmt: skip
    return TaskOutcome.failure(
        task.id, RunFailure.INTERNAL_ERROR, text, model=model, results_dir=folder,
        total_time_s=time.perf_counter() - started,
    )  # fmt: skip


def _cancelled_outcome(
    task: Task, partial: AgentResult | None, model: str, folder: Path, started: float
) -> TaskOutcome:
    if partial is None:
        return TaskOutcome.failure(
            task.id, StopReason.CANCELLED, "the run was cancelled", model=model,
            results_dir=folder, total_time_s=time.perf_counter() - started,
        )  # fmt: skip
    return TaskOutcome.from_agent_result(
        partial, model=model, results_dir=folder, output_files=[],
        total_time_s=time.perf_counter() - started,
    )  # fmt: skip


async def _copy_outputs(
    sandbox: Sandbox, result: AgentResult, local_dir: Path, limits: CopyLimits
) -> tuple[list[str], str | None, CopyReport | None]:
    """Copy the sandbox's output directory back: (relative paths, error or None, report).

    What the copy skipped (links, FIFOs, devices, paths outside the folder, files over the
    limits) is in the report; an error means nothing could be copied at all.
    """
    if not result.output_files or result.stop_reason == StopReason.SANDBOX_LOST:
        return [], None, None
    try:
        report = await sandbox.copy_tree(sandbox.paths.output_dir, local_dir, limits)
    except (SandfleetError, OSError) as error:  # OSError: the results folder is unwritable
        return [], f"copying the output files failed: {error}", None
    if report.skipped_total or report.truncated:
        log.warning(
            "copy_back_incomplete",
            files=len(report.files),
            skipped=report.skipped_total,
            truncated=report.truncated,
        )
    return sorted(report.files), None, report


def _remove_if_empty(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.stat().st_size == 0:
            path.unlink()
