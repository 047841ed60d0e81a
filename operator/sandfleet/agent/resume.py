"""Continuing an interrupted run from its trajectory, in another process.

A controller that restarts mid-run finds the sandbox as it was and the trajectory holding
every record written so far (records are flushed one by one). `resume_state` rebuilds what
the loop needs from those records; `resume_agent` continues the run from there, appending
to the same trajectory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sandfleet.agent.config import AgentConfig, Task
from sandfleet.agent.events import EventSink
from sandfleet.agent.loop import AgentLoop
from sandfleet.agent.model import Model
from sandfleet.agent.recorded_run import (
    LOST_RESULT_OBSERVATION,
    NOT_RUN_OBSERVATION,
    ResumeError,
    ResumeState,
    TranscriptEntry,
    rebuild_state,
    transcript_messages,
)
from sandfleet.agent.results import AgentResult
from sandfleet.agent.sandbox_access import AgentSandbox
from sandfleet.trajectory.reader import mend_trajectory, read_trajectory
from sandfleet.trajectory.writer import TrajectoryWriter

__all__ = [
    "LOST_RESULT_OBSERVATION",
    "NOT_RUN_OBSERVATION",
    "ResumeError",
    "ResumeState",
    "TranscriptEntry",
    "finished_result",
    "load_resume_state",
    "mend_torn_tail",
    "resume_agent",
    "resume_state",
    "transcript_messages",
]


def resume_state(
    records: Iterable[Mapping[str, Any]], *, carry_on_cancelled: bool = False
) -> ResumeState | None:
    """The state to continue a run from; None when the run has its result record (it
    finished: report that result, see `finished_result`).

    With `carry_on_cancelled`, a `cancelled` result counts as an interruption instead: for
    a controller whose shutdown cancelled the loop without `suspend_on_cancel`.
    Raises ResumeError when the records are unreadable, garbled or of an unknown format,
    or when there are none (nothing was recorded: run the task afresh instead).
    """
    try:
        listed = list(records)
    except ValueError as exc:  # read_trajectory: a bad line before the last one
        raise ResumeError(f"the trajectory cannot be read: {exc}") from exc
    result = finished_result(listed)
    paused = carry_on_cancelled and result is not None and result.get("stop_reason") == "cancelled"
    if result is not None and not paused:
        return None
    return rebuild_state(listed)


def finished_result(records: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The run's result record (AgentResult.to_record() plus "kind"), if it has one.

    A result followed by a `resumed` notice does not count: the run went on after it (a
    caller may resume a run whose shutdown recorded a `cancelled` result).
    """
    result: Mapping[str, Any] | None = None
    for record in records:
        if not isinstance(record, Mapping):
            continue
        if record.get("kind") == "result":
            result = record
        elif record.get("kind") == "notice" and record.get("event") == "resumed":
            result = None
    return result


async def load_resume_state(path: Path, *, carry_on_cancelled: bool = False) -> ResumeState | None:
    """`resume_state` of the trajectory file at `path`, read in a worker thread.

    The file is mended first (see `mend_torn_tail`): a line a crash tore, even inside a
    multi-byte character, is then no obstacle. A missing or unreadable file is a ResumeError.
    """

    def load() -> ResumeState | None:
        mend_torn_tail(path)
        return resume_state(read_trajectory(path), carry_on_cancelled=carry_on_cancelled)

    try:
        return await asyncio.to_thread(load)
    except OSError as exc:
        raise ResumeError(f"cannot read the trajectory {path}: {exc}") from exc


async def resume_agent(
    task: Task,
    sandbox: AgentSandbox,
    model: Model,
    config: AgentConfig,
    state: ResumeState,
    *,
    trajectory: TrajectoryWriter | None = None,
    on_event: EventSink | None = None,
) -> AgentResult:
    """Continue the run `state` describes, in the same sandbox, appending to the same
    trajectory file (open a new TrajectoryWriter on it: writers append).

    Turns go on from `state.turns + 1` within `config.max_turns`; the task files are not
    uploaded again; the result counts the whole run. Like run_agent otherwise. Raises
    ResumeError when `state` is of another task.
    """
    loop = AgentLoop(
        task, sandbox, model, config, trajectory=trajectory, on_event=on_event, resume=state
    )
    if trajectory is not None:
        await asyncio.to_thread(mend_torn_tail, trajectory.path)
    return await loop.run()


def mend_torn_tail(path: Path) -> None:
    """End the trajectory file on a line boundary before records are appended to it: a
    last line a crash tore is cut off, a whole one that lost its newline gets it back
    (sandfleet.trajectory.reader.mend_trajectory)."""
    mend_trajectory(path)
