"""One bash process speaking the driver protocol: spawned, sent commands, heard reporting.

A `Shell` knows nothing of sessions, timeouts or output capture: it delivers a command
message, turns the status pipe's reports into `on_status` calls, signals the process while
it runs, and says (through `exited`) when it is gone. shell_driver.py defines the protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from sandfleet_runtime.bash.processes import ChildReaper, pipe, spawn_session_leader
from sandfleet_runtime.bash.shell_driver import (
    BOOTSTRAP,
    BOOTSTRAP_VARIABLE,
    COMMAND_FD,
    DRIVER_FILE_NAME,
    STATUS_FD,
    shell_argv,
    write_driver,
)
from sandfleet_runtime.errors import UnavailableError

__all__ = ["CHILD_FDS", "Shell", "StatusCallback", "command_message", "shell_status", "spawn_shell"]

log = logging.getLogger(__name__)

CHILD_FDS = frozenset({0, 1, 2, COMMAND_FD, STATUS_FD})
"""The fds a shell is given; pipes meant for it must not sit on them in the runtime."""

StatusCallback = Callable[["Shell", int, int, str], None]
"""Called with (shell, seq, status, cwd) for each report the driver writes."""


def shell_status(returncode: int) -> int:
    """The status bash would report for a process that ended this way (signal N: 128+N)."""
    return 128 - returncode if returncode < 0 else returncode


def command_message(seq: int, command: str) -> bytes:
    """The message the driver reads for one command; `command` holds no NUL."""
    return b"%d\n%s\0" % (seq, command.encode())


class Shell:
    """One bash process of a session, with its private command and status pipes."""

    def __init__(
        self,
        pid: int,
        command_fd: int,
        status_fd: int,
        exited: asyncio.Future[int],
        on_status: StatusCallback,
    ) -> None:
        self.pid = pid
        self.exited = exited
        self._command_fd = command_fd
        self._status_fd = status_fd
        self._on_status = on_status
        self._unsent = b""
        self._received = b""
        self._loop = asyncio.get_running_loop()
        os.set_blocking(command_fd, False)
        os.set_blocking(status_fd, False)
        self._loop.add_reader(status_fd, self._read_status)

    @property
    def returncode(self) -> int | None:
        if self.exited.done() and not self.exited.cancelled():
            return self.exited.result()
        return None

    def signal(self, signum: int) -> None:
        # Once reaped, the pid may belong to someone else: only signal a running shell.
        if not self.exited.done():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def send(self, message: bytes) -> None:
        self._unsent = message
        self._write_unsent()
        if self._unsent:
            # Bigger than the pipe: the driver drains it as it reads, so wait for room.
            self._loop.add_writer(self._command_fd, self._write_unsent)

    def _write_unsent(self) -> None:
        try:
            written = os.write(self._command_fd, self._unsent)
        except BlockingIOError:
            return
        except OSError:  # the shell is gone; its exit future tells the session
            written = len(self._unsent)
        self._unsent = self._unsent[written:]
        if not self._unsent:
            self._loop.remove_writer(self._command_fd)

    def _read_status(self) -> None:
        try:
            data = os.read(self._status_fd, 4096)
        except BlockingIOError:
            return
        if not data:
            self._loop.remove_reader(self._status_fd)
            return
        self._received += data
        while (end := self._received.find(b"\0")) >= 0:
            report, self._received = self._received[:end], self._received[end + 1 :]
            try:
                seq, status, cwd = report.split(b" ", 2)
                self._on_status(self, int(seq), int(status), cwd.decode(errors="replace"))
            except ValueError:
                log.warning("shell_report_malformed", extra={"pid": self.pid, "report": report})

    def close(self) -> None:
        self._loop.remove_reader(self._status_fd)
        self._loop.remove_writer(self._command_fd)
        os.close(self._command_fd)
        os.close(self._status_fd)


def spawn_shell(
    *,
    bash: str,
    driver_dir: Path,
    workdir: Path,
    env: Mapping[str, str],
    stdout_fd: int,
    stderr_fd: int,
    reaper: ChildReaper,
    on_status: StatusCallback,
) -> Shell:
    """Starts bash on the driver in a new Unix session, writing to `stdout_fd`/`stderr_fd`.

    The shell waits for its first command, so the caller can still confine it (process
    limits) before anything runs. Raises UnavailableError when bash cannot be started.
    """
    if not (driver_dir / DRIVER_FILE_NAME).exists():  # something cleaned /tmp: put it back
        # (A reset of a recycled sandbox restores /tmp, which removes the directory too.)
        driver_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_driver(driver_dir)
    command_read, command_write = pipe(avoid=CHILD_FDS)
    status_read, status_write = pipe(avoid=CHILD_FDS)
    child_fds = {1: stdout_fd, 2: stderr_fd, COMMAND_FD: command_read, STATUS_FD: status_write}
    try:
        argv = shell_argv(driver_dir, workdir)
        pid = spawn_session_leader(bash, argv, {**env, BOOTSTRAP_VARIABLE: BOOTSTRAP}, child_fds)
    except OSError as error:
        os.close(command_write)
        os.close(status_read)
        raise UnavailableError(f"Could not start bash ({bash}): {error}") from error
    finally:
        os.close(command_read)
        os.close(status_write)
    exited = reaper.watch(pid)  # same loop step as the spawn: no exit can be missed
    return Shell(pid, command_write, status_read, exited, on_status)
