"""SuspendedSandbox: what `Sandbox.suspend()` returns and `sandfleet sandboxes` lists.

A suspended sandbox is its files and its bash sessions' working directories and exported
environments, kept on disk (see docs/suspend.md); running processes are not kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

__all__ = ["SuspendedSandbox", "Suspender"]

PROCESSES_NOTE = (
    "running processes were not kept: foreground commands were interrupted and every "
    "process ended when the sandbox stopped"
)


@dataclasses.dataclass(frozen=True, slots=True)
class SuspendedSandbox:
    """One suspended sandbox: resume it with `Sandbox.resume(id)`."""

    id: str
    """The sandbox's id: a local sandbox's `sbx-...`, a cluster session's name."""
    size_bytes: int
    """The snapshot archive's size."""
    sha256: str
    """The archive's checksum, verified after writing and again before resume."""
    suspended_at: float
    """When it was suspended (Unix time)."""
    path: Path | None = None
    """The folder holding the archive and its manifest (None on a cluster: the operator's
    snapshot store holds it)."""
    sessions: tuple[str, ...] = ()
    """The bash sessions whose working directory and exported environment were saved
    (local sandboxes; on a cluster `note` says what was kept)."""
    saved_paths: tuple[str, ...] = ()
    """The sandbox paths the archive holds (working tree, HOME, /tmp, /var/tmp; local)."""
    processes_kept: bool = False
    """Always False: running processes do not survive a suspend."""
    note: str = PROCESSES_NOTE
    namespace: str | None = None
    """A cluster session's namespace (None: a local sandbox): `Sandbox.resume(record)`
    resumes it through the gateway."""


Suspender = Callable[[Sequence[str]], Awaitable[SuspendedSandbox]]
"""Suspends an opened sandbox given its bash sessions' names, then stops it (set by a
backend that can suspend: the local one, the gateway)."""
