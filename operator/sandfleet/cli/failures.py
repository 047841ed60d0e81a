"""The CLI's error contract in one place: an exception that reaches `main` -> exit code, one line.

Subcommands handle what they expect and write result.json; this table is the net below
them, so that no input (a flag, a task folder, a trajectory, an endpoint's reply) ever ends
in a traceback. The traceback of an unexpected error goes to the debug log only.
"""

from __future__ import annotations

from collections.abc import Sequence

from sandfleet.agent import TaskFileError
from sandfleet.agent.recorded_run import ResumeError
from sandfleet.cli.batch_files import BatchFileError
from sandfleet.cli.execution import ConfigurationError
from sandfleet.cli.exit_codes import ExitCode
from sandfleet.errors import (
    GatewayConfigError,
    GatewayError,
    ModelError,
    SandboxLostError,
    SandboxStartError,
    SandfleetError,
    ToolError,
)
from sandfleet.eval.bench_folder import BenchError
from sandfleet.eval.records import RecordsError
from sandfleet.runs.replay import ReplayError
from sandfleet.sandbox.copy_back import CopyBackError
from sandfleet.settings import SettingsError
from sandfleet.tasks import TaskInputError

# First match wins: subclasses before their bases.
_EXIT_CODES: Sequence[tuple[tuple[type[BaseException], ...], ExitCode]] = (
    (
        (
            SettingsError, ConfigurationError, TaskInputError, TaskFileError, BatchFileError,
            ReplayError, ResumeError, BenchError, RecordsError, CopyBackError,
            GatewayConfigError,
        ),
        ExitCode.USAGE,
    ),
    ((ModelError,), ExitCode.MODEL_ERROR),
    ((SandboxLostError, SandboxStartError, ToolError, GatewayError), ExitCode.SANDBOX_ERROR),
)  # fmt: skip


def exit_for(error: BaseException) -> tuple[ExitCode, str]:
    """The exit code and the one line (without "error: ") for an error no subcommand caught."""
    for kinds, code in _EXIT_CODES:
        if isinstance(error, kinds):
            return code, _one_line(str(error))
    if isinstance(error, SandfleetError):
        return ExitCode.NOT_SUBMITTED, _one_line(str(error))
    if isinstance(error, OSError):
        where = f" ({error.filename})" if error.filename else ""
        return ExitCode.NOT_SUBMITTED, _one_line(f"{error.strerror or error}{where}")
    if isinstance(error, MemoryError | RecursionError):
        return ExitCode.NOT_SUBMITTED, f"out of memory or stack ({type(error).__name__})"
    return ExitCode.NOT_SUBMITTED, _one_line(
        f"internal error (a bug in sandfleet): {type(error).__name__}: {error}; "
        "--log-level DEBUG shows the traceback"
    )


def _one_line(text: str, limit: int = 500) -> str:
    flat = " ".join(text.split()) or "(no message)"
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
