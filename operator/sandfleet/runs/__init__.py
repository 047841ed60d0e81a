"""Runs of tasks as a library, used by the CLI, `serve` and eval: `execute_task` (one task
end to end), the sources of sandboxes, run folders and what a run came to (TaskOutcome),
the index of the runs under a results folder, and the replay of a recorded trajectory.

Nothing here parses a command line or draws on a terminal (import contract
"runs-is-a-library"); the CLI adapts it (sandfleet.cli.execution, .run, .batch, .replay).
"""

from __future__ import annotations

from sandfleet.runs.execution import execute_task, run_folder
from sandfleet.runs.outcomes import RunFailure, TaskOutcome
from sandfleet.runs.sandboxes import GatewaySandboxes, LocalSandboxes, SandboxSource

__all__ = [
    "GatewaySandboxes",
    "LocalSandboxes",
    "RunFailure",
    "SandboxSource",
    "TaskOutcome",
    "execute_task",
    "run_folder",
]
