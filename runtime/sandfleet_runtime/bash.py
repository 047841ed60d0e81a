"""Named persistent bash sessions: one long-lived `bash --noprofile --norc` per session.

The command text never reaches bash's parser as input, so an unbalanced quote or an open
heredoc cannot hang the shell. A driver loop in the shell reads each command as a
NUL-terminated string from a private pipe (fd 250), `eval`s it with stdin at /dev/null,
and reports `<seq> <status> <cwd>` on a second private pipe (fd 251). Completion is that
report, not EOF on the output pipes, so background jobs never hang a call. Both private
fds are closed while the command runs, so nothing it starts inherits them.

What persists between calls: cwd, variables, functions, aliases, `set -x`, `$?` and the
directory stack. `set -e` lasts one call: it is switched off after each command, so that
a failing command later cannot end the session. Errors read like `bash -c` output
(`bash: line 1: foo: command not found`) because the driver is sourced from a file named
`bash`. `exit` ends the shell; the next call starts a new one in the working directory.

A timeout or interrupt sends SIGINT to the shell, whose INT trap unwinds the running
command (loops and nested functions too, through extdebug's DEBUG-trap return) back to
the driver, and signals every process the command started. A shell that does not come
back (a builtin loop that ignores SIGINT) is killed and replaced, and the result says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import functools
import logging
import math
import os
import re
import secrets
import shutil
import signal
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from sandfleet_runtime.errors import InvalidArgumentError, ResourceExhaustedError, UnavailableError
from sandfleet_runtime.limits import SessionLimits
from sandfleet_runtime.output import OutputListener, OutputStream, SessionOutput
from sandfleet_runtime.processes import (
    ChildReaper,
    CommandScope,
    SessionProcesses,
    kill_until_gone,
    pipe,
    process_table,
    signal_all,
    spawn_session_leader,
)

__all__ = [
    "BashSessions",
    "CommandResult",
    "Outcome",
    "OutputListener",
    "OutputStream",
]

log = logging.getLogger(__name__)

DEFAULT_SESSION = "default"
SESSION_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MARKER_VARIABLE = "SANDFLEET_SESSION_ID"
"""Exported into every session; lets close() find daemons that left the shell's tree."""

_COMMAND_FD = 250  # high, so that the user's own `exec 3>file` cannot take them over
_STATUS_FD = 251
_CHILD_FDS = frozenset({0, 1, 2, _COMMAND_FD, _STATUS_FD})
_INTERRUPT_GRACE_S = 1.0
_SHELL_RESPONSE_S = 2.0
_KILL_ROUND_S = 0.1

# The bootstrap: helpers, the INT trap, and a loop that (re)sources the driver file. It
# only gets control back when the running command was unwound or said `return`. It reaches
# bash through the environment, so that `ps` shows a one-line command for the shell.
# Every command in both scripts is a keyword or goes through `builtin`: the user may
# define functions named `:`, `read` or `cd` (the fork bomb defines `:`).
_BOOTSTRAP = r"""builtin unset __sandfleet_bootstrap BASH_EXECUTION_STRING
builtin shopt -s expand_aliases
__sandfleet_dir=$1 __sandfleet_home=$2 __sandfleet_pwd=$2 __sandfleet_oldpwd= __sandfleet_seq=0
__sandfleet_last=0 __sandfleet_running= __sandfleet_xtrace= __sandfleet_aborted=
builtin set --
__sandfleet_status() { builtin return "$1"; }
__sandfleet_interrupt() {
    [[ -n $__sandfleet_running ]] || builtin return 0
    __sandfleet_aborted=1
    builtin shopt -s extdebug
    builtin trap '{ if (( ${#BASH_SOURCE[@]} )); then __sandfleet_status 2;
        else builtin trap - DEBUG; builtin shopt -u extdebug; fi; } 2>/dev/null' DEBUG
}
builtin trap '{ __sandfleet_interrupt; } 2>/dev/null' INT
while builtin :; do
    __sandfleet_aborted= __sandfleet_sourced=
    builtin shopt -u sourcepath
    builtin cd -- "$__sandfleet_dir" && builtin . bash
    { __sandfleet_last=$? __sandfleet_running= __sandfleet_flags=$-; builtin set +ex; } 2>/dev/null
    [[ -n $__sandfleet_sourced ]] || builtin exit 97
    if [[ -n $__sandfleet_aborted ]]; then __sandfleet_last=130; fi
    __sandfleet_xtrace=
    if [[ $__sandfleet_flags == *x* ]]; then __sandfleet_xtrace='builtin set -x; '; fi
    builtin printf '%s %s %s\0' "$__sandfleet_seq" "$__sandfleet_last" "${PWD-}" >&251
    __sandfleet_pwd=${PWD-} __sandfleet_oldpwd=${OLDPWD-}
done
"""
# The driver file, all on line 1: bash numbers eval'd lines from the line of the eval,
# so the command's own line 1 is reported as "line 1".
_DRIVER = (
    "; ".join(
        (
            "__sandfleet_sourced=1",
            "builtin shopt -s sourcepath",
            'builtin cd -- "$__sandfleet_pwd" 2>/dev/null || builtin cd -- "$__sandfleet_home"'
            " 2>/dev/null || builtin cd /",
            "if [[ -n $__sandfleet_oldpwd ]]; then OLDPWD=$__sandfleet_oldpwd;"
            " else builtin unset OLDPWD; fi",
            "while builtin :; do IFS= builtin read -r -d '' -u 250 __sandfleet_message"
            " || { (( $? > 128 )) && builtin continue; builtin exit 0; }",
            "__sandfleet_seq=${__sandfleet_message%%$'\\n'*}"
            " __sandfleet_command=${__sandfleet_message#*$'\\n'} __sandfleet_running=1",
            '__sandfleet_status "$__sandfleet_last"',
            'builtin eval "$__sandfleet_xtrace$__sandfleet_command" 250<&- 251>&-',
            "{ __sandfleet_last=$? __sandfleet_running= __sandfleet_flags=$-; builtin set +ex; }"
            " 2>/dev/null",
            "if [[ $__sandfleet_flags == *x* ]]; then __sandfleet_xtrace='builtin set -x; ';"
            " else __sandfleet_xtrace=; fi",
            'builtin printf \'%s %s %s\\0\' "$__sandfleet_seq" "$__sandfleet_last" "${PWD-}" >&251',
            "done",
        )
    )
    + "\n"
)


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


class _SessionClosedError(Exception):
    """The session was closed while the call waited for it; retry on a fresh one."""


def _shell_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


@dataclasses.dataclass(frozen=True, slots=True)
class _Config:
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


class _Shell:
    """One bash process of a session, with its private command and status pipes."""

    def __init__(
        self,
        pid: int,
        command_fd: int,
        status_fd: int,
        exited: asyncio.Future[int],
        on_status: Callable[[_Shell, int, int, str], None],
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


class _Command:
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


class BashSession:
    """One named session: its output pipes, its current shell, and the command in flight."""

    def __init__(self, name: str, config: _Config) -> None:
        self.name = name
        self.closed = False
        self._config = config
        self._loop = asyncio.get_running_loop()
        self._lock = asyncio.Lock()
        marker = f"{os.getpid()}-{secrets.token_hex(6)}"
        self._env = {**config.env, MARKER_VARIABLE: marker}
        self.processes = SessionProcesses(f"{MARKER_VARIABLE}={marker}".encode())
        self._shell: _Shell | None = None
        self._command: _Command | None = None
        self._seq = 0
        self._notes: list[str] = []
        self._previous_scope: CommandScope | None = None
        self._limit_hits_seen: int | None = None
        # The output pipes outlive shells: background jobs of a replaced shell keep writing
        # into them, and their output shows up in later results as on a terminal.
        stdout_fd, self._stdout_sink = pipe(avoid=_CHILD_FDS)
        stderr_fd, self._stderr_sink = pipe(avoid=_CHILD_FDS)
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
        current: _Command | None = None
        handed_off = False
        try:
            if self.closed:
                raise _SessionClosedError
            notes, self._notes = self._notes, []
            await self._stop_limit_breach(notes)
            shell = self._live_shell(notes)
            self._seq += 1
            current = self._command = _Command(self._seq, CommandScope.begin(shell.pid))
            self._output.begin(max_output_chars, listener)
            self._config.activity()
            started = self._loop.time()
            shell.send(b"%d\n%s\0" % (current.seq, command.encode()))
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
            await asyncio.to_thread(kill_until_gone, self.processes.members)
            if self._shell is not None:
                await asyncio.wait({self._shell.exited}, timeout=_SHELL_RESPONSE_S)
            self._retire_shell()
            self._notes.clear()
            self._previous_scope = None
            if closing:
                self._output.close()
                os.close(self._stdout_sink)
                os.close(self._stderr_sink)

    def _live_shell(self, notes: list[str]) -> _Shell:
        shell = self._shell
        if shell is not None and not shell.exited.done():
            return shell
        if shell is not None:
            notes.append(
                f"[The previous shell had exited (status {_shell_status(shell.returncode or 0)})."
                f" This command ran in a new shell in {self._config.workdir}.]"
            )
            self._retire_shell()
        self._shell = self._spawn()
        return self._shell

    def _spawn(self) -> _Shell:
        config = self._config
        driver = config.driver_dir / "bash"
        if not driver.exists():  # something cleaned /tmp: put the driver back
            _write_driver(config.driver_dir)
        command_read, command_write = pipe(avoid=_CHILD_FDS)
        status_read, status_write = pipe(avoid=_CHILD_FDS)
        argv = ["bash", "--noprofile", "--norc", "-c", 'builtin eval "$__sandfleet_bootstrap"']
        argv += ["bash", str(config.driver_dir), str(config.workdir)]
        child_fds = {
            1: self._stdout_sink,
            2: self._stderr_sink,
            _COMMAND_FD: command_read,
            _STATUS_FD: status_write,
        }
        try:
            env = {**self._env, "__sandfleet_bootstrap": _BOOTSTRAP}
            pid = spawn_session_leader(config.bash, argv, env, child_fds)
        except OSError as error:
            os.close(command_write)
            os.close(status_read)
            raise UnavailableError(f"Could not start bash ({config.bash}): {error}") from error
        finally:
            os.close(command_read)
            os.close(status_write)
        exited = config.reaper.watch(pid)  # same loop step as the spawn: no exit can be missed
        self.processes.shell_pids.add(pid)
        shell = _Shell(pid, command_write, status_read, exited, self._on_status)
        exited.add_done_callback(self._on_shell_exit)
        if config.limits is not None:
            try:
                # The shell is still waiting for its first command: nothing ran unlimited.
                config.limits.attach(pid)
            except OSError as error:
                shell.signal(signal.SIGKILL)
                shell.close()
                raise UnavailableError(f"Could not apply the process limits: {error}") from error
        log.info("shell_started", extra={"session": self.name, "pid": pid})
        return shell

    def _on_status(self, shell: _Shell, seq: int, status: int, cwd: str) -> None:
        current = self._command
        if shell is self._shell and current is not None and current.seq == seq:
            current.status = (status, cwd)
            current.wake()

    def _on_shell_exit(self, exited: asyncio.Future[int]) -> None:
        current = self._command
        if current is not None:
            current.wake()

    async def _settle(self, current: _Command, shell: _Shell) -> tuple[Outcome, int | None, str]:
        """Turns the event that ended the wait into an outcome; stops the command if needed."""
        workdir = str(self._config.workdir)
        if current.status is not None and current.trigger is None:
            return Outcome.EXITED, current.status[0], current.status[1]
        if current.trigger is None:
            # The outcome says it all (the control plane words it); no note needed here.
            code = _shell_status(shell.returncode or 0)
            self._retire_shell()
            return Outcome.SHELL_EXITED, code, workdir
        outcome: Outcome = current.trigger
        await self._stop(current, shell)
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

    async def _stop(self, current: _Command, shell: _Shell) -> None:
        """SIGINT for the shell's trap, signals for the command's processes, then SIGKILL."""
        scope = current.scope
        if current.hard_stop:
            shell.signal(signal.SIGKILL)
        else:
            log.info("command_stopping", extra={"session": self.name, "reason": current.trigger})
            shell.signal(signal.SIGINT)
            if current.trigger is Outcome.INTERRUPTED:
                await asyncio.to_thread(self._signal_started, scope, signal.SIGINT)
                await self._await_reply(current, shell, _INTERRUPT_GRACE_S)
            deadline = self._loop.time() + _SHELL_RESPONSE_S
            while not self._replied(current, shell) and self._loop.time() < deadline:
                await self._kill_started(scope, _KILL_ROUND_S)
                await self._await_reply(current, shell, _KILL_ROUND_S)
                shell.signal(signal.SIGINT)
            if not self._replied(current, shell):
                log.warning("shell_unresponsive", extra={"session": self.name, "pid": shell.pid})
                shell.signal(signal.SIGKILL)
        # Whatever the command started and is still alive, background jobs included.
        await self._kill_started(scope, 5.0)
        if current.status is None:
            await asyncio.wait({shell.exited}, timeout=_SHELL_RESPONSE_S)

    @staticmethod
    def _replied(current: _Command, shell: _Shell) -> bool:
        return current.status is not None or shell.exited.done()

    async def _await_reply(self, current: _Command, shell: _Shell, timeout_s: float) -> None:
        if not self._replied(current, shell):
            await current.wait(timeout_s)

    def _signal_started(self, scope: CommandScope, signum: int) -> None:
        signal_all(self.processes.started_by(scope, process_table()), signum)

    async def _kill_started(self, scope: CommandScope, deadline_s: float) -> int:
        select = functools.partial(self.processes.started_by, scope)
        return await asyncio.to_thread(kill_until_gone, select, deadline_s=deadline_s)

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
        await self._kill_started(previous, 5.0)
        log.warning(
            "process_limit_breach_stopped", extra={"session": self.name, "count": len(started)}
        )
        notes.append(
            f"[Processes started by an earlier command reached the limit of {limits.max_processes}"
            f" processes; {len(started)} of them were killed.]"
        )

    def _result(
        self,
        current: _Command,
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

    async def _abandon(self, current: _Command) -> None:
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


def _write_driver(directory: Path) -> None:
    fd = os.open(directory / "bash", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as driver:
        driver.write(_DRIVER)


class BashSessions:
    """All bash sessions of the runtime, by name; what the gRPC servicer calls."""

    def __init__(
        self,
        *,
        workdir: Path,
        env: Mapping[str, str],
        default_timeout_s: float,
        max_timeout_s: float,
        default_max_output_chars: int,
        max_output_chars: int,
        max_sessions: int,
        limits: SessionLimits | None,
        reaper: ChildReaper,
    ) -> None:
        self._workdir = workdir.resolve()
        if not self._workdir.is_dir():
            raise ValueError(f"the bash working directory {workdir} is not a directory")
        self._env = dict(env)
        self._default_timeout_s = default_timeout_s
        self._max_timeout_s = max_timeout_s
        self._default_max_output_chars = default_max_output_chars
        self._max_output_chars = max_output_chars
        self._max_sessions = max_sessions
        self._limits = limits
        self._reaper = reaper
        self._bash = shutil.which("bash", path=self._env.get("PATH", os.defpath)) or "/bin/bash"
        self._driver_dir: Path | None = None
        self._sessions: dict[str, BashSession] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._closed = False
        self.on_activity: Callable[[], None] | None = None
        """Called when a command starts and when it ends (idle tracking)."""

    @property
    def session_count(self) -> int:
        return len(self._sessions)

    @property
    def running_count(self) -> int:
        return sum(1 for session in self._sessions.values() if session.running)

    async def run(
        self,
        session: str,
        command: str,
        *,
        timeout_s: float = 0,
        max_output_chars: int = 0,
        listener: OutputListener | None = None,
    ) -> CommandResult:
        """Runs `command` in the named session ("" is "default"), creating it on first use.

        `timeout_s` and `max_output_chars` of 0 mean the defaults; larger values than the
        configured maxima are lowered to them. A non-zero exit, a timeout or an interrupt
        is a result, not an error.
        """
        name = self._session_name(session)
        if not command.strip():
            raise InvalidArgumentError("No command provided.")
        if "\0" in command:
            raise InvalidArgumentError("The command contains a NUL character; bash cannot run it.")
        try:
            command.encode()
        except UnicodeEncodeError as error:
            raise InvalidArgumentError(f"The command is not valid Unicode text: {error}") from None
        timeout = self._bounded_timeout(timeout_s)
        max_chars = self._bounded_output_chars(max_output_chars)
        while True:
            try:
                return await self._session(name).run(
                    command, timeout_s=timeout, max_output_chars=max_chars, listener=listener
                )
            except _SessionClosedError:
                continue  # closed while this call waited for it: run in a fresh session

    async def interrupt(self, session: str) -> bool:
        """Interrupts the session's running command; False when nothing was running."""
        found = self._sessions.get(self._session_name(session))
        return found is not None and found.interrupt()

    async def restart(self, session: str) -> None:
        """Kills the session's shell and everything it started; the next command starts fresh."""
        found = self._sessions.get(self._session_name(session))
        if found is not None:
            await found.terminate(
                closing=False, note="[The session was restarted while this command was running.]"
            )

    async def close(self, session: str) -> None:
        """Like restart, and forgets the session (it no longer counts towards the maximum)."""
        found = self._sessions.pop(self._session_name(session), None)
        if found is not None:
            await found.terminate(
                closing=True, note="[The session was closed while this command was running.]"
            )

    async def close_all(self) -> None:
        """Graceful shutdown: kills every session and every process the sessions started."""
        self._closed = True
        sessions, self._sessions = list(self._sessions.values()), {}
        note = "[The runtime is shutting down; this command was stopped.]"
        await asyncio.gather(*(found.terminate(closing=True, note=note) for found in sessions))
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        if self._limits is not None:
            await asyncio.to_thread(self._limits.kill_all)
        if self._driver_dir is not None:
            shutil.rmtree(self._driver_dir, ignore_errors=True)
            self._driver_dir = None

    def _session(self, name: str) -> BashSession:
        found = self._sessions.get(name)
        if found is not None:
            return found
        if self._closed:
            raise UnavailableError("The runtime is shutting down; no new commands are accepted.")
        if len(self._sessions) >= self._max_sessions:
            raise ResourceExhaustedError(
                f"Too many bash sessions: the limit is {self._max_sessions}. Run the command in"
                " an existing session (for example 'default') or close one first."
            )
        if self._driver_dir is None:
            self._driver_dir = Path(tempfile.mkdtemp(prefix="sandfleet-bash-"))
            _write_driver(self._driver_dir)
        config = _Config(
            workdir=self._workdir,
            env=self._env,
            bash=self._bash,
            driver_dir=self._driver_dir,
            default_max_output_chars=self._default_max_output_chars,
            limits=self._limits,
            reaper=self._reaper,
            activity=self._notify_activity,
            background=self._background,
        )
        found = self._sessions[name] = BashSession(name, config)
        return found

    def _notify_activity(self) -> None:
        if self.on_activity is not None:
            self.on_activity()

    @staticmethod
    def _session_name(session: str) -> str:
        name = session or DEFAULT_SESSION
        if not SESSION_NAME.fullmatch(name):
            raise InvalidArgumentError(
                f"Invalid session name {session!r}: use 1 to 64 letters, digits, '.', '_' or '-'."
            )
        return name

    def _bounded_timeout(self, timeout_s: float) -> float:
        if math.isnan(timeout_s) or timeout_s < 0:
            raise InvalidArgumentError(
                f"Invalid timeout {timeout_s}: it must be 0 or more seconds."
            )
        return min(timeout_s or self._default_timeout_s, self._max_timeout_s)

    def _bounded_output_chars(self, max_output_chars: int) -> int:
        if max_output_chars < 0:
            raise InvalidArgumentError(
                f"Invalid max_output_chars {max_output_chars}: it must be 0 or more."
            )
        return min(max_output_chars or self._default_max_output_chars, self._max_output_chars)
