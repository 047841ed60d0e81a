"""`sandfleet-runtime`: flags and environment -> RuntimeSettings -> logging -> serve()."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from .settings import (
    DEFAULT_MAX_OUTPUT_CHARS,
    DEFAULT_MAX_UPLOAD_BYTES,
    DEFAULT_RESET_BASELINE_MAX_BYTES,
    DEFAULT_TIMEOUT_S,
    MAX_UPLOAD_BYTES_ENV,
    RESET_PATHS_ENV,
    RuntimeSettings,
)
from .token_source import (
    TOKEN_ENV,
    TOKEN_FILE_ENV,
    is_secret,
    read_token_fd,
    read_token_file,
    seal_process,
)

_PR_SET_PDEATHSIG = 1
_RENAMED_FLAGS = {
    "--default-timeout": "--default-timeout-seconds",
    "--max-timeout": "--max-timeout-seconds",
}
"""Old flag -> its name now (durations say seconds: docs/architecture.md); the old still works."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sandfleet-runtime",
        description="The Sandfleet runtime agent: bash sessions, file editor, file transfer "
        "and stats over gRPC. The bearer token comes from --token-fd, --token-file or (a "
        "fallback for images) SANDFLEET_RUNTIME_TOKEN; the shells never see it.",
    )
    add = parser.add_argument
    add("--listen", default="127.0.0.1:50051", help="HOST:PORT to bind (port 0: any free port)")
    add("--token-fd", type=int, help="read the bearer token from this fd until EOF, then close it")
    add(
        "--token-file",
        type=Path,
        help="file holding the bearer token (overrides the env var); deleted after reading "
        "when it is owned by the agent's uid",
    )
    add("--allow-no-auth", action="store_true", help="serve without a token (trusted dev only)")
    add("--workdir", type=Path, default=Path.cwd(), help="initial cwd of bash sessions")
    add("--ready-fd", type=int, help="write the bound port to this fd once serving, then close it")
    add("--exit-with-parent", action="store_true", help="die when the parent process dies")
    add(
        "--default-timeout-seconds",
        "--default-timeout",
        dest="default_timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help="seconds per command",
    )
    add("--max-timeout-seconds", "--max-timeout", dest="max_timeout", type=float,
        default=3600.0, help="cap in seconds on a requested timeout")  # fmt: skip
    add("--max-output-chars", type=int, default=DEFAULT_MAX_OUTPUT_CHARS, help="kept per stream")
    add("--max-sessions", type=int, default=64)
    add("--max-processes", type=int, help="pids limit for everything the sessions start")
    add("--max-memory", type=int, help="memory limit in bytes for everything the sessions start")
    add(
        "--reset-baseline-max-bytes",
        type=int,
        default=DEFAULT_RESET_BASELINE_MAX_BYTES,
        help="working-tree bytes kept in memory for Reset (larger trees: no Reset; 0: never)",
    )
    add(
        "--max-upload-bytes",
        type=_positive_int,
        help=f"largest file one upload may write (default: ${MAX_UPLOAD_BYTES_ENV}, else "
        f"{DEFAULT_MAX_UPLOAD_BYTES})",
    )
    add("--log-level", default="INFO")
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _max_upload_bytes(flag: int | None, environ: Mapping[str, str]) -> int:
    """The flag, else the environment (what the operator sets on a sandbox pod), else the
    default; a malformed variable stops the agent with a message rather than lifting the cap."""
    if flag is not None:
        return flag
    text = environ.get(MAX_UPLOAD_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_UPLOAD_BYTES
    try:
        return _positive_int(text)
    except ValueError:
        raise SystemExit(
            f"sandfleet-runtime: {MAX_UPLOAD_BYTES_ENV}={text!r} is not a positive number of bytes"
        ) from None


def renamed_flags_used(argv: Sequence[str]) -> list[str]:
    """The old flag spellings in `argv` (`--max-timeout 5` or `--max-timeout=5`)."""
    return [old for old in _RENAMED_FLAGS if any(a.split("=")[0] == old for a in argv)]


def _reset_paths(environ: Mapping[str, str]) -> tuple[Path, ...]:
    """RESET_PATHS_ENV's directories, `~` as the home directory, each once; ones that do
    not exist are left out (nothing there to restore)."""
    home = environ.get("HOME") or str(Path.home())
    paths = []
    for item in environ.get(RESET_PATHS_ENV, "").split(":"):
        if item.strip():
            path = Path(home if item.strip() == "~" else item.strip())
            if path.is_dir():
                paths.append(path.resolve())
    return tuple(dict.fromkeys(paths))


def settings_from(
    argv: Sequence[str], environ: Mapping[str, str]
) -> tuple[RuntimeSettings, int | None]:
    """Build settings from flags and environment; the token never comes from argv.

    Reads (and consumes) the token fd or file. Precedence: --token-fd, --token-file,
    SANDFLEET_RUNTIME_TOKEN_FILE, SANDFLEET_RUNTIME_TOKEN.
    """
    args = _parser().parse_args(argv)
    for old in renamed_flags_used(argv):
        print(f"sandfleet-runtime: {old} is deprecated: use {_RENAMED_FLAGS[old]}", file=sys.stderr)
    token = environ.get(TOKEN_ENV) or None
    token_file = args.token_file or (
        Path(environ[TOKEN_FILE_ENV]) if environ.get(TOKEN_FILE_ENV) else None
    )
    try:
        if args.token_fd is not None:
            token = read_token_fd(args.token_fd) or None
        elif token_file is not None:
            token = read_token_file(token_file) or None
    except (OSError, UnicodeDecodeError) as error:
        source = f"fd {args.token_fd}" if args.token_fd is not None else str(token_file)
        raise SystemExit(
            f"sandfleet-runtime: cannot read the token from {source}: {error}"
        ) from None
    # The shells inherit the agent's environment, never its credentials.
    shell_env = tuple((key, value) for key, value in environ.items() if not is_secret(key))
    settings = RuntimeSettings(
        listen=args.listen,
        shell_env=shell_env,
        token=token,
        allow_no_auth=args.allow_no_auth,
        workdir=args.workdir.resolve(),
        default_timeout_s=args.default_timeout,
        max_timeout_s=args.max_timeout,
        default_max_output_chars=args.max_output_chars,
        max_sessions=args.max_sessions,
        max_processes=args.max_processes,
        max_memory_bytes=args.max_memory,
        exit_with_parent=args.exit_with_parent,
        reset_baseline_max_bytes=args.reset_baseline_max_bytes,
        max_upload_bytes=_max_upload_bytes(args.max_upload_bytes, environ),
        reset_paths=_reset_paths(environ),
        owns_process=True,
        log_level=args.log_level,
    )
    return settings, args.ready_fd


def _die_with_parent(parent_pid: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        raise SystemExit("parent process already gone")


def _skip_python_ssl() -> None:
    """Keep Python's ssl module (and libssl/libcrypto) out of the agent: ~4.4 MB RSS measured.

    asyncio imports ssl only to offer TLS streams, which the agent never opens; gRPC carries
    its own TLS. A None entry makes `import ssl` raise ImportError, which asyncio tolerates.
    """
    if "ssl" not in sys.modules:
        sys.modules["ssl"] = None  # type: ignore[assignment]


def main(argv: Sequence[str] | None = None) -> None:
    parent_pid = os.getppid()
    _skip_python_ssl()
    settings, ready_fd = settings_from(sys.argv[1:] if argv is None else argv, os.environ)
    # Before any shell exists: non-dumpable, token out of the environment and its /proc copy.
    seal_process(os.environ)
    from .logs import configure_logging

    configure_logging(settings.log_level)
    if settings.exit_with_parent:
        _die_with_parent(parent_pid)
    if settings.token is None and not settings.allow_no_auth:
        raise SystemExit(
            "sandfleet-runtime: no token; pass --token-fd or --token-file, or set "
            "SANDFLEET_RUNTIME_TOKEN "
            "(or --allow-no-auth for a trusted development setup)"
        )
    import asyncio

    from .server import serve

    asyncio.run(serve(settings, ready_fd=ready_fd))


if __name__ == "__main__":
    main()
