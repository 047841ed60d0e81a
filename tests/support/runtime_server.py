"""Start a real runtime agent for tests: in-process (fast) or as a child process."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from sandfleet_runtime.server import RuntimeServer, build_server
from sandfleet_runtime.settings import RuntimeSettings


@contextlib.asynccontextmanager
async def running_runtime(
    workdir: Path, **overrides: object
) -> AsyncIterator[tuple[RuntimeServer, str]]:
    """An in-process runtime on 127.0.0.1:<free port>; yields (server, token)."""
    token = secrets.token_urlsafe(16)
    # As __main__ passes the agent's own environment, unless the test gives one.
    settings = RuntimeSettings(
        listen="127.0.0.1:0",
        token=token,
        workdir=workdir,
        **{"shell_env": tuple(os.environ.items()), **overrides},  # type: ignore[arg-type]
    )
    runtime = build_server(settings)
    await runtime.start()
    try:
        yield runtime, token
    finally:
        await runtime.stop(grace_s=None)


def spawn_runtime_process(
    workdir: Path,
    token: str,
    *extra_args: str,
    token_via: str = "env",
    prefix: Sequence[str] = (),
) -> tuple[subprocess.Popen[bytes], int]:
    """`python -m sandfleet_runtime` as a child process; returns (process, port).

    `token_via` "env" (SANDFLEET_RUNTIME_TOKEN) or "fd" (a pipe, --token-fd); `prefix` goes
    before the interpreter (e.g. setpriv to run as another user).
    Blocks until the agent reports its port: call it through asyncio.to_thread from async code.
    """
    read_fd, write_fd = os.pipe()
    log_path = workdir / "runtime.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDFLEET_RUNTIME_TOKEN")}
    pass_fds = [write_fd]
    if token_via == "env":
        env["SANDFLEET_RUNTIME_TOKEN"] = token
    else:
        token_read, token_write = os.pipe()
        os.write(token_write, token.encode())
        os.close(token_write)
        pass_fds.append(token_read)
        extra_args = ("--token-fd", str(token_read), *extra_args)
    with log_path.open("wb") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            [
                *prefix,
                sys.executable,
                "-m",
                "sandfleet_runtime",
                "--listen",
                "127.0.0.1:0",
                "--ready-fd",
                str(write_fd),
                "--workdir",
                str(workdir),
                *extra_args,
            ],
            env=env,
            pass_fds=pass_fds,
            stderr=log,
            start_new_session=True,
        )
    for fd in pass_fds:
        os.close(fd)
    with os.fdopen(read_fd, "rb") as ready:
        line = ready.readline()
    if not line:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"runtime failed to start: {log_path.read_text(errors='replace')}")
    return proc, int(line)
