"""What runtime calls return, as plain values: command results, uploads, file entries, stats."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class CommandResult:
    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    interrupted: bool
    shell_exited: bool
    truncated: bool
    duration_s: float
    cwd: str


@dataclasses.dataclass(frozen=True, slots=True)
class UploadResult:
    path: str
    size: int
    sha256: str


@dataclasses.dataclass(frozen=True, slots=True)
class FileEntry:
    path: str
    is_dir: bool
    size: int
    mode: int


@dataclasses.dataclass(frozen=True, slots=True)
class SandboxStats:
    memory_current_bytes: int
    memory_peak_bytes: int
    memory_source: str
    process_count: int
    uptime_s: float
    last_activity_unix: float
    idle_s: float
    bash_sessions: int
    running_commands: int
    session: str = ""
    """The session the sandbox is bound to (bind_session); empty before any binding."""
    bash_session_names: tuple[str, ...] = ()
    """The live bash sessions' names (empty from a runtime that predates the list)."""


__all__ = ["CommandResult", "FileEntry", "SandboxStats", "UploadResult"]
