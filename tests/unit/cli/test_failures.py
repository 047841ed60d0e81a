"""cli.failures: every exception that reaches `main` maps to a documented exit code and line."""

from __future__ import annotations

import pytest

from sandfleet.agent import ModelError
from sandfleet.cli.execution import ConfigurationError
from sandfleet.cli.exit_codes import ExitCode
from sandfleet.cli.failures import exit_for
from sandfleet.errors import SandboxLostError, SandboxStartError, SandfleetError
from sandfleet.runs.replay import ReplayError
from sandfleet.settings import SettingsError
from sandfleet.tasks import TaskInputError


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (SettingsError("x"), ExitCode.USAGE),
        (ConfigurationError("x"), ExitCode.USAGE),
        (TaskInputError("x"), ExitCode.USAGE),
        (ReplayError("x"), ExitCode.USAGE),
        (ModelError("x"), ExitCode.MODEL_ERROR),
        (SandboxLostError("x"), ExitCode.SANDBOX_ERROR),
        (SandboxStartError("x"), ExitCode.SANDBOX_ERROR),
        (SandfleetError("x"), ExitCode.NOT_SUBMITTED),
    ],
)
def test_sandfleet_errors_map_to_their_documented_codes(error: Exception, code: ExitCode) -> None:
    assert exit_for(error) == (code, "x")


def test_an_unexpected_error_is_one_line_that_says_it_is_a_bug() -> None:
    code, line = exit_for(TypeError("bad\n  operand"))
    assert code == ExitCode.NOT_SUBMITTED
    assert line.startswith("internal error (a bug in sandfleet): TypeError: bad operand;")
    assert "\n" not in line


def test_os_and_memory_errors_are_one_line() -> None:
    code, line = exit_for(PermissionError(13, "Permission denied", "/results"))
    assert (code, line) == (ExitCode.NOT_SUBMITTED, "Permission denied (/results)")
    assert exit_for(MemoryError())[1] == "out of memory or stack (MemoryError)"
    assert len(exit_for(SandfleetError("y" * 5000))[1]) == 500
