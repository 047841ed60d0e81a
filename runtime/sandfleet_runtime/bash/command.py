"""The command in flight in a session's shell: the events that can end it, and how it is stopped.

A command ends when the driver reports, when the shell exits, or on a trigger: the timeout,
an interrupt, or the session being restarted or closed. A timeout or interrupt sends SIGINT
to the shell, whose INT trap unwinds the running command back to the driver (see
shell_driver.py), and signals every process the command started. A shell that does not
come back (a builtin loop that ignores SIGINT) is killed; the session replaces it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import logging
import signal

from sandfleet_runtime.bash.processes import (
    CommandScope,
    SessionProcesses,
    kill_until_gone,
    process_table,
    signal_all,
)
from sandfleet_runtime.bash.shell import Shell

__all__ = ["SHELL_RESPONSE_S", "CommandResult", "Outcome", "RunningCommand", "kill_started"]

log = logging.getLogger(__name__)

SHELL_RESPONSE_S = 2.0
"""How long a signalled shell gets to report or exit before it counts as unresponsive."""
_INTERRUPT_GRACE_S = 1.0
_KILL_ROUND_S = 0.1


class Outcome(enum.Enum):
    EXITED = "exited"
    TIMED_OUT = "timed_out"
    INTERRUPTED = "interrupted"
    SHELL_EXITED = "shell_exited"
    """The command ended the shell (`exit`, `exec`); the next call starts a new one."""


@dataclasses.dataclass(frozen=True, slots=True)
class CommandResult:
    stdout: str
    stderr: str
    """Ends with bracketed notes for the model on what the outcome cannot say: a shell that
    ignored a timeout and was replaced, a process explosion that was killed."""
    exit_code: int | None
    """The command's status; None when it timed out. A shell killed by signal N gives 128+N."""
    outcome: Outcome
    stdout_truncated: bool
    stderr_truncated: bool
    stdout_total_bytes: int
    stderr_total_bytes: int
    duration_s: float
    cwd: str
    """The shell's working directory afterwards (the start directory for a new shell)."""


async def kill_started(
    processes: SessionProcesses, scope: CommandScope, deadline_s: float, *, stop_first: bool = False
) -> int:
    """Kills what the command of `scope` (or a later one) started; returns how many are left.

    `stop_first` (kill_until_none_listed) only for an earlier command's processes, never for the
    one the shell is running.
    """
    select = functools.partial(processes.started_by, scope)
    return await asyncio.to_thread(
        kill_until_gone, select, deadline_s=deadline_s, stop_first=stop_first
    )


def _signal_started(processes: SessionProcesses, scope: CommandScope, signum: int) -> None:
    signal_all(processes.started_by(scope, process_table()), signum)


class RunningCommand:
    """The command in flight and the events that can end it."""

    __slots__ = ("hard_stop", "notes", "scope", "seq", "status", "trigger", "waiter")

    def __init__(self, seq: int, scope: CommandScope) -> None:
        self.seq = seq
        self.scope = scope
        self.status: tuple[int, str] | None = None
        self.trigger: Outcome | None = None
        self.hard_stop = False
        self.notes: list[str] = []
        self.waiter: asyncio.Future[None] | None = None

    def fire(self, trigger: Outcome, note: str | None = None, *, hard: bool = False) -> bool:
        if self.trigger is not None or self.status is not None:
            return False
        self.trigger, self.hard_stop = trigger, hard
        if note:
            self.notes.append(note)
        self.wake()
        return True

    def wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def wait(self, timeout_s: float | None = None) -> None:
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(self.waiter, timeout_s)
        except TimeoutError:
            pass
        finally:
            self.waiter = None

    async def stop(self, shell: Shell, processes: SessionProcesses, *, session: str) -> None:
        """SIGINT for the shell's trap, signals for the command's processes, then SIGKILL."""
        scope = self.scope
        loop = asyncio.get_running_loop()
        if self.hard_stop:
            shell.signal(signal.SIGKILL)
        else:
            log.info("command_stopping", extra={"session": session, "reason": self.trigger})
            shell.signal(signal.SIGINT)
            if self.trigger is Outcome.INTERRUPTED:
                await asyncio.to_thread(_signal_started, processes, scope, signal.SIGINT)
                await self._await_reply(shell, _INTERRUPT_GRACE_S)
            deadline = loop.time() + SHELL_RESPONSE_S
            while not self._replied(shell) and loop.time() < deadline:
                await kill_started(processes, scope, _KILL_ROUND_S)
                await self._await_reply(shell, _KILL_ROUND_S)
                shell.signal(signal.SIGINT)
            if not self._replied(shell):
                log.warning("shell_unresponsive", extra={"session": session, "pid": shell.pid})
                shell.signal(signal.SIGKILL)
        # Whatever the command started and is still alive, background jobs included.
        await kill_started(processes, scope, 5.0)
        if self.status is None:
            await asyncio.wait({shell.exited}, timeout=SHELL_RESPONSE_S)

    def _replied(self, shell: Shell) -> bool:
        return self.status is not None or shell.exited.done()

    async def _await_reply(self, shell: Shell, timeout_s: float) -> None:
        if not self._replied(shell):
            await self.wait(timeout_s)
