"""Runs of tasks as a library, used by the CLI, `serve` and eval: `execute_task` (one task
end to end), the sources of sandboxes, run folders and what a run came to (TaskOutcome),
the index of the runs under a results folder, and the replay of a recorded trajectory.

Nothing here parses a command line or draws on a terminal (import contract
"runs-is-a-library"); the CLI adapts it (sandfleet.cli.execution, .run, .batch, .replay).
The names below load on first use: `sandfleet runs` or `--help` need not load the SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "GatewaySandboxes",
    "LocalSandboxes",
    "RunFailure",
    "SandboxSource",
    "TaskOutcome",
    "execute_task",
    "run_folder",
]

_LAZY = {
    "execute_task": "sandfleet.runs.execution",
    "run_folder": "sandfleet.runs.execution",
    "RunFailure": "sandfleet.runs.outcomes",
    "TaskOutcome": "sandfleet.runs.outcomes",
    "GatewaySandboxes": "sandfleet.runs.sandboxes",
    "LocalSandboxes": "sandfleet.runs.sandboxes",
    "SandboxSource": "sandfleet.runs.sandboxes",
}

if TYPE_CHECKING:
    from sandfleet.runs.execution import execute_task, run_folder
    from sandfleet.runs.outcomes import RunFailure, TaskOutcome
    from sandfleet.runs.sandboxes import GatewaySandboxes, LocalSandboxes, SandboxSource


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sandfleet.runs' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
