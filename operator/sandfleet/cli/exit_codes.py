"""The process exit codes of every `sandfleet` subcommand, and the one each outcome means."""

from __future__ import annotations

import enum
from collections.abc import Mapping

from sandfleet.agent import StopReason
from sandfleet.runs.outcomes import NO_ANSWER, RunFailure, TaskOutcome


class ExitCode(enum.IntEnum):
    """Process exit codes of every `sandfleet` subcommand (documented in `sandfleet --help`)."""

    OK = 0
    """run: the model submitted; batch: every task submitted; replay: every observation matched."""
    NOT_SUBMITTED = 1
    """run: ended without submit (max_turns, context_exceeded, no_tool_call, internal error);
    batch: some task did not submit; replay: some observation differed."""
    USAGE = 2
    """Bad flags, settings, task input or trajectory file (argparse uses 2 as well)."""
    MODEL_ERROR = 3
    """The model endpoint failed or rejected the request; batch: the endpoint check before
    the first task failed, the first tasks (--fail-fast) or every task hit model errors."""
    SANDBOX_ERROR = 4
    """The sandbox could not start or was lost."""
    NO_ANSWER = 5
    """run: the model submitted without an answer (no answer file, no text); batch: every
    task submitted, some without an answer."""
    FETCH_FAILED = 6
    """trajectory: no trajectory is stored for the session, or the operator or the API server
    could not answer (the code 1 would say a model did not submit)."""
    CANCELLED = 130
    """Interrupted (Ctrl-C), 128 + SIGINT as shells report it."""


_EXIT_CODES: Mapping[str, ExitCode] = {
    StopReason.SUBMITTED: ExitCode.OK,
    StopReason.MAX_TURNS: ExitCode.NOT_SUBMITTED,
    StopReason.CONTEXT_EXCEEDED: ExitCode.NOT_SUBMITTED,
    StopReason.NO_TOOL_CALL: ExitCode.NOT_SUBMITTED,
    StopReason.MODEL_ERROR: ExitCode.MODEL_ERROR,
    StopReason.SANDBOX_LOST: ExitCode.SANDBOX_ERROR,
    StopReason.CANCELLED: ExitCode.CANCELLED,
    RunFailure.INVALID_TASK: ExitCode.USAGE,
    RunFailure.LAUNCH_FAILED: ExitCode.SANDBOX_ERROR,
    RunFailure.INTERNAL_ERROR: ExitCode.NOT_SUBMITTED,
}


def outcome_exit_code(outcome: TaskOutcome) -> ExitCode:
    """The exit code of `sandfleet run` for a run that came to `outcome`."""
    if outcome.status == NO_ANSWER:
        return ExitCode.NO_ANSWER
    return _EXIT_CODES.get(outcome.stop_reason, ExitCode.NOT_SUBMITTED)
