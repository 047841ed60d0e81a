"""Runtime configuration: one frozen object, built once in __main__ from flags and environment."""

from __future__ import annotations

import dataclasses
from pathlib import Path

DEFAULT_TIMEOUT_S = 120.0
"""Per-command timeout when the request gives none (the seed project's hard limit)."""
DEFAULT_MAX_OUTPUT_CHARS = 10_000
"""Characters kept per output stream (the seed project's clip length)."""
DEFAULT_RESET_BASELINE_MAX_BYTES = 64 * 1024 * 1024
"""Working-tree file content Reset keeps in memory (an image's workdir is usually small)."""
DEFAULT_MAX_UPLOAD_BYTES = 128 * 1024 * 1024
"""Largest file one UploadFile may write (128 MiB): a caller cannot fill the sandbox's disk,
or the node's, with one stream. SANDFLEET_RUNTIME_MAX_UPLOAD_BYTES or --max-upload-bytes."""
MAX_UPLOAD_BYTES_ENV = "SANDFLEET_RUNTIME_MAX_UPLOAD_BYTES"
RESET_PATHS_ENV = "SANDFLEET_RUNTIME_RESET_PATHS"
"""Colon-separated directories Reset restores besides the working tree (`~`: the home)."""


@dataclasses.dataclass(frozen=True, slots=True)
class RuntimeSettings:
    """Everything the runtime agent needs to serve; nothing below __main__ reads os.environ."""

    listen: str = "127.0.0.1:50051"
    """gRPC bind address; port 0 picks a free port (reported through --ready-fd)."""
    token: str | None = None
    """Bearer token every RPC but health must carry. None only with allow_no_auth."""
    allow_no_auth: bool = False
    """Serve without a token (explicit opt-in for trusted development setups)."""
    workdir: Path = Path(".")
    """Initial working directory of every bash session."""
    shell_env: tuple[tuple[str, str], ...] = ()
    """The complete environment of bash sessions (__main__ passes its own, minus the token)."""
    default_timeout_s: float = DEFAULT_TIMEOUT_S
    max_timeout_s: float = 3600.0
    """Upper bound for any single command, whatever the request asks for."""
    default_max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    max_output_chars: int = 1_000_000
    """Upper bound a request may raise its output cap to."""
    max_sessions: int = 64
    """Concurrent bash sessions; one more gets RESOURCE_EXHAUSTED."""
    max_processes: int | None = None
    """pids limit for everything the sessions start (cgroup where writable, else RLIMIT_NPROC)."""
    max_memory_bytes: int | None = None
    """Memory limit for everything the sessions start (cgroup where writable)."""
    max_edit_file_bytes: int = 64 * 1024 * 1024
    """Largest file the editor will load."""
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    """Largest file one UploadFile may write; the stream is refused (RESOURCE_EXHAUSTED) as
    soon as it passes this, and nothing of it stays behind."""
    reset_baseline_max_bytes: int = DEFAULT_RESET_BASELINE_MAX_BYTES
    """File content of the working tree kept in memory for Reset; a larger tree (or 0)
    leaves Reset unavailable (FAILED_PRECONDITION), nothing else."""
    reset_paths: tuple[Path, ...] = ()
    """Writable directories outside the working tree that Reset also returns to how they
    were when the runtime started (a pool that recycles sandboxes: /tmp, /var/tmp, /dev/shm,
    the home directory); each within reset_baseline_max_bytes, else Reset is unavailable."""
    owns_process: bool = False
    """The runtime is its process's only purpose (the agent, not an in-process test
    server): Reset may kill every descendant of the process."""
    shutdown_grace_s: float = 5.0
    exit_with_parent: bool = False
    """Die when the parent process dies (local sandboxes: no orphans after a crash)."""
    log_level: str = "INFO"
