"""One named bash session: its output pipes, its current shell (replaced when it exits), its lock.

A session runs one command at a time; callers queue on its lock. Notes for the model about
what happened between commands (a shell that had exited, a process explosion that was
killed) go at the end of the next result's stderr.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import secrets
import signal
from collections.abc import Callable, Mapping
from pathlib import Path

from sandfleet_runtime.bash.command import (
    SHELL_RESPONSE_S,
    CommandResult,
    Outcome,
    RunningCommand,
    kill_started,
)
from sandfleet_runtime.bash.limits import SessionLimits
from sandfleet_runtime.bash.output import OutputListener, SessionOutput
from sandfleet_runtime.bash.processes import (
    ChildReaper,
    CommandScope,
    SessionProcesses,
    kill_until_gone,
    pipe,
    process_table,
)
from sandfleet_runtime.bash.shell import (
    CHILD_FDS,
    Shell,
    command_message,
    shell_status,
    spawn_shell,
)
from sandfleet_runtime.bash.shell_driver import LOST_CHANNELS_STATUS
from sandfleet_runtime.errors import UnavailableError

__all__ = [
    "MARKER_VARIABLE",
    "SESSION_ENV_DEFAULTS",
    "BashSession",
    "SessionClosedError",
    "SessionConfig",
]

log = logging.getLogger(__name__)

SESSION_ENV_DEFAULTS = {"PYTHONUNBUFFERED": "1"}
"""Defaults of every session's environment, below the runtime's own."""
MARKER_VARIABLE = "SANDFLEET_SESSION_ID"
"""Exported into every session; lets close() find daemons that left the shell's tree."""


class SessionClosedError(Exception):
    """The session was closed while the call waited for it; retry on a fresh one."""


@dataclasses.dataclass(frozen=True, slots=True)
class SessionConfig:
    """What every session of one BashSessions shares."""

    workdir: Path
    env: Mapping[str, str]
    bash: str
    driver_dir: Path
    default_max_output_chars: int
    limits: SessionLimits | None
    reaper: ChildReaper
    activity: Callable[[], None]
    background: set[asyncio.Task[None]]
    """Tasks finishing abandoned commands; referenced so they are not garbage-collected."""


class BashSession:
    """One named session: its output pipes, its current shell, and the command in flight."""

    def __init__(self, name: str, config: SessionConfig) -> None:
        self.name = name
        self.closed = False
        self._config = config
        self._loop = asyncio.get_running_loop()
        self._lock = asyncio.Lock()
        marker = f"{os.getpid()}-{secrets.token_hex(6)}"
        # Python's stdout to a pipe is block-buffered, and a timeout's SIGKILL would drop
        # what a program printed; unbuffered (unless the environment says otherwise), it
        # reaches the pipe as printed, as it would on a terminal.
        self._env = {**SESSION_ENV_DEFAULTS, **config.env, MARKER_VARIABLE: marker}
        self.processes = SessionProcesses(f"{MARKER_VARIABLE}={marker}".encode())
        self._shell: Shell | None = None
        self._command: RunningCommand | None = None
        self._seq = 0
        self._notes: list[str] = []
        self._previous_scope: CommandScope | None = None
        self._limit_hits_seen: int | None = None
        # The output pipes outlive shells: background jobs of a replaced shell keep writing
        # into them, and their output shows up in later results as on a terminal.
        stdout_fd, self._stdout_sink = pipe(avoid=CHILD_FDS)
        stderr_fd, self._stderr_sink = pipe(avoid=CHILD_FDS)
        self._output = SessionOutput(
            stdout_fd, stderr_fd, idle_max_chars=config.default_max_output_chars, name=name
        )

    @property
    def running(self) -> bool:
        return self._command is not None

    async def run(
        self,
        command: str,
        *,
        timeout_s: float,
        max_output_chars: int,
        listener: OutputListener | None,
    ) -> CommandResult:
        await self._lock.acquire()
        current: RunningCommand | None = None
        handed_off = False
        try:
            if self.closed:
                raise SessionClosedError
            notes, self._notes = self._notes, []
            await self._stop_limit_breach(notes)
            shell = self._live_shell(notes)
            self._seq += 1
            current = self._command = RunningCommand(self._seq, CommandScope.begin(shell.pid))
            self._output.begin(max_output_chars, listener)
            self._config.activity()
            started = self._loop.time()
            shell.send(command_message(current.seq, command))
            timer = self._loop.call_later(timeout_s, current.fire, Outcome.TIMED_OUT)
            try:
                while (
                    current.status is None and current.trigger is None and not shell.exited.done()
                ):
                    await current.wait()
            finally:
                timer.cancel()
            outcome, exit_code, cwd = await self._settle(current, shell)
            return self._result(
                current, notes, outcome=outcome, exit_code=exit_code, cwd=cwd, started=started
            )
        except asyncio.CancelledError:
            if current is not None and self._command is current:
                # The caller went away mid-command: stop it in the background, and keep the
                # lock until then so the next command does not queue behind a stray one.
                handed_off = True
                task = self._loop.create_task(self._abandon(current))
                self._config.background.add(task)
                task.add_done_callback(self._config.background.discard)
            raise
        finally:
            if not handed_off:
                self._command = None if self._command is current else self._command
                self._lock.release()

    def interrupt(self) -> bool:
        current = self._command
        return current is not None and current.fire(Outcome.INTERRUPTED)

    async def terminate(self, *, closing: bool, note: str) -> None:
        """Kills the shell and every process of the session; a running command ends at once."""
        self.closed = self.closed or closing
        if self._command is not None:
            self._command.fire(Outcome.INTERRUPTED, note, hard=True)
        async with self._lock:
            # The shell goes too, so stopping first cannot let it run on (kill_until_none_listed).
            await asyncio.to_thread(kill_until_gone, self.processes.members, stop_first=True)
            if self._shell is not None:
                await asyncio.wait({self._shell.exited}, timeout=SHELL_RESPONSE_S)
            self._retire_shell()
            self._notes.clear()
            self._previous_scope = None
            if closing:
                self._output.close()
                os.close(self._stdout_sink)
                os.close(self._stderr_sink)

    async def prestart(self) -> None:
        """Start the shell now, idle until the first command, so that command does not wait
        for bash to start (a claimed sandbox's first command). The shell's move under the
        limits (a cgroup write, slow on a node busy starting containers) runs in a worker
        thread, holding the session's lock so no command reaches the shell before it. A
        failure is left to the first command, which starts a shell itself and says why."""
        async with self._lock:
            if self.closed or self._shell is not None:
                return
            try:
                shell = self._spawn(confine=False)
            except UnavailableError as error:
                log.warning(
                    "shell_prestart_failed", extra={"session": self.name, "error": str(error)}
                )
                return
            self._shell = shell
            limits = self._config.limits
            if limits is None:
                return
            try:
                await asyncio.to_thread(limits.attach, shell.pid)
            except OSError as error:
                shell.signal(signal.SIGKILL)
                self._retire_shell()
                log.warning(
                    "shell_prestart_failed", extra={"session": self.name, "error": str(error)}
                )

    def _live_shell(self, notes: list[str]) -> Shell:
        shell = self._shell
        if shell is not None and not shell.exited.done():
            return shell
        if shell is not None:
            notes.append(
                f"[The previous shell had exited (status {shell_status(shell.returncode or 0)})."
                f" This command ran in a new shell in {self._config.workdir}.]"
            )
            self._retire_shell()
        self._shell = self._spawn()
        return self._shell

    def _spawn(self, *, confine: bool = True) -> Shell:
        """A new shell, waiting for its first command; under the limits unless `confine` is
        False (the caller moves it there before any command)."""
        config = self._config
        shell = spawn_shell(
            bash=config.bash,
            driver_dir=config.driver_dir,
            workdir=config.workdir,
            env=self._env,
            stdout_fd=self._stdout_sink,
            stderr_fd=self._stderr_sink,
            reaper=config.reaper,
            on_status=self._on_status,
        )
        self.processes.shell_pids.add(shell.pid)
        shell.exited.add_done_callback(self._on_shell_exit)
        if confine and config.limits is not None:
            try:
                # The shell is still waiting for its first command: nothing ran unlimited.
                config.limits.attach(shell.pid)
            except OSError as error:
                shell.signal(signal.SIGKILL)
                shell.close()
                raise UnavailableError(f"Could not apply the process limits: {error}") from error
        log.info("shell_started", extra={"session": self.name, "pid": shell.pid})
        return shell

    def _on_status(self, shell: Shell, seq: int, status: int, cwd: str) -> None:
        current = self._command
        if shell is self._shell and current is not None and current.seq == seq:
            current.status = (status, cwd)
            current.wake()

    def _on_shell_exit(self, exited: asyncio.Future[int]) -> None:
        current = self._command
        if current is not None:
            current.wake()

    async def _settle(
        self, current: RunningCommand, shell: Shell
    ) -> tuple[Outcome, int | None, str]:
        """Turns the event that ended the wait into an outcome; stops the command if needed."""
        workdir = str(self._config.workdir)
        if current.status is not None and current.trigger is None:
            return Outcome.EXITED, current.status[0], current.status[1]
        if current.trigger is None:
            # The outcome says it all (the control plane words it), unless the shell only
            # exited because the command broke the driver's private pipes.
            code = shell_status(shell.returncode or 0)
            if code == LOST_CHANNELS_STATUS:
                current.notes.append(
                    "[The command broke the shell's connection to the sandbox (its private file"
                    " descriptors were closed, or `ulimit -n` was set below 32), so the shell"
                    " had to end. Lower a limit for one program only, e.g."
                    " `(ulimit -n 20; ./prog)`.]"
                )
            self._retire_shell()
            return Outcome.SHELL_EXITED, code, workdir
        outcome: Outcome = current.trigger
        await current.stop(shell, self.processes, session=self.name)
        if current.status is not None:
            status: int | None = None if outcome is Outcome.TIMED_OUT else current.status[0]
            return outcome, status, current.status[1]
        if not current.hard_stop:
            what = "timeout" if outcome is Outcome.TIMED_OUT else "interrupt"
            current.notes.append(
                f"[The shell did not respond to the {what} and was killed. The next command"
                f" starts a new shell in {workdir}: variables, functions, aliases and the"
                " working directory are reset.]"
            )
        self._retire_shell()
        return outcome, None, workdir

    async def _stop_limit_breach(self, notes: list[str]) -> None:
        """Kills a process explosion (a fork bomb) that an earlier command left running.

        Runs when the process limit refused forks since the previous command started and
        that command's processes hold at least half of the limit: attributing the breach
        this way spares another session's small, legitimate background server.
        """
        limits = self._config.limits
        hits = None if limits is None else limits.process_limit_hits()
        previous, seen = self._previous_scope, self._limit_hits_seen
        self._limit_hits_seen = hits
        if limits is None or limits.max_processes is None or hits is None or previous is None:
            return
        if seen is None or hits <= seen:
            return
        started = await asyncio.to_thread(
            lambda: self.processes.started_by(previous, process_table())
        )
        if len(started) * 2 < limits.max_processes:
            return
        # An earlier command's processes: the shell waits on none of them, so they can be
        # stopped before they are killed (a fork bomb refills every slot a kill frees).
        await kill_started(self.processes, previous, 5.0, stop_first=True)
        log.warning(
            "process_limit_breach_stopped", extra={"session": self.name, "count": len(started)}
        )
        notes.append(
            f"[Processes started by an earlier command reached the limit of {limits.max_processes}"
            f" processes; {len(started)} of them were killed.]"
        )

    def _result(
        self,
        current: RunningCommand,
        notes: list[str],
        *,
        outcome: Outcome,
        exit_code: int | None,
        cwd: str,
        started: float,
    ) -> CommandResult:
        stdout, stderr = self._output.end(stderr_notes=notes + current.notes)
        self._previous_scope = current.scope
        self._config.activity()
        log.debug("command_finished", extra={"session": self.name, "outcome": outcome.value})
        return CommandResult(
            stdout=stdout.render(),
            stderr=stderr.render(),
            exit_code=exit_code,
            outcome=outcome,
            stdout_truncated=stdout.truncated,
            stderr_truncated=stderr.truncated,
            stdout_total_bytes=stdout.total_bytes,
            stderr_total_bytes=stderr.total_bytes,
            duration_s=self._loop.time() - started,
            cwd=cwd,
        )

    async def _abandon(self, current: RunningCommand) -> None:
        try:
            current.fire(Outcome.INTERRUPTED)
            shell = self._shell
            if shell is not None:
                await self._settle(current, shell)
            self._output.end(stderr_notes=[])
        finally:
            self._command = None
            self._lock.release()

    def _retire_shell(self) -> None:
        if self._shell is not None:
            self._shell.close()
            self._shell = None
